#!/usr/bin/env python3
"""What span_profile adds per span, in instructions: deterministic, so unlike CPU time it is
not blurred by the neighbours of a shared VM. Each arm runs in a fresh interpreter under
valgrind's callgrind twice, with --small and --large operations; the difference divided by
the extra operations is the cost of one operation, start-up cancelled out.

  bare      a TracerProvider without our processor (the agent runs; a build that wraps the
            runtime context has its wrapper taken out)
  ours      a TracerProvider with span_profile.SpanProcessor()
  idle      (--floor) span_profile.SpanProcessor() with no agent behind its entry points: what
            the SDK's loop over one processor and pyo3's calls cost before any work
  noop      (--floor) a Python SpanProcessor whose methods do nothing

Operations (--op):
  span      `with tracer.start_as_current_span("op"): pass`: start, attach, detach, end
  attach    `detach(attach(ctx))` of a context holding one of the provider's spans: what
            context propagation without a new span costs
  request   one request of ../shared/bench/workload.py's shape: a SERVER root with
            `http.route` and six children, nested as there (figures are per request; divide
            by 7 for a span)

Needs valgrind (`apt-get install valgrind`). Run it with the interpreter of the venv whose
span_profile build you want to measure:

  target/venvs/3.12.1/bin/python benches/overhead/hook_instructions.py --op span
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile


def child(arm, op, n):
    import opentelemetry.context as otel_context
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    import span_profile

    provider = TracerProvider()
    if arm in ("ours", "idle"):
        provider.add_span_processor(span_profile.SpanProcessor())
    elif arm == "noop":
        from opentelemetry.sdk.trace import SpanProcessor

        class NoOp(SpanProcessor):
            def on_start(self, span, parent_context=None):
                pass

            def on_end(self, span):
                pass

        provider.add_span_processor(NoOp())
    tracer = provider.get_tracer("hook-instructions")
    span_profile.start(service="hook-instructions", output=tempfile.mkdtemp(prefix="hook-instr-"),
                       sample_rate_hz=1, window_s=3600)
    if arm == "idle":
        span_profile._native.set_span_hooks(None)  # the entry points run and find no agent
    runtime = otel_context._RUNTIME_CONTEXT
    if arm == "bare":
        otel_context._RUNTIME_CONTEXT = getattr(runtime, "original", runtime)
    if op == "span":
        for _ in range(n):
            with tracer.start_as_current_span("op"):
                pass
    elif op == "request":
        server = trace.SpanKind.SERVER
        for i in range(n):
            route = "/checkout/a" if i % 2 == 0 else "/checkout/b"
            with tracer.start_as_current_span("request", kind=server, attributes={"http.route": route}):
                with tracer.start_as_current_span("auth.check"):
                    pass
                with tracer.start_as_current_span("pricing.calculate"):
                    with tracer.start_as_current_span("parse_dates"):
                        pass
                    with tracer.start_as_current_span("apply_discount"):
                        pass
                    with tracer.start_as_current_span("decimal.quantize"):
                        pass
                with tracer.start_as_current_span("render.json"):
                    pass
    else:
        span = tracer.start_span("held")
        ctx = trace.set_span_in_context(span)
        attach, detach = otel_context.attach, otel_context.detach
        for _ in range(n):
            detach(attach(ctx))
        span.end()


def instructions(arm, op, n):
    """Instructions the child's main thread ran: the thread that makes the spans. The agent's
    sampler and export threads are left out: they tick by the wall clock, so their share
    follows how long the run took under valgrind (and how loaded the machine was), which moved
    the per-request figure of one build by 7,700 between two runs."""
    # A fixed hash seed: string hashes decide dict layouts and so the instructions of every
    # lookup, which otherwise move the per-span figure by about a thousand between runs.
    env = dict(os.environ, PYTHONHASHSEED="0")
    with tempfile.TemporaryDirectory(prefix="hook-instr-cg-") as d:
        base = os.path.join(d, "cg.out")
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", "--separate-threads=yes",
             "--callgrind-out-file=" + base, sys.executable,
             os.path.abspath(__file__), "--child", arm, op, str(n)],
            capture_output=True, text=True, check=True, env=env)
        try:
            with open(base + "-01") as f:
                main_thread = f.read()
        except OSError:
            sys.exit("no callgrind file for the main thread:\n" + out.stderr[-2000:])
    m = re.search(r"^(?:summary|totals): (\d+)", main_thread, re.M)
    if not m:
        sys.exit("no instruction count in the main thread's callgrind file")
    return int(m.group(1))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", choices=("span", "attach", "request"), default="span")
    ap.add_argument("--small", type=int, default=2000)
    ap.add_argument("--large", type=int, default=12000)
    ap.add_argument("--floor", action="store_true",
                    help="also the idle and noop arms: what any processor costs before its work")
    args = ap.parse_args()
    per_op = {}
    for arm in ("bare", "ours") + (("idle", "noop") if args.floor else ()):
        small, large = instructions(arm, args.op, args.small), instructions(arm, args.op, args.large)
        per_op[arm] = (large - small) / (args.large - args.small)
        print("%-5s %s: %.0f instructions per operation" % (arm, args.op, per_op[arm]))
    added = per_op["ours"] - per_op["bare"]
    print("added by span_profile: %.0f instructions per %s (%.1f%% of the bare %.0f)"
          % (added, args.op, 100 * added / per_op["bare"], per_op["bare"]))
    for arm in ("idle", "noop"):
        if arm in per_op:
            print("added by the %s arm: %.0f instructions per %s" % (arm, per_op[arm] - per_op["bare"], args.op))


if __name__ == "__main__":
    main()
