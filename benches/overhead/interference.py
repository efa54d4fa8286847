#!/usr/bin/env python3
"""What the sampler costs the application beyond its own instructions: the application's cache
lines that a tick evicts, which the application then misses. Counted by callgrind's cache
simulation, since this machine's `perf stat` has no hardware counters.

valgrind runs a process's threads one at a time through one simulated cache (L1 and the last
level), so a figure here is that of a sampler that shares a core with the application, the
worst case: on another core only the last level is shared.

Each run is a fresh interpreter under `valgrind --tool=callgrind --cache-sim=yes
--separate-threads=yes` (hash seed fixed) whose main thread serves REQUESTS checkouts of
../shared/bench/workload.py (a SERVER root with `http.route` and six children) through
span_profile's SpanProcessor, beside PARKED threads that wait inside a request span (the threads
service at 70% load has about 37 threads a tick, most of them waiting). The agent samples at
--rate Hz in the `sampled` arm and at 1 Hz in the `quiet` arm; both have the same spans, hooks
and threads. The main thread's counts in `sampled` minus those in `quiet`, over the difference
in ticks, are what one tick costs the application; the sampler thread's own counts a tick are
shown beside them.

    python benches/overhead/interference.py --python target/venvs/3.12.1/bin/python \\
        --bench ../shared/bench [--requests 300] [--parked 32] [--rate 100] [--pairs 2]

The last level is simulated at 8 MiB (--ll-bytes), a core's share of a server's L3.
`--fair-sched=yes` lets the sampler thread run when its tick is due; without it valgrind runs
the busy main thread for long stretches and the sampler ticks a tenth as often.

Estimated cycles use callgrind's own weights: Ir + 10 x (L1 misses) + 100 x (last-level misses).
Under valgrind the application runs about 100 times slower than on the CPU while the sampler
still ticks by the wall clock, so there are far more ticks per request than in production: the
figure to take away is per tick, to be multiplied by a real service's ticks per request.
"""
import argparse
import glob
import os
import subprocess
import tempfile

CHILD = r"""
import sys, threading, time, tempfile
sys.path.insert(0, sys.argv[1])
requests, parked_n, rate = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
import span_profile
import workload
provider = TracerProvider()
provider.add_span_processor(span_profile.SpanProcessor())
tracer = provider.get_tracer("interference")
agent = span_profile.start(service="interference", output=tempfile.mkdtemp(prefix="interference-"),
                           sample_rate_hz=rate, window_s=3600, overhead_budget=0)
release = threading.Event()

def parked():
    with tracer.start_as_current_span("request", kind=trace.SpanKind.SERVER,
                                      attributes={"http.route": "/parked/{id}"}):
        with tracer.start_as_current_span("io.wait"):
            release.wait()

threads = [threading.Thread(target=parked) for _ in range(parked_n)]
for t in threads:
    t.start()
checkout = workload.Checkout(tracer)
for i in range(requests):
    checkout.handle(i)
print("TICKS", agent.stats()["ticks"])
release.set()
for t in threads:
    t.join()
agent.stop()
"""

CACHES = set()  # the simulated caches, as callgrind describes them
EVENTS = ("Ir", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")


def counts(path):
    """The event counts of one callgrind file's summary line, by name."""
    events = None
    with open(path) as fh:
        for line in fh:
            if line.startswith("desc: ") and "cache:" in line:
                CACHES.add(line[6:].strip())
            elif line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("summary:"):
                return dict(zip(events, map(int, line.split()[1:])))
    raise RuntimeError("no summary in " + path)


def cycles(c):
    return c["Ir"] + 10 * (c["I1mr"] + c["D1mr"] + c["D1mw"]) + 100 * (c["ILmr"] + c["DLmr"] + c["DLmw"])


def run(args, rate):
    """(ticks, main thread's counts, sampler thread's counts) of one run."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, PYTHONHASHSEED="0")
        env = {k: v for k, v in env.items() if not k.startswith("SPAN_PROFILE_")}
        out = subprocess.run(
            ["valgrind", "--tool=callgrind", "--cache-sim=yes", "--separate-threads=yes", "--fair-sched=yes",
             "--LL=%d,16,64" % args.ll_bytes,
             "--callgrind-out-file=" + os.path.join(d, "cg.out"),
             args.python, "-c", CHILD, args.bench, str(args.requests), str(args.parked), str(rate)],
            capture_output=True, text=True, check=True, env=env).stdout
        ticks = int(next(line.split()[1] for line in out.splitlines() if line.startswith("TICKS")))
        by_thread = {}
        for f in glob.glob(os.path.join(d, "cg.out-*")):
            by_thread[int(f.rsplit("-", 1)[1])] = counts(f)
        main = by_thread[1]  # valgrind numbers the main thread 1
        # The sampler: of the threads that are not the main one, the one with most instructions
        # (the parked threads run a few thousand each; the exporter and log threads wake rarely).
        sampler = max((c for t, c in by_thread.items() if t != 1), key=lambda c: c["Ir"])
        return ticks, main, sampler


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", required=True, help="the interpreter whose venv holds span_profile")
    ap.add_argument("--bench", required=True, help="the directory of workload.py")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--parked", type=int, default=32)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--ll-bytes", type=int, default=8 << 20,
                    help="the simulated last-level cache (16-way, 64-byte lines); callgrind's own "
                         "guess from this VM's cpuid is 480 MiB, where nothing would ever miss")
    args = ap.parse_args()
    print("main thread: what a tick adds to it (sampled - quiet, over the extra ticks); "
          "sampler: its own counts a tick, in the sampled run")
    print("%-5s %-8s %6s %10s %8s %8s %8s %8s %12s" % (
        "pair", "thread", "ticks", "Ir", "I1mr", "D1mr+mw", "LLmr", "LLmw", "est. cycles"))
    for p in range(args.pairs):
        tq, mq, _ = run(args, 1)
        ts, ms, ss = run(args, args.rate)
        dt = ts - tq
        if dt <= 0:
            raise SystemExit("the sampled run ticked no more than the quiet one (%d, %d)" % (ts, tq))

        def row(label, c, n, ticks):
            print("%-5d %-8s %6d %10.0f %8.1f %8.1f %8.1f %8.1f %12.0f" % (
                p + 1, label, ticks, c["Ir"] / n, c["I1mr"] / n, (c["D1mr"] + c["D1mw"]) / n,
                (c["ILmr"] + c["DLmr"]) / n, c["DLmw"] / n, cycles(c) / n), flush=True)
        row("main", {k: ms[k] - mq[k] for k in EVENTS}, dt, dt)
        row("sampler", ss, ts, ts)
    print("simulated caches: " + "; ".join(sorted(CACHES)))


if __name__ == "__main__":
    main()
