#!/usr/bin/env python3
"""The asyncio attribution figure: 100 concurrent tasks on one loop, each under its own root
span, burning CPU in its own function (`task_burn_<i>`) in 2 ms chunks with asyncio.sleep(0)
between them. Prints one JSON line: for each agent, the share of samples of each task's
function that carry that task's span id.

    python asyncio_accuracy_bench.py --agent span_profile
    python pyroscope_capture.py 4041 /tmp/pyro & python asyncio_accuracy_bench.py --agent pyroscope \\
        --pyroscope-url http://127.0.0.1:4041 --capture-dir /tmp/pyro

pyroscope (pyroscope-io + pyroscope-otel) tags the OS thread with the root span's id on span
start and untags it on end; samples are read back from what it pushed to the capture server.
"""
import argparse
import asyncio
import base64
import glob
import json
import os
import re
import sys
import tempfile
import time
import urllib.parse

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

HERE = os.path.dirname(os.path.abspath(__file__))


def make_burner(name):
    ns = {"asyncio": asyncio, "time": time}
    exec(
        "async def %s(chunks, chunk=0.002):\n"
        "    x = 0\n"
        "    for _ in range(chunks):\n"
        "        stop = time.perf_counter() + chunk\n"
        "        while time.perf_counter() < stop:\n"
        "            for i in range(200):\n"
        "                x += i * i\n"
        "        await asyncio.sleep(0)\n"
        "    return x\n" % name, ns)
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
    import gzip

    sys.path.insert(0, HERE)
    from pprof_reader import _fields, read_profile

    rows = []
    tmp = tempfile.mkdtemp()
    for k, p in enumerate(sorted(glob.glob(os.path.join(capture_dir, "*.json")))):
        with open(p) as f:
            body = base64.b64decode(json.load(f)["body"])
        if body[:2] == b"\x1f\x8b":
            body = gzip.decompress(body)
        for field, _, series in _fields(body):
            if field != 1:
                continue
            for f2, _, sample in _fields(series):
                if f2 != 2:
                    continue
                for f3, _, raw in _fields(sample):
                    if f3 != 1:
                        continue
                    path = os.path.join(tmp, "%d.pb.gz" % k)
                    with open(path, "wb") as out:
                        out.write(raw if raw[:2] == b"\x1f\x8b" else gzip.compress(raw))
                    for s in read_profile(path).samples:
                        # Weighted by the profile's first value (cpu ns or samples): shares
                        # are the same either way.
                        rows.append(([fn.rsplit(".", 1)[-1] for fn in s.functions], s.labels.get("span_id"),
                                     next(iter(s.values.values()), 0)))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent", choices=["span_profile", "pyroscope"], required=True)
    ap.add_argument("--tasks", type=int, default=100)
    ap.add_argument("--chunks", type=int, default=40, help="2 ms chunks per task")
    ap.add_argument("--rate", type=int, default=100)
    ap.add_argument("--pyroscope-url", default="http://127.0.0.1:4041")
    ap.add_argument("--capture-dir", default="/tmp/pyro")
    args = ap.parse_args()
    provider = TracerProvider()
    if args.agent == "span_profile":
        import span_profile

        sys.path.insert(0, HERE)
        from pprof_reader import all_samples

        out = tempfile.mkdtemp()
        provider.add_span_processor(span_profile.SpanProcessor())
        agent = span_profile.start(service="accuracy", output=out, sample_rate_hz=args.rate, window_s=5)
        expected = run(provider.get_tracer("bench"), args.tasks, args.chunks)
        agent.stop()
        rows = [([f.rsplit(".", 1)[-1] for f in s.functions], s.span_id, s.count) for s in all_samples(out)]
        extra = {k: v for k, v in agent.stats().items() if k.startswith("context_")}
    else:
        import pyroscope
        from pyroscope.otel import PyroscopeSpanProcessor

        pyroscope.configure(application_name="accuracy", server_address=args.pyroscope_url,
                            sample_rate=args.rate, oncpu=True, gil_only=True)
        provider.add_span_processor(PyroscopeSpanProcessor())
        expected = run(provider.get_tracer("bench"), args.tasks, args.chunks)
        time.sleep(0.5)
        pyroscope.shutdown()
        time.sleep(0.5)
        rows = pyroscope_rows(args.capture_dir)
        extra = {"pushes": len(glob.glob(os.path.join(args.capture_dir, "*.json")))}
    right, total, worst = score(rows, expected)
    print(json.dumps({"agent": args.agent, "python": "%d.%d" % sys.version_info[:2], "tasks": args.tasks,
                      "samples": total, "right": right, "accuracy_pct": round(100.0 * right / max(total, 1), 2),
                      "worst_function_pct": round(100.0 * worst, 2), **extra}))


if __name__ == "__main__":
    main()
