#!/usr/bin/env python3
"""What span_profile adds to each span: start+end of a span made current
(`with tracer.start_as_current_span(...)`, so one context attach and detach), with and without
span_profile, measured alternately (A B A B ...) in the same process.

  A  bare SDK: a TracerProvider with no processor, OpenTelemetry's own runtime context
  B  span_profile: SpanProcessor on the provider and the sampler running at --rate Hz (the
     runtime context is left alone since ADR 0011; a build that wraps it, as earlier ones did,
     gets its wrapper in arm B only)

Many short rounds; prints the minimum and median CPU time per span of the calling thread for
each arm, and the difference. On a busy machine trust the minima: noise only adds time.
"""
import argparse
import statistics
import tempfile
import time

import opentelemetry.context as otel_context
from opentelemetry.sdk.trace import TracerProvider

import span_profile


def per_span_ns(tracer, n):
    """CPU time of this thread per span: on a shared machine, wall time mostly measures the
    neighbours."""
    t0 = time.thread_time_ns()
    for _ in range(n):
        with tracer.start_as_current_span("op"):
            pass
    return (time.thread_time_ns() - t0) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spans", type=int, default=2000, help="spans per round")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--rate", type=int, default=100)
    args = ap.parse_args()

    bare = TracerProvider().get_tracer("bare")
    ours_provider = TracerProvider()
    ours_provider.add_span_processor(span_profile.SpanProcessor())
    ours = ours_provider.get_tracer("ours")
    agent = span_profile.start(service="hook-cost", output=tempfile.mkdtemp(prefix="hook-cost-"),
                               sample_rate_hz=args.rate, window_s=600)
    hook = otel_context._RUNTIME_CONTEXT
    original = getattr(hook, "original", hook)  # a wrapper installed by start(), if any

    per_span_ns(bare, 2000)  # warm-up
    per_span_ns(ours, 2000)
    a, b = [], []
    for r in range(args.rounds):
        otel_context._RUNTIME_CONTEXT = original
        a.append(per_span_ns(bare, args.spans))
        otel_context._RUNTIME_CONTEXT = hook
        b.append(per_span_ns(ours, args.spans))
    agent.stop()
    ma, mb = statistics.median(a), statistics.median(b)
    diffs = sorted(y - x for x, y in zip(a, b))
    print("median per span: bare %.0f ns (%.0f-%.0f), span_profile %.0f ns (%.0f-%.0f)"
          % (ma, min(a), max(a), mb, min(b), max(b)))
    print("added per span (start+end+attach+detach): %.0f ns by the minima, %.0f ns by the medians "
          "(paired differences: median %.0f, quartiles %.0f-%.0f)"
          % (min(b) - min(a), mb - ma, statistics.median(diffs), diffs[len(diffs) // 4], diffs[3 * len(diffs) // 4]))


if __name__ == "__main__":
    main()
