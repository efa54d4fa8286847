#!/usr/bin/env python3
"""The walker's cost per sample in-process, for stacks of a given depth (issue 3's "cost per
sample for a 30-frame stack"), with guarded reads and with process_vm_readv, alternated.

Each run is a fresh interpreter: THREADS threads recurse DEPTH frames deep and spin there
(so every thread runs between ticks and is walked afresh each tick), the agent samples at
100 Hz with the budget off for SECONDS, and the sampler thread's CPU per tick is read from
`stats()`. The same script with THREADS=0 gives the cost of a tick with nothing to walk (the
wake-up, the clocks, closing windows), so

    cost per sample = (CPU per tick - CPU per empty tick) / THREADS

With --span each thread spins inside a span of a provider with span_profile.SpanProcessor(),
so every sample also resolves OpenTelemetry's current span (ADR 0011). With --idle the threads
block in `Event.wait()` instead of spinning: what an idle thread costs per tick (its CPU clock
is read, and its last stack is reported again without reading its frames).

    python benches/overhead/per_sample.py --depth 30 --threads 8 --rounds 3
    python benches/overhead/per_sample.py --span --reads guarded --python other/venv/bin/python
    python benches/overhead/per_sample.py --idle --threads 64 --depth 10 --reads guarded
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, tempfile, threading, time
import span_profile
depth, threads, seconds, with_span = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "1"
idle = sys.argv[5] == "1"
stop = threading.Event()
started = threading.Barrier(threads + 1)
agent = span_profile.start(service="per-sample", output=tempfile.mkdtemp(prefix="per-sample-"),
                           sample_rate_hz=100, window_s=3600, overhead_budget=0)
if with_span:
    from opentelemetry.sdk.trace import TracerProvider
    provider = TracerProvider()
    provider.add_span_processor(span_profile.SpanProcessor())
    tracer = provider.get_tracer("per-sample")

def recurse(n):
    if n > 1:
        return recurse(n - 1)
    started.wait()
    if idle:
        return stop.wait()
    x = 0
    while not stop.is_set():
        x += 1
    return x

def run(n):
    if with_span:
        with tracer.start_as_current_span("spinning"):
            return recurse(n)
    return recurse(n)

ts = [threading.Thread(target=run, args=(depth - 3,), daemon=True) for _ in range(threads)]
for t in ts:
    t.start()
started.wait()

def sampler_cpu_ns():
    # The sampler thread's own clock, read live (stats() adds it up only when a window closes).
    import os
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/comm" % tid) as f:
                if not f.read().startswith("span-profile-sa"):
                    continue
            with open("/proc/self/task/%s/schedstat" % tid) as f:
                return int(f.read().split()[0])
        except OSError:
            pass
    raise SystemExit("no sampler thread found")

time.sleep(0.5)
s0, c0 = agent.stats(), sampler_cpu_ns()
time.sleep(seconds)
s1, c1 = agent.stats(), sampler_cpu_ns()
stop.set()
agent.stop()
d = lambda k: s1[k] - s0[k]
print(json.dumps({"ticks": d("ticks"), "samples": d("walker_samples"), "frames": d("walker_frames"),
                  "sampler_cpu_ns": c1 - c0, "direct_ticks": d("walker_direct_ticks")}))
"""


def run(py, child, depth, threads, seconds, reads, span, idle):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPAN_PROFILE_")}
    env["SPAN_PROFILE_MEMORY_READS"] = reads
    p = subprocess.run([py, child, str(depth), str(threads), str(seconds), "1" if span else "0", "1" if idle else "0"],
                       capture_output=True, text=True, env=env, timeout=120)
    line = [x for x in p.stdout.splitlines() if x.startswith("{")]
    if p.returncode != 0 or not line:
        raise SystemExit("run failed: %s" % p.stderr[-500:])
    r = json.loads(line[-1])
    r["us_per_tick"] = r["sampler_cpu_ns"] / max(1, r["ticks"]) / 1000
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--depth", type=int, default=30)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--span", action="store_true", help="threads spin inside a span of ours")
    ap.add_argument("--idle", action="store_true",
                    help="threads block in Event.wait instead of spinning: the cost of an idle thread's sample")
    ap.add_argument("--reads", choices=("both", "guarded", "syscall"), default="both")
    args = ap.parse_args()
    modes = ("guarded", "syscall") if args.reads == "both" else (args.reads,)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(CHILD)
        child = f.name
    per = {m: [] for m in modes}
    try:
        for i in range(args.rounds):
            for reads in modes:
                empty = run(args.python, child, args.depth, 0, args.seconds, reads, args.span, args.idle)
                full = run(args.python, child, args.depth, args.threads, args.seconds, reads, args.span, args.idle)
                us = (full["us_per_tick"] - empty["us_per_tick"]) / args.threads
                per[reads].append(us)
                print(json.dumps({"round": i, "reads": reads, "empty_us_per_tick": round(empty["us_per_tick"], 1),
                                  "us_per_tick": round(full["us_per_tick"], 1),
                                  "frames_per_sample": round(full["frames"] / max(1, full["samples"]), 1),
                                  "us_per_sample": round(us, 2), "load1": round(os.getloadavg()[0], 2)}),
                      flush=True)
    finally:
        os.unlink(child)
    for reads, v in per.items():
        print("%-8s µs per %d-frame sample: median %.2f [%.2f-%.2f]" % (reads, args.depth, statistics.median(v),
                                                                      min(v), max(v)))


if __name__ == "__main__":
    main()
