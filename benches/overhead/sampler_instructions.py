#!/usr/bin/env python3
"""The sampler thread's instructions per tick, counted by callgrind: repeatable where CPU time is
too noisy to resolve a change of a few percent (docs/benchmarks.md, "How to measure").

Each run is a fresh interpreter under `valgrind --tool=callgrind --separate-threads=yes` with
THREADS threads parked in `Event.wait()` (with --in-span, inside a SERVER span and a child, as
a request thread waiting on I/O is) and the agent at 100 Hz, budget off, for SHORT and then
LONG seconds; the sampler's count is the thread with the second most instructions (the main
thread, which starts the interpreter, has the most). Instructions per tick is the difference
between the two runs over the difference in ticks, so start-up and warm-up cancel out.

    python benches/overhead/sampler_instructions.py --python A/bin/python [--against B/bin/python] \\
        --threads 0 64 [--short 2 --long 6] [--in-span] [--keep DIR]

With --keep, the long runs' callgrind files stay in DIR (`<arm>-<threads>.out`), for
`callgrind_annotate --inclusive=yes DIR/B-64.out`: where the sampler's instructions go (start-up
included).

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
agent = span_profile.start(service="idle", output=out, sample_rate_hz=100, window_s=600, overhead_budget=0)
from parked import park_threads
parked = park_threads(n, in_span)
time.sleep(seconds)
print("TICKS", agent.stats()["ticks"])
parked.set()
agent.stop()
"""


def run(python, threads, seconds, in_span, keep=None):
    """(ticks, sampler instructions) of one run under callgrind; the sampler thread's file is
    copied to `keep` if given."""
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", "--separate-threads=yes",
             "--callgrind-out-file=" + os.path.join(d, "cg.out"),
             python, "-c", CHILD, str(threads), str(seconds), os.path.join(d, "profiles"),
             "1" if in_span else "0"],
            capture_output=True, text=True, check=True, env=child_env()).stdout
        ticks = int(next(line.split()[1] for line in out.splitlines() if line.startswith("TICKS")))
        counts = []
        for f in glob.glob(os.path.join(d, "cg.out-*")):
            with open(f) as fh:
                for line in fh:
                    if line.startswith("summary:"):
                        counts.append((int(line.split()[1]), f))
                        break
        counts.sort()
        if keep:
            shutil.copy(counts[-2][1], keep)
        return ticks, counts[-2][0]


def per_tick(python, threads, short, long, in_span, keep=None):
    t1, i1 = run(python, threads, short, in_span)
    t2, i2 = run(python, threads, long, in_span, keep)
    return (i2 - i1) / (t2 - t1)


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
    args = ap.parse_args()
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    arms = [("A", args.python)] + ([("B", args.against)] if args.against else [])
    for label, python in arms:
        print("%s: %s" % (label, python))
    for n in args.threads:
        got = [per_tick(python, n, args.short, args.long, args.in_span,
                        args.keep and os.path.join(args.keep, "%s-%d%s.out" % (
                            label, n, "-in-span" if args.in_span else "")))
               for label, python in arms]
        line = "%3d waiting threads%s: " % (n, " in spans" if args.in_span else "") + "  ".join(
            "%s %.0f instructions a tick" % (label, g) for (label, _), g in zip(arms, got))
        if len(got) == 2:
            line += "  B/A %.3f" % (got[1] / got[0])
        print(line, flush=True)


if __name__ == "__main__":
    main()
