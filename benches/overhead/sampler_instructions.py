#!/usr/bin/env python3
"""The sampler thread's instructions per tick, counted by callgrind: repeatable where CPU time is
too noisy to resolve a change of a few percent (docs/benchmarks.md, "How to measure").

Each run is a fresh interpreter under `valgrind --tool=callgrind --separate-threads=yes` with
THREADS threads parked in `Event.wait()` (with --in-span, inside a SERVER span and a child, as
a request thread waiting on I/O is) and the agent at 100 Hz, budget off, for SHORT and then
LONG seconds; the sampler's count is its thread's (the one whose profile runs the core's
`TickSink`). Instructions per tick is the difference between the two runs over the difference
in ticks, so start-up and warm-up cancel out.

    python benches/overhead/sampler_instructions.py --python A/bin/python [--against B/bin/python] \\
        --threads 0 64 [--short 2 --long 6] [--in-span] [--keep DIR] [--cache-sim [--evict MB]]

With --keep, the long runs' callgrind files stay in DIR (`<arm>-<threads>.out`), for
`callgrind_annotate --inclusive=yes DIR/B-64.out`: where the sampler's instructions go (start-up
included).

With --cache-sim, callgrind also simulates the caches (its L1 and last level, this machine's
sizes) and the sampler's data-cache misses a tick are printed beside its instructions. With
--evict MB as well, a thread of the child (marked as the profiler's own, so not walked) copies
MB MiB over and over, so that between two ticks the sampler's lines are evicted as a service's
work evicts them. Under valgrind that thread's timing makes the counts swing by a quarter
between runs of one build; without it, 64 parked threads' state already overflows the
simulated 32 KiB L1 from one tick to the next, so the misses a parked thread a tick are about
the lines its tick touches: what a change of layout cuts and instructions do not show.

Notes: callgrind counts each iteration of `rep movsb` (the guarded copy, ADR 0009) as one
instruction, so copies weigh far more here than on the CPU; compare builds with each other, not
with time.
"""
import argparse
import glob
import os
import shutil
import subprocess
import tempfile

from parked import child_env

CHILD = r"""
import sys, time
import span_profile
n, seconds, out, in_span = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
evict_mb = int(sys.argv[5])
if evict_mb:
    import threading
    def evict():
        # Not walked: the profiler's own threads are neither sampled nor counted, so the
        # sampler's counts a tick are the parked threads' and its own, not this copy's stack.
        from span_profile import _native
        if not _native.mark_own_thread():
            raise SystemExit("no room to mark the evicting thread as the profiler's own")
        src, dst = bytes(evict_mb << 20), bytearray(evict_mb << 20)
        view = memoryview(dst)
        while True:
            view[:] = src
            time.sleep(0.001)
    threading.Thread(target=evict, daemon=True).start()
agent = span_profile.start(service="idle", output=out, sample_rate_hz=100, window_s=600, overhead_budget=0)
from parked import park_threads
parked = park_threads(n, in_span)
time.sleep(seconds)
print("TICKS", agent.stats()["ticks"])
parked.set()
agent.stop()
"""


def run(python, threads, seconds, in_span, cache_sim=False, evict_mb=0, keep=None):
    """(ticks, the sampler's counts by event name) of one run under callgrind; the sampler
    thread's file is copied to `keep` if given."""
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", "--separate-threads=yes",
             "--cache-sim=" + ("yes" if cache_sim else "no"),
             "--callgrind-out-file=" + os.path.join(d, "cg.out"),
             python, "-c", CHILD, str(threads), str(seconds), os.path.join(d, "profiles"),
             "1" if in_span else "0", str(evict_mb)],
            capture_output=True, text=True, check=True, env=child_env()).stdout
        ticks = int(next(line.split()[1] for line in out.splitlines() if line.startswith("TICKS")))
        sampler = [f for f in glob.glob(os.path.join(d, "cg.out-*")) if is_sampler(f)]
        if len(sampler) != 1:
            raise SystemExit("expected one sampler thread (the one that runs the core's Sampler) among the "
                             "callgrind files, found %d" % len(sampler))
        if keep:
            shutil.copy(sampler[0], keep)
        return ticks, summary(sampler[0])


def is_sampler(path):
    """Whether the callgrind file of one thread is the sampler's: the thread that runs the
    core's `TickSink`, each tick's sink."""
    with open(path) as fh:
        return any(line.startswith(("fn=", "cfn=")) and "runtime::sampler::TickSink" in line
                   for line in fh)


def summary(path):
    """A callgrind file's totals, by event name (Ir, and D1mr ... with the cache simulation)."""
    events = None
    with open(path) as fh:
        for line in fh:
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("summary:"):
                if events is None:
                    raise SystemExit("no events line before the summary in " + path)
                return dict(zip(events, (int(v) for v in line.split()[1:])))
    raise SystemExit("no summary in " + path)


def per_tick(python, threads, short, long, in_span, cache_sim=False, evict_mb=0, keep=None):
    """The sampler's counts a tick, by event name: the long run's less the short run's, over
    the difference in ticks."""
    t1, c1 = run(python, threads, short, in_span, cache_sim, evict_mb)
    t2, c2 = run(python, threads, long, in_span, cache_sim, evict_mb, keep)
    return {e: (c2[e] - c1.get(e, 0)) / (t2 - t1) for e in c2}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", required=True, help="the interpreter whose venv holds span_profile (A)")
    ap.add_argument("--against", help="a second build's interpreter (B)")
    ap.add_argument("--threads", type=int, nargs="+", default=[0, 64])
    ap.add_argument("--short", type=float, default=2.0)
    ap.add_argument("--long", type=float, default=6.0)
    ap.add_argument("--in-span", action="store_true",
                    help="each thread waits inside a SERVER span with a route and a child span, as a "
                         "request thread waiting on I/O does (needs opentelemetry-sdk)")
    ap.add_argument("--keep", metavar="DIR", help="keep the long runs' sampler callgrind files here")
    ap.add_argument("--cache-sim", action="store_true",
                    help="simulate the caches and print the sampler's data misses a tick too")
    ap.add_argument("--evict", type=int, default=0, metavar="MB",
                    help="a thread of the child copies MB MiB over and over (with --cache-sim)")
    args = ap.parse_args()
    if args.evict < 0 or (args.evict and not args.cache_sim):
        ap.error("--evict takes a size in MiB, and only with --cache-sim")
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    arms = [("A", args.python)] + ([("B", args.against)] if args.against else [])
    for label, python in arms:
        print("%s: %s" % (label, python))
    for n in args.threads:
        got = [per_tick(python, n, args.short, args.long, args.in_span, args.cache_sim, args.evict,
                        args.keep and os.path.join(args.keep, "%s-%d%s.out" % (
                            label, n, "-in-span" if args.in_span else "")))
               for label, python in arms]
        line = "%3d waiting threads%s: " % (n, " in spans" if args.in_span else "") + "  ".join(
            "%s %.0f instructions a tick" % (label, g["Ir"]) for (label, _), g in zip(arms, got))
        if len(got) == 2:
            line += "  B/A %.3f" % (got[1]["Ir"] / got[0]["Ir"])
        print(line, flush=True)
        if args.cache_sim:
            for (label, _), g in zip(arms, got):
                d1 = g.get("D1mr", 0) + g.get("D1mw", 0)
                ll = g.get("DLmr", 0) + g.get("DLmw", 0)
                print("    %s: L1 data misses a tick %.0f, last-level %.0f" % (label, d1, ll))
            d1 = [g.get("D1mr", 0) + g.get("D1mw", 0) for g in got]
            if len(got) == 2 and d1[0] >= 1:
                print("    L1 data misses B/A %.3f" % (d1[1] / d1[0]), flush=True)


if __name__ == "__main__":
    main()
