#!/usr/bin/env python3
"""The sampler thread's user-space and kernel time a tick, by `perf record`, builds alternated.

The sampler's CPU a tick (`idle_threads.py`) includes its wake-up, 20-100 µs a tick that swings
from run to run by more than a change to the walk moves; this counts `perf record -e cpu-clock`
samples of the sampler thread (`span-profile-sa…`) and splits them into user space (the walk,
the sink, the aggregation) and the kernel (mostly the wake-up), per tick. Each run is a fresh
interpreter with THREADS threads parked in `Event.wait()` and the agent at 100 Hz, budget off;
after 3 s of warm-up it is recorded for SECONDS, a sample every 50 µs of CPU. Builds (the venvs of their wheels)
run in turn, A B A B, each round in a swapped order; the paired ratios are each build's against
A's of the same round.

    python benches/overhead/sampler_perf.py --python A/bin/python --against B/bin/python \\
        [--threads 120] [--rounds 5] [--seconds 8] [--top 8]

Needs `perf`, and root or `perf_event_paranoid` 1 or lower: at 2, perf records user space only
and the kernel column would read 0 (the script refuses). With --top N each run also prints the
sampler's N busiest symbols.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from parked import child_env

CHILD = r"""
import sys, time, tempfile
import span_profile
from parked import park_threads
n, seconds, go = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
agent = span_profile.start(service="idle", output=tempfile.mkdtemp(), sample_rate_hz=100,
                           window_s=600, overhead_budget=0)
parked = park_threads(n, False)
time.sleep(3)
t0 = agent.stats()["ticks"]
open(go, "w").close()
time.sleep(seconds)
print("TICKS", agent.stats()["ticks"] - t0, flush=True)
time.sleep(1)
parked.set()
agent.stop()
"""

PERIOD_NS = 50_000  # `-c`: a sample every 50 µs of the task's CPU clock, whatever the kernel's
# cap on sampling frequencies (`-F` would be throttled to it, silently)


def check_perf_allowed():
    """Exits with what to do when perf could not record the sampler's kernel time."""
    if os.geteuid() == 0:
        return
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as fh:
            level = int(fh.read())
    except (OSError, ValueError):
        return
    if level > 1:
        raise SystemExit("perf_event_paranoid is %d: perf would record user space only. Run as "
                         "root, or: sudo sysctl kernel.perf_event_paranoid=1" % level)


def run(python, threads, seconds, top):
    """(user µs a tick, kernel µs a tick, top symbols) of one recorded run."""
    with tempfile.TemporaryDirectory() as d:
        go, data = os.path.join(d, "go"), os.path.join(d, "perf.data")
        child = subprocess.Popen([python, "-c", CHILD, str(threads), str(seconds), go],
                                 stdout=subprocess.PIPE, text=True, env=child_env())
        deadline = time.monotonic() + 60
        while not os.path.exists(go):
            if child.poll() is not None or time.monotonic() > deadline:
                child.kill()
                raise SystemExit("the child interpreter did not start its agent (exit %s)"
                                 % child.returncode)
            time.sleep(0.02)
        try:
            rec = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-c", str(PERIOD_NS),
                                  "-p", str(child.pid), "-o", data, "--", "sleep", str(seconds)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if rec.returncode != 0:
                raise SystemExit("perf record failed: " + rec.stderr.strip())
            out, _ = child.communicate(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
        ticks = int(next(line.split()[1] for line in out.splitlines() if line.startswith("TICKS")))
        report = subprocess.run(
            ["perf", "report", "-i", data, "--comm", "span-profile-sa", "--no-children",
             "--sort", "sym", "-n", "--stdio", "-g", "none"],
            capture_output=True, text=True, check=True).stdout
        user = kernel = 0
        rows = []
        for line in report.splitlines():
            parts = line.split()
            if line.startswith("#") or len(parts) < 4 or not parts[0].endswith("%"):
                continue
            n = int(parts[1])
            if parts[2] == "[k]":
                kernel += n
            else:
                user += n
            rows.append((n, " ".join(parts[2:])))
        if not ticks or not user:
            raise SystemExit("no ticks or no sampler samples recorded: is perf allowed here?")
        scale = PERIOD_NS / 1000 / ticks
        rows.sort(reverse=True)
        return user * scale, kernel * scale, [(n * scale, s) for n, s in rows[:top]]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", required=True, help="the interpreter of build A's venv")
    ap.add_argument("--against", nargs="+", default=[], help="other builds' interpreters")
    ap.add_argument("--threads", type=int, default=120)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--top", type=int, default=0)
    args = ap.parse_args()
    check_perf_allowed()
    if args.rounds < 1 or args.seconds <= 0 or args.threads < 0:
        ap.error("--rounds must be 1 or more, --seconds above 0, --threads 0 or more")
    arms = [args.python] + args.against
    labels = [chr(ord("A") + i) for i in range(len(arms))]
    got = {label: [] for label in labels}
    for r in range(args.rounds):
        order = list(zip(labels, arms))
        if r % 2:
            order.reverse()
        for label, python in order:
            user, kernel, top = run(python, args.threads, args.seconds, args.top)
            got[label].append((user, kernel))
            print("round %d %s: user %.1f µs a tick, kernel %.1f" % (r, label, user, kernel),
                  flush=True)
            for us, sym in top:
                print("    %6.1f µs  %s" % (us, sym[:110]))
    print("\nsampler thread, µs a tick with %d parked threads: median [min-max] of %d rounds"
          % (args.threads, args.rounds))
    for label, python in zip(labels, arms):
        users = [u for u, _ in got[label]]
        kernels = [k for _, k in got[label]]
        line = "  %s (%s): user %.1f [%.1f-%.1f], kernel %.1f [%.1f-%.1f]" % (
            label, python, statistics.median(users), min(users), max(users),
            statistics.median(kernels), min(kernels), max(kernels))
        if label != "A":
            ratios = [u / a for (u, _), (a, _) in zip(got[label], got["A"])]
            line += "; user against A, paired: median %.2f [%.2f-%.2f], below A in %d of %d" % (
                statistics.median(ratios), min(ratios), max(ratios),
                sum(x < 1 for x in ratios), len(ratios))
        print(line)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
