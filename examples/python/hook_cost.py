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

--turns puts the requests on two threads that take turns, one request each, as a threaded
service's requests land on whichever thread is free: `two-cores` pins the threads to two CPUs
(what the hooks' shared state and the span objects they hold cost when requests move between
cores), `one-core` pins both to one (the same turns, no core change):

    python examples/python/hook_cost.py --shape workload --bench ../shared/bench --turns two-cores

--evict MB copies MB MiB before each request, outside the time measured, so that each request's
hooks meet cold caches, as in a service (32 reads and writes 64 MiB, twice the last-level cache
of the VM the figures come from):

    python examples/python/hook_cost.py --shape request --evict 32

Many short rounds, the arms' order swapped every round (A B, B A, ...); prints the minimum and
median CPU time per span of the calling thread (with --turns, of the two threads) for each arm,
and the difference. On a busy machine trust the minima: noise only adds time.
"""
import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

import opentelemetry.context as otel_context
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.trace import SpanKind

import span_profile


WORKLOAD = None  # ../shared/bench/workload.py, for --shape workload
# benches/overhead/checkout.py: the request fixed_load_service.py serves.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benches", "overhead"))
import checkout  # noqa: E402


def _request(tracer, i):
    """One request of ../shared/bench/workload.py's shape, no work: a SERVER root with
    `http.route` and six children."""
    start = tracer.start_as_current_span
    with start("request", kind=SpanKind.SERVER, attributes={"http.route": "/checkout/a" if i % 2 else "/checkout/b"}):
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


def one_request(tracer, shape, i):
    """Request `i` of `shape` ("request" or "workload"): 7 spans."""
    if shape == "workload":
        checkout.handle(tracer, WORKLOAD, i)
    else:
        _request(tracer, i)


def per_span_ns(tracer, n, shape="span"):
    """CPU time of this thread per span: on a shared machine, wall time mostly measures the
    neighbours. `shape` "span": root spans with no attributes; "request": requests of
    ../shared/bench/workload.py's shape (a SERVER root with `http.route` and six children),
    the time divided by their 7 spans; "workload": those requests doing the workload's work
    (the hooks then run with the caches the request's own work left, not in a hot loop)."""
    t0 = time.thread_time_ns()
    if shape == "span":
        for _ in range(n):
            with tracer.start_as_current_span("op"):
                pass
        return (time.thread_time_ns() - t0) / n
    requests = max(1, n // 7)
    if EVICT is None:
        for i in range(requests):
            one_request(tracer, shape, i)
        return (time.thread_time_ns() - t0) / (7 * requests)
    cpu_ns = 0
    for i in range(requests):
        EVICT.run()
        t0 = time.thread_time_ns()
        one_request(tracer, shape, i)
        cpu_ns += time.thread_time_ns() - t0
    return cpu_ns / (7 * requests)


class Evict:
    """Copies `mb` MiB before each request, outside the time measured: the caches a request then
    meets hold little of the previous one's, as in a service whose requests arrive between
    other work (the kernel's network stack, other processes)."""

    def __init__(self, mb):
        self._src, self._dst = bytearray(mb << 20), bytearray(mb << 20)

    def run(self):
        self._dst[:] = self._src


EVICT = None  # an Evict with --evict


class TakingTurns:
    """Two threads that take turns, one request each, as a threaded service's requests land on
    whichever of its threads is free: what one request's hooks left in the caches and in the
    hooks' shared state (the recorder, the span and span-object tables, the span objects held
    until a later start lets them go) is then met by the other thread, on the other core when
    `cpus` names two. `per_span_ns` is the two threads' CPU time over the spans."""

    def __init__(self, cpus):
        self._go = [threading.Event(), threading.Event()]
        self._done = threading.Event()
        self._job = None
        self._error = None
        for k, cpu in enumerate(cpus):
            threading.Thread(target=self._run, args=(k, cpu), daemon=True).start()

    def _run(self, k, cpu):
        os.sched_setaffinity(0, {cpu})  # this thread only
        while True:
            self._go[k].wait()
            self._go[k].clear()
            tracer, shape, requests = self._job
            if EVICT is not None:
                EVICT.run()
            t0 = time.thread_time_ns()
            try:
                one_request(tracer, shape, self._i)
            except BaseException as e:  # handed to the measuring thread, which raises it
                self._error = e
                self._done.set()
                return
            self._cpu_ns += time.thread_time_ns() - t0
            self._i += 1
            # The other thread starts only once this one has written its time.
            (self._done if self._i >= requests else self._go[1 - k]).set()

    def per_span_ns(self, tracer, n, shape):
        requests = max(1, n // 7)
        self._job, self._i, self._cpu_ns = (tracer, shape, requests), 0, 0
        self._done.clear()
        self._go[0].set()
        self._done.wait()
        if self._error is not None:
            raise RuntimeError("a request failed on a turn-taking thread") from self._error
        return self._cpu_ns / (7 * requests)


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
    global EVICT, WORKLOAD
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
    ap.add_argument("--turns", choices=("off", "one-core", "two-cores"), default="off",
                    help="requests on two threads taking turns, pinned to one core or two (see above)")
    ap.add_argument("--evict", type=int, metavar="MB",
                    help="copy MB MiB before each request, untimed, so each meets cold caches")
    args = ap.parse_args()
    if args.evict is not None and args.shape == "span":
        ap.error("--evict takes requests: --shape request or --shape workload")
    if args.evict is not None:
        EVICT = Evict(args.evict)
    if args.turns != "off" and args.shape == "span":
        ap.error("--turns takes requests: --shape request or --shape workload")
    if args.turns == "two-cores" and len(os.sched_getaffinity(0)) < 2:
        ap.error("--turns two-cores needs two CPUs; this process may use %d" % len(os.sched_getaffinity(0)))
    if args.shape == "workload":
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

    measure = per_span_ns
    if args.turns != "off":
        cpus = sorted(os.sched_getaffinity(0))  # the first one or two this process may use
        measure = TakingTurns((cpus[0], cpus[1] if args.turns == "two-cores" else cpus[0])).per_span_ns
    measure(bare, 2000, args.shape)  # warm-up
    measure(ours, 2000, args.shape)
    a, b = [], []
    for r in range(args.rounds):
        for arm in ("ab" if r % 2 == 0 else "ba"):
            if arm == "a":
                otel_context._RUNTIME_CONTEXT = original
                a.append(measure(bare, args.spans, args.shape))
            else:
                otel_context._RUNTIME_CONTEXT = hook
                b.append(measure(ours, args.spans, args.shape))
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
