#!/usr/bin/env python3
"""The sample rate span_profile and py-spy actually achieve at 100 Hz, on each variant of
../shared/bench/workload.py, alternating the two (A B A B). Prints one JSON line a run.

  span_profile  workload.py --agent span_profile under runstats.py, the budget off
                (SPAN_PROFILE_OVERHEAD_BUDGET=0); ticks from stats()
  py-spy        py-spy record -r 100 --nonblocking --idle --threads --format raw; ticks are the
                samples of the main thread, which lives through the whole run. --idle makes
                py-spy sample every thread on every tick (without it, it leaves out threads
                that are not running, so its sample count is not a tick count); so this arm
                does more work than compare.py's py-spy arm.

Both are counted over the process's wall time, start-up included, so both read a little under
their rate.

    python benches/overhead/achieved_rate.py --python target/venvs/bench-3.12/bin/python \\
        --variants threads asyncio idle64 --runs 2 --duration 6
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def span_profile_ticks(args, variant):
    env = dict(os.environ, SPAN_PROFILE_OVERHEAD_BUDGET="0")
    cmd = [args.python, os.path.join(HERE, "runstats.py"), os.path.join(args.bench, "workload.py"),
           "--variant", variant, "--agent", "span_profile", "--duration", str(args.duration)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    wall = time.perf_counter() - t0
    stats = json.loads(p.stderr.split("STATS ", 1)[1].splitlines()[0])
    return stats["ticks"], wall


def main_thread_samples(raw_path):
    """The samples of the thread named MainThread in a py-spy raw file written with --threads:
    lines `thread (TID): NAME;frame;... COUNT` (the name is left out on some lines)."""
    counts, main = {}, None
    with open(raw_path) as f:
        for line in f:
            m = re.match(r"thread \((\d+)\)(?:: ([^;]*))?.* (\d+)$", line.rstrip())
            if not m:
                continue
            tid, name, n = m.group(1), m.group(2), int(m.group(3))
            counts[tid] = counts.get(tid, 0) + n
            if name and name.startswith("MainThread"):
                main = tid
    return counts.get(main, 0)


def py_spy_ticks(args, variant):
    pyspy = os.path.join(os.path.dirname(args.python), "py-spy")
    with tempfile.TemporaryDirectory() as d:
        raw = os.path.join(d, "raw.txt")
        cmd = [pyspy, "record", "-r", "100", "--nonblocking", "--idle", "--threads", "--format", "raw",
               "-o", raw, "--", args.python, os.path.join(args.bench, "workload.py"),
               "--variant", variant, "--agent", "none", "--duration", str(args.duration)]
        t0 = time.perf_counter()
        subprocess.run(cmd, capture_output=True, text=True, check=True)
        wall = time.perf_counter() - t0
        return main_thread_samples(raw), wall


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default="/work/shared/bench")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--variants", nargs="+", default=["threads", "asyncio", "idle64"])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--duration", type=float, default=6.0)
    args = ap.parse_args()
    for variant in args.variants:
        for i in range(args.runs):
            for arm, ticks_of in (("span_profile", span_profile_ticks), ("py-spy --idle", py_spy_ticks)):
                ticks, wall = ticks_of(args, variant)
                print(json.dumps({"variant": variant, "arm": arm, "run": i, "ticks": ticks,
                                  "wall_s": round(wall, 2), "ticks_per_s": round(ticks / wall, 1),
                                  "load1": round(os.getloadavg()[0], 2)}), flush=True)


if __name__ == "__main__":
    main()
