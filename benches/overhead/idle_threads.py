#!/usr/bin/env python3
"""What waiting threads cost the sampler, with and without the scheduler pages of ADR 0033.

Each run is a fresh interpreter with THREADS threads parked in `Event.wait()` (with --wake-every
S, waking every S seconds, as the bench workload's parked threads do; with --in-span, inside a
SERVER span with a route and a child span, as a request thread waiting on I/O is) and the agent
at 100 Hz with the budget off. After a second of warm-up it measures over SECONDS:

- the sampler thread's CPU per tick (`/proc/self/task/*/schedstat`, the thread named
  `span-profile-sa…`, divided by the ticks taken);
- the whole process's CPU per second (`time.process_time()`: the sampler, the parked threads'
  wake-ups, and what watching them costs them at their context switches).

Arms alternate A B A B in one run: `SPAN_PROFILE_SCHED_WATCH=0` (every clock read) and `=1`
(the default); or, with --against, two or more builds (the venvs of their wheels), all watched,
each compared with the first (A) by the paired ratio.

    python benches/overhead/idle_threads.py --python target/venvs/3.12.1/bin/python \\
        --threads 0 64 --pairs 4 --seconds 8 [--wake-every 0.5]
    python benches/overhead/idle_threads.py --python OLD/bin/python --against NEW/bin/python [NEWER/bin/python] \\
        [--in-span] ...

With --evict MB a process beside the runs copies MB MiB over and over for their whole length, as
a service's own work does between ticks: what a waiting thread costs when the lines of its state
(its thread state, its scheduler page, the sampler's entries for it) are evicted between ticks.
Run it with and without, alternated, to compare.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from parked import child_env

CHILD = r"""
import json, os, sys, tempfile, time
import span_profile
n, seconds, wake, in_span = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "1"
agent = span_profile.start(service="idle-threads", output=tempfile.mkdtemp(prefix="idle-threads-"),
                           sample_rate_hz=100, window_s=3600, overhead_budget=0)
from parked import park_threads
parked = park_threads(n, in_span, wake)

def sampler_ns():
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/comm" % tid) as f:
                name = f.read().strip()
            with open("/proc/self/task/%s/schedstat" % tid) as f:
                ns = int(f.read().split()[0])
        except OSError:
            continue
        if name.startswith("span-profile-sa"):
            return ns
    raise SystemExit("no sampler thread found")

time.sleep(1.0)
c0, t0, p0 = sampler_ns(), agent.stats()["ticks"], time.process_time()
time.sleep(seconds)
c1, s, p1 = sampler_ns(), agent.stats(), time.process_time()
agent.stop()
parked.set()
print(json.dumps({"us_per_tick": (c1 - c0) / (s["ticks"] - t0) / 1000,
                  "process_ms_per_s": (p1 - p0) / seconds * 1000,
                  "clock_reads_saved": s["walker_clock_reads_saved"],
                  "sched_page_failures": s["walker_sched_page_failures"],
                  "load1": os.getloadavg()[0]}))
"""


# The --evict neighbour: copies the buffer into another over and over until it is killed.
EVICTOR = r"""
import sys
src, dst = bytearray(int(sys.argv[1]) << 20), bytearray(int(sys.argv[1]) << 20)
while True:
    dst[:] = src
"""


def run(python, threads, seconds, wake, watch, in_span):
    env = child_env(dict(os.environ, SPAN_PROFILE_SCHED_WATCH=watch))
    out = subprocess.run([python, "-c", CHILD, str(threads), str(seconds), str(wake), "1" if in_span else "0"],
                         env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--threads", type=int, nargs="+", default=[0, 64])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--wake-every", type=float, default=0.0,
                    help="parked threads wake every this many seconds (0: never)")
    ap.add_argument("--in-span", action="store_true",
                    help="each thread waits inside a SERVER span with a route and a child span "
                         "(needs opentelemetry-sdk)")
    ap.add_argument("--against", metavar="PYTHON", nargs="+",
                    help="compare --python's build (A) with these interpreters' (B, C, ...), all watched")
    ap.add_argument("--evict", type=int, metavar="MB",
                    help="a process beside the runs copies MB MiB over and over (see above)")
    args = ap.parse_args()
    if args.evict is not None and args.evict <= 0:
        ap.error("--evict takes a size in MiB above 0")
    evictor = subprocess.Popen([sys.executable, "-c", EVICTOR, str(args.evict)]) if args.evict else None
    try:
        measure(args)
    finally:
        if evictor is not None:
            died = evictor.poll()
            evictor.kill()
            evictor.wait()
    if evictor is not None and died is not None:
        sys.exit("the --evict neighbour exited with %d during the runs: they ran without it" % died)


def measure(args):
    if args.against:
        pythons = [args.python] + args.against
        arms = [(chr(ord("A") + i), p, "1") for i, p in enumerate(pythons)]
        names = ["%s (%s)" % (label, p) for label, p, _ in arms]
    else:
        arms = [("0", args.python, "0"), ("1", args.python, "1")]
        names = ["every read", "watched"]
    results = {}
    for p in range(args.pairs):
        for n in args.threads:
            for label, python, watch in arms:
                r = run(python, n, args.seconds, args.wake_every, watch, args.in_span)
                results.setdefault((n, label), []).append(r)
                print(json.dumps(dict(r, pair=p, threads=n, arm=label, watch=watch)), flush=True)
    for key, what in (("us_per_tick", "sampler CPU per tick, µs"), ("process_ms_per_s", "process CPU, ms a second")):
        print("\n%s: median [min-max] of %d runs" % (what, args.pairs))
        for n in args.threads:
            a = [r[key] for r in results[(n, arms[0][0])]]
            line = "%3d waiting threads: %s %.1f [%.1f-%.1f]" % (n, names[0], statistics.median(a), min(a), max(a))
            for (label, _, _), name in zip(arms[1:], names[1:]):
                b = [r[key] for r in results[(n, label)]]
                ratios = [y / x for x, y in zip(a, b)]
                line += "  %s %.1f [%.1f-%.1f]  paired ratio %.2f [%.2f-%.2f]" % (
                    name, statistics.median(b), min(b), max(b), statistics.median(ratios), min(ratios),
                    max(ratios))
            print(line)


if __name__ == "__main__":
    main()
