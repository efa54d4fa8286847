#!/usr/bin/env python3
"""What waiting threads cost the sampler, with and without the scheduler pages of ADR 0033.

Each run is a fresh interpreter with THREADS threads parked in `Event.wait()` and the agent
at 100 Hz with the budget off. After a second of warm-up it reads the CPU time of the
sampler thread (`/proc/self/task/*/schedstat`, the thread named `span-profile-sa…`) over
SECONDS and divides by the ticks taken: the sampler's CPU per tick. Arms alternate A B A B in
one run: `SPAN_PROFILE_SCHED_WATCH=0` (every clock read) and `=1` (the default).

    python benches/overhead/idle_threads.py --python target/venvs/3.12.1/bin/python \\
        --threads 0 64 --pairs 4 --seconds 8
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, os, sys, tempfile, threading, time
import span_profile
n, seconds = int(sys.argv[1]), float(sys.argv[2])
parked = threading.Event()
threads = [threading.Thread(target=parked.wait) for _ in range(n)]
for t in threads:
    t.start()
agent = span_profile.start(service="idle-threads", output=tempfile.mkdtemp(prefix="idle-threads-"),
                           sample_rate_hz=100, window_s=3600, overhead_budget=0)

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
c0, t0 = sampler_ns(), agent.stats()["ticks"]
time.sleep(seconds)
c1, s = sampler_ns(), agent.stats()
agent.stop()
parked.set()
print(json.dumps({"us_per_tick": (c1 - c0) / (s["ticks"] - t0) / 1000,
                  "clock_reads_saved": s["walker_clock_reads_saved"],
                  "sched_page_failures": s["walker_sched_page_failures"],
                  "load1": os.getloadavg()[0]}))
"""


def run(python, threads, seconds, watch):
    env = dict(os.environ, SPAN_PROFILE_SCHED_WATCH=watch)
    out = subprocess.run([python, "-c", CHILD, str(threads), str(seconds)], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--threads", type=int, nargs="+", default=[0, 64])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=8.0)
    args = ap.parse_args()
    results = {}
    for p in range(args.pairs):
        for n in args.threads:
            for watch in ("0", "1"):
                r = run(args.python, n, args.seconds, watch)
                results.setdefault((n, watch), []).append(r["us_per_tick"])
                print(json.dumps(dict(r, pair=p, threads=n, watch=watch)), flush=True)
    print("\nsampler CPU per tick, µs: median [min-max] of %d runs" % args.pairs)
    for n in args.threads:
        off, on = results[(n, "0")], results[(n, "1")]
        ratios = [b / a for a, b in zip(off, on)]
        print("%3d waiting threads: every read %.1f [%.1f-%.1f]  watched %.1f [%.1f-%.1f]  paired ratio %.2f [%.2f-%.2f]"
              % (n, statistics.median(off), min(off), max(off), statistics.median(on), min(on), max(on),
                 statistics.median(ratios), min(ratios), max(ratios)))


if __name__ == "__main__":
    main()
