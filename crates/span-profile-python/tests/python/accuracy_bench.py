#!/usr/bin/env python3
"""Attribution accuracy of span_profile and of pyroscope-io + pyroscope-otel (the one peer with
span labels), on the same workload. Prints one JSON line: the share of the samples of each
burner function that carry the span id it ran under.

  --mode asyncio (default)  100 concurrent tasks on one loop, each under its own root span,
                            burning CPU in its own function (`task_burn_<i>`) in 2 ms chunks
                            with asyncio.sleep(0) between them
  --mode threads            THREADS threads, each under its own root span, burning CPU in its
                            own function (`thread_burn_<i>`) for SECONDS

    python accuracy_bench.py --agent span_profile
    python pyroscope_capture.py 4041 /tmp/pyro & python accuracy_bench.py --agent pyroscope \\
        --pyroscope-url http://127.0.0.1:4041 --capture-dir /tmp/pyro
    python accuracy_bench.py --mode threads --threads 4 --seconds 3 --agent span_profile

pyroscope (pyroscope-io + pyroscope-otel) tags the OS thread with the root span's id on span
start and untags it on end; samples are read back from what it pushed to the capture server.
"""
import argparse
import asyncio
import glob
import json
import os
import sys
import tempfile
import threading
import time

from opentelemetry.sdk.trace import TracerProvider

HERE = os.path.dirname(os.path.abspath(__file__))


# The burners' sources: one function per task or thread, so that each sample's leaf function
# says which span it must carry.
ASYNC_BURNER = """
async def {name}(chunks, chunk=0.002):
    x = 0
    for _ in range(chunks):
        stop = time.perf_counter() + chunk
        while time.perf_counter() < stop:
            for i in range(200):
                x += i * i
        await asyncio.sleep(0)
    return x
"""
THREAD_BURNER = """
def {name}(deadline):
    x = 0
    while time.perf_counter() < deadline:
        for i in range(200):
            x += i * i
    return x
"""


def make_burner(name, source=ASYNC_BURNER):
    ns = {"asyncio": asyncio, "time": time}
    exec(source.format(name=name), ns)
    return ns[name]


def run(tracer, tasks, chunks):
    burners = [make_burner("task_burn_%d" % i) for i in range(tasks)]
    expected = {}

    async def one(i):
        with tracer.start_as_current_span("task-%d" % i) as span:
            expected[burners[i].__name__] = format(span.context.span_id, "016x")
            await burners[i](chunks)

    async def main():
        await asyncio.gather(*(one(i) for i in range(tasks)))

    asyncio.run(main())
    return expected


def run_threads(tracer, threads, seconds):
    burners = [make_burner("thread_burn_%d" % i, THREAD_BURNER) for i in range(threads)]
    expected = {}
    ready = threading.Barrier(threads + 1)
    deadline = [0.0]

    def one(i):
        with tracer.start_as_current_span("thread-%d" % i) as span:
            expected[burners[i].__name__] = format(span.context.span_id, "016x")
            ready.wait()
            ready.wait()  # the deadline is set between the two waits
            burners[i](deadline[0])

    ts = [threading.Thread(target=one, args=(i,), name="burner-%d" % i) for i in range(threads)]
    for t in ts:
        t.start()
    ready.wait()
    deadline[0] = time.perf_counter() + seconds
    ready.wait()
    for t in ts:
        t.join()
    return expected


def score(rows, expected):
    """rows: [(functions leaf first, span id or None, count)] -> (right, total, per function)."""
    per = {f: [0, 0] for f in expected}
    for funcs, sid, n in rows:
        for f in funcs:
            if f in per:
                per[f][1] += n
                per[f][0] += n if sid == expected[f] else 0
                break
    right = sum(r for r, _ in per.values())
    total = sum(t for _, t in per.values())
    worst = min((r / t for r, t in per.values() if t), default=0.0)
    return right, total, worst


def pyroscope_rows(capture_dir):
    """Samples of every push the capture server kept: connect-protocol PushRequests (gzip),
    whose series hold raw pprof profiles with per-sample labels (`span_id` from
    pyroscope-otel's thread tags)."""
    sys.path.insert(0, HERE)
    from pprof_reader import captured_push_profiles, parse_profile

    rows = []
    for raw in captured_push_profiles(capture_dir):
        for s in parse_profile(raw).samples:
            # Weighted by the profile's first value (cpu ns or samples): shares are the same
            # either way.
            rows.append(([fn.rsplit(".", 1)[-1] for fn in s.functions], s.labels.get("span_id"),
                         next(iter(s.values.values()), 0)))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent", choices=["span_profile", "pyroscope"], required=True)
    ap.add_argument("--mode", choices=["asyncio", "threads"], default="asyncio")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=3.0, help="burn time per thread (--mode threads)")
    ap.add_argument("--tasks", type=int, default=100)
    ap.add_argument("--chunks", type=int, default=40, help="2 ms chunks per task")
    ap.add_argument("--rate", type=int, default=100)
    ap.add_argument("--pyroscope-url", default="http://127.0.0.1:4041")
    ap.add_argument("--capture-dir", default="/tmp/pyro")
    args = ap.parse_args()
    provider = TracerProvider()

    def workload(tracer):
        if args.mode == "threads":
            return run_threads(tracer, args.threads, args.seconds)
        return run(tracer, args.tasks, args.chunks)

    if args.agent == "span_profile":
        import span_profile

        sys.path.insert(0, HERE)
        from pprof_reader import all_samples

        out = tempfile.mkdtemp()
        provider.add_span_processor(span_profile.SpanProcessor())
        agent = span_profile.start(service="accuracy", output=out, sample_rate_hz=args.rate, window_s=5)
        expected = workload(provider.get_tracer("bench"))
        agent.stop()
        rows = [([f.rsplit(".", 1)[-1] for f in s.functions], s.span_id, s.count) for s in all_samples(out)]
        extra = {k: v for k, v in agent.stats().items() if k.startswith("context_")}
    else:
        import pyroscope
        from pyroscope.otel import PyroscopeSpanProcessor

        pyroscope.configure(application_name="accuracy", server_address=args.pyroscope_url,
                            sample_rate=args.rate, oncpu=True, gil_only=True)
        provider.add_span_processor(PyroscopeSpanProcessor())
        expected = workload(provider.get_tracer("bench"))
        time.sleep(0.5)
        pyroscope.shutdown()
        time.sleep(0.5)
        rows = pyroscope_rows(args.capture_dir)
        extra = {"pushes": len(glob.glob(os.path.join(args.capture_dir, "*.json")))}
    right, total, worst = score(rows, expected)
    size = {"threads": args.threads} if args.mode == "threads" else {"tasks": args.tasks}
    print(json.dumps({"agent": args.agent, "mode": args.mode, "python": "%d.%d" % sys.version_info[:2], **size,
                      "samples": total, "right": right, "accuracy_pct": round(100.0 * right / max(total, 1), 2),
                      "worst_function_pct": round(100.0 * worst, 2), **extra}))


if __name__ == "__main__":
    main()
