#!/usr/bin/env python3
"""What span_profile adds to each span: start+end of a span made current
(`with tracer.start_as_current_span(...)`, so one context attach and detach), with and without
span_profile, measured alternately (A B A B ...) in the same process.

  A  bare SDK: a TracerProvider with no processor, OpenTelemetry's own runtime context
  B  span_profile: SpanProcessor on the provider and the sampler running at --rate Hz (the
     runtime context is left alone since ADR 0011; a build that wraps it, as earlier ones did,
     gets its wrapper in arm B only)

--arm picks what B is, to put the figure beside its floor:
  ours  (default) span_profile.SpanProcessor() fed by the running agent
  idle  span_profile.SpanProcessor() with no agent behind its entry points: the SDK's call
        into a native processor and pyo3's entry, with no work
  noop  a Python SpanProcessor whose methods do nothing: the floor of any processor
  pyroscope-otel
        a peer: pyroscope-otel's PyroscopeSpanProcessor, with pyroscope-io's agent sampling at
        --rate Hz in place of ours (pip install pyroscope-io pyroscope-otel; its uploads go to
        a closed local port and fail, which costs nothing per span)

Many short rounds; prints the minimum and median CPU time per span of the calling thread for
each arm, and the difference. On a busy machine trust the minima: noise only adds time.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import opentelemetry.context as otel_context
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.trace import SpanKind

import span_profile


def per_span_ns(tracer, n, shape="span"):
    """CPU time of this thread per span: on a shared machine, wall time mostly measures the
    neighbours. `shape` "span": root spans with no attributes; "request": requests of
    ../shared/bench/workload.py's shape (a SERVER root with `http.route` and six children),
    the time divided by their 7 spans; "workload": those requests doing the workload's work."""
    t0 = time.thread_time_ns()
    if shape == "span":
        for _ in range(n):
            with tracer.start_as_current_span("op"):
                pass
        return (time.thread_time_ns() - t0) / n
    server, start = SpanKind.SERVER, tracer.start_as_current_span
    requests = max(1, n // 7)
    if shape == "workload":
        return _workload_requests(tracer, requests) / (7 * requests)
    for i in range(requests):
        with start("request", kind=server, attributes={"http.route": "/checkout/a" if i % 2 else "/checkout/b"}):
            with start("auth.check"):
                pass
            with start("pricing.calculate"):
                with start("parse_dates"):
                    pass
                with start("apply_discount"):
                    pass
                with start("decimal.quantize"):
                    pass
            with start("render.json"):
                pass
    return (time.thread_time_ns() - t0) / (7 * requests)


WORKLOAD = None  # ../shared/bench/workload.py, for --shape workload
# benches/overhead/checkout.py: the request fixed_load_service.py serves.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benches", "overhead"))
import checkout  # noqa: E402


def _workload_requests(tracer, requests):
    """CPU time of this thread for `requests` requests of the bench's checkout with its work
    between the spans, as fixed_load_service.py serves them: the hooks then run with the
    caches the request's own work left, not in a hot loop."""
    t0 = time.thread_time_ns()
    for i in range(requests):
        checkout.handle(tracer, WORKLOAD, i)
    return time.thread_time_ns() - t0


class NoOp(SpanProcessor):
    """The --arm noop processor."""

    def on_start(self, span, parent_context=None):
        pass

    def on_end(self, span):
        pass


def processor(args):
    """Arm B's span processor."""
    if args.arm == "noop":
        return NoOp()
    if args.arm == "pyroscope-otel":
        from pyroscope.otel import PyroscopeSpanProcessor

        return PyroscopeSpanProcessor()
    return span_profile.SpanProcessor()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spans", type=int, default=2000, help="spans per round")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--rate", type=int, default=100)
    ap.add_argument("--shape", choices=("span", "request", "workload"), default="span",
                    help="root spans alone, requests of the bench workload's shape, or those requests "
                         "with the workload's own work between the spans (needs --bench)")
    ap.add_argument("--bench", help="the directory of workload.py, for --shape workload (../shared/bench)")
    ap.add_argument("--arm", choices=("ours", "idle", "noop", "pyroscope-otel"), default="ours",
                    help="what arm B runs (see above)")
    args = ap.parse_args()
    if args.shape == "workload":
        global WORKLOAD
        if not args.bench:
            ap.error("--shape workload needs --bench, the directory of workload.py (../shared/bench)")
        sys.path.insert(0, os.path.abspath(args.bench))
        import workload

        WORKLOAD = workload

    bare = TracerProvider().get_tracer("bare")
    ours_provider = TracerProvider()
    ours_provider.add_span_processor(processor(args))
    ours = ours_provider.get_tracer("ours")
    if args.arm == "pyroscope-otel":
        import pyroscope

        pyroscope.configure(application_name="hook-cost", server_address="http://127.0.0.1:9",
                            sample_rate=args.rate)
        agent = None
    else:
        agent = span_profile.start(service="hook-cost", output=tempfile.mkdtemp(prefix="hook-cost-"),
                                   sample_rate_hz=args.rate, window_s=600)
    if args.arm == "idle":
        span_profile._native.set_span_hooks(None)  # the entry points run and find no agent
    hook = otel_context._RUNTIME_CONTEXT
    original = getattr(hook, "original", hook)  # a wrapper installed by start(), if any

    per_span_ns(bare, 2000, args.shape)  # warm-up
    per_span_ns(ours, 2000, args.shape)
    a, b = [], []
    for r in range(args.rounds):
        otel_context._RUNTIME_CONTEXT = original
        a.append(per_span_ns(bare, args.spans, args.shape))
        otel_context._RUNTIME_CONTEXT = hook
        b.append(per_span_ns(ours, args.spans, args.shape))
    if agent is not None:
        agent.stop()
    ma, mb = statistics.median(a), statistics.median(b)
    diffs = sorted(y - x for x, y in zip(a, b))
    print("median per span: bare %.0f ns (%.0f-%.0f), %s %.0f ns (%.0f-%.0f)"
          % (ma, min(a), max(a), args.arm, mb, min(b), max(b)))
    print("added per span (start+end+attach+detach): %.0f ns by the minima, %.0f ns by the medians "
          "(paired differences: median %.0f, quartiles %.0f-%.0f)"
          % (min(b) - min(a), mb - ma, statistics.median(diffs), diffs[len(diffs) // 4], diffs[3 * len(diffs) // 4]))


if __name__ == "__main__":
    main()
