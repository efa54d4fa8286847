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
  workload  the same request doing the workload's own work between the spans (--bench, the
            date parsing at fixed_load_service.py's --work 4): with --cache-sim, what the
            hooks cost in cache misses when the request's work has evicted them

--cache-sim also counts, per operation, callgrind's simulated L1 instruction and data misses
(I1mr, D1mr) and last-level misses (a 64 KiB I1, 48 KiB D1 and 8 MiB last level, as
interference.py).

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
    elif op == "workload":
        sys.path.insert(0, os.environ["HOOK_INSTR_BENCH"])
        import workload

        import checkout  # this directory's: the request fixed_load_service.py serves

        for i in range(n):
            checkout.handle(tracer, workload, i)
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


def instructions(arm, op, n, cache_sim=False, bench=None):
    """Instructions the child's main thread ran: the thread that makes the spans. The agent's
    sampler and export threads are left out: they tick by the wall clock, so their share
    follows how long the run took under valgrind (and how loaded the machine was), which moved
    the per-request figure of one build by 7,700 between two runs."""
    # A fixed hash seed: string hashes decide dict layouts and so the instructions of every
    # lookup, which otherwise move the per-span figure by about a thousand between runs.
    env = dict(os.environ, PYTHONHASHSEED="0")
    if bench:
        env["HOOK_INSTR_BENCH"] = os.path.abspath(bench)
    sim = ["--cache-sim=yes", "--I1=65536,8,64", "--D1=49152,12,64", "--LL=8388608,16,64"] if cache_sim else []
    with tempfile.TemporaryDirectory(prefix="hook-instr-cg-") as d:
        base = os.path.join(d, "cg.out")
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", "--separate-threads=yes"] + sim + [
             "--callgrind-out-file=" + base, sys.executable,
             os.path.abspath(__file__), "--child", arm, op, str(n)],
            capture_output=True, text=True, check=True, env=env)
        try:
            with open(base + "-01") as f:
                main_thread = f.read()
        except OSError:
            sys.exit("no callgrind file for the main thread:\n" + out.stderr[-2000:])
    m = re.search(r"^(?:summary|totals): ([\d ]+)$", main_thread, re.M)
    e = re.search(r"^events: (.+)$", main_thread, re.M)
    if not m or not e:
        sys.exit("no instruction count in the main thread's callgrind file")
    return dict(zip(e.group(1).split(), map(int, m.group(1).split())))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", choices=("span", "attach", "request", "workload"), default="span")
    ap.add_argument("--cache-sim", action="store_true", help="also count simulated cache misses")
    ap.add_argument("--bench", help="the directory of workload.py, for --op workload (../shared/bench)")
    ap.add_argument("--small", type=int, default=2000)
    ap.add_argument("--large", type=int, default=12000)
    ap.add_argument("--floor", action="store_true",
                    help="also the idle and noop arms: what any processor costs before its work")
    args = ap.parse_args()
    if args.op == "workload" and not args.bench:
        ap.error("--op workload needs --bench, the directory of workload.py (../shared/bench)")
    per_op, misses = {}, {}
    for arm in ("bare", "ours") + (("idle", "noop") if args.floor else ()):
        small, large = (instructions(arm, args.op, n, args.cache_sim, args.bench) for n in (args.small, args.large))
        per = {k: (large[k] - small[k]) / (args.large - args.small) for k in large}
        per_op[arm] = per["Ir"]
        print("%-5s %s: %.0f instructions per operation" % (arm, args.op, per_op[arm]))
        if args.cache_sim:
            misses[arm] = per
            print("      simulated misses per operation: " + ", ".join(
                "%s %.0f" % (k, per[k]) for k in ("I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw") if k in per))
    if args.cache_sim:
        print("added by span_profile, misses per %s: " % args.op + ", ".join(
            "%s %+.0f" % (k, misses["ours"][k] - misses["bare"][k])
            for k in ("I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw") if k in misses["bare"]))
    added = per_op["ours"] - per_op["bare"]
    print("added by span_profile: %.0f instructions per %s (%.1f%% of the bare %.0f)"
          % (added, args.op, 100 * added / per_op["bare"], per_op["bare"]))
    for arm in ("idle", "noop"):
        if arm in per_op:
            print("added by the %s arm: %.0f instructions per %s" % (arm, per_op[arm] - per_op["bare"], args.op))


if __name__ == "__main__":
    main()
