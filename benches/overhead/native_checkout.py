#!/usr/bin/env python3
"""Side by side on the native_checkout example: each mode (native, pprof-rs, no profiler, ...)
runs ROUNDS times for SECONDS, the order of the modes rotating every round, each run under
`flock /tmp/bench.lock` so that no other benchmark on the machine runs at the same time. Prints
each run's `result:` line with the load average read just before it, then per mode the median
orders per CPU-second (whole process and serving phase), the ratio of medians to `off`, and the
median of the per-round ratios to `off`.

    RUSTFLAGS="-C force-frame-pointers=yes" CARGO_TARGET_DIR=target/fp \
        cargo build --release -p span-profile-examples --example native_checkout
    python3 benches/overhead/native_checkout.py --rounds 6 --seconds 10 \
        off off-symbolized native native-cpu pprof

Modes are the example's (see examples/examples/native_checkout.rs); `off` must be one of them.
"""
import argparse
import re
import statistics
import subprocess
import tempfile

RESULT = re.compile(
    r"result: mode=(\S+) orders=(\d+) cpu_s=([\d.]+) wall_s=([\d.]+) "
    r"work_cpu_s=([\d.]+) work_wall_s=([\d.]+)"
)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/fp/release/examples/native_checkout")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--lock", default="/tmp/bench.lock")
    ap.add_argument("modes", nargs="+")
    args = ap.parse_args()
    if "off" not in args.modes:
        ap.error("the modes must include off, the baseline")
    rounds = []
    for r in range(args.rounds):
        runs = {}
        for k in range(len(args.modes)):
            mode = args.modes[(r + k) % len(args.modes)]
            with tempfile.TemporaryDirectory() as store:
                load = open("/proc/loadavg").read().split()[0]
                out = subprocess.run(
                    ["flock", args.lock, args.bin, store, str(args.seconds), mode],
                    capture_output=True, text=True, check=True,
                ).stdout
            m = RESULT.search(out)
            if not m:
                raise SystemExit(f"no result line from {mode}: {out!r}")
            print(f"round={r + 1} load={load} {m.group(0)}", flush=True)
            orders, cpu, _, work_cpu, _ = (float(x) for x in m.groups()[1:6])
            runs[mode] = (orders / cpu, orders / work_cpu)
        rounds.append(runs)
    for i, label in ((0, "whole process"), (1, "serving phase")):
        print(f"{label}: orders per CPU-second")
        off = statistics.median(r["off"][i] for r in rounds)
        for mode in args.modes:
            med = statistics.median(r[mode][i] for r in rounds)
            per_round = statistics.median(r[mode][i] / r["off"][i] for r in rounds)
            print(f"  {mode:15} median {med:7.1f}  /off {med / off:.3f}  "
                  f"median per-round /off {per_round:.3f}")


if __name__ == "__main__":
    main()
