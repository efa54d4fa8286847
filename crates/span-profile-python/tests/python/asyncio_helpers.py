"""Shared pieces of the asyncio specs: CPU burns that yield to the loop between chunks, each in
its own uniquely named function, and the per-function attribution report."""
import asyncio
import time

from conftest import by_span, hex16


def make_burner(name):
    """`async def <name>(seconds, chunk)`: burns `seconds` of its own CPU in a frame called
    `name`, in chunks, awaiting asyncio.sleep(0) between them so other tasks interleave."""
    ns = {"asyncio": asyncio, "time": time}
    exec(
        "async def %s(seconds, chunk=0.002):\n"
        "    x = 0\n"
        "    for _ in range(max(1, round(seconds / chunk))):\n"
        "        stop = time.perf_counter() + chunk\n"
        "        while time.perf_counter() < stop:\n"
        "            for i in range(200):\n"
        "                x += i * i\n"
        "        await asyncio.sleep(0)\n"
        "    return x\n" % name,
        ns,
    )
    return ns[name]


def make_sync_burner(name):
    """`def <name>(seconds)`: burns `seconds` of the calling thread's CPU in a frame called
    `name` (for worker threads; CPU time, so a loaded machine still yields samples)."""
    ns = {"time": time}
    exec(
        "def %s(seconds):\n"
        "    end = time.thread_time() + seconds\n"
        "    x = 0\n"
        "    while time.thread_time() < end:\n"
        "        for i in range(200):\n"
        "            x += i * i\n"
        "    return x\n" % name,
        ns,
    )
    return ns[name]


def attribution(samples, expected):
    """{function: (right, total, {span: count})} for `expected` = {function: set of hex span
    ids}; a sample counts for the innermost expected function on its stack."""
    out = {f: [0, 0, {}] for f in expected}
    for s in samples:
        for fn in s.functions:  # leaf first
            if fn in expected:
                row = out[fn]
                row[1] += s.count
                row[0] += s.count if s.span_id in expected[fn] else 0
                row[2][s.span_id] = row[2].get(s.span_id, 0) + s.count
                break
    return {f: tuple(v) for f, v in out.items()}


def assert_accurate(report, min_share=0.97, min_samples=5):
    """Each function's samples carry its expected span. 0.97, not 1: a task switch between
    copying a thread state and reading its context can still mislabel a sample (see
    walker/context/); the 100-task test holds the aggregate to 99%."""
    for fn, (right, total, spans) in report.items():
        assert total >= min_samples, "%s: only %d samples" % (fn, total)
        assert right >= min_share * total, "%s: %d of %d right: %r" % (fn, right, total, spans)


__all__ = ["make_burner", "make_sync_burner", "attribution", "assert_accurate", "by_span", "hex16"]
