#!/usr/bin/env python3
"""Resident memory of a workload under span_profile over time, with the agent's span counters:
what a 6 s run of compare.py cannot show (memory that builds up within a window, and the
window close). Runs ../shared/bench/workload.py in this interpreter through runpy and prints a
line to stderr every --every seconds.

    SPAN_PROFILE_WINDOW_S=10 python benches/overhead/rss_over_time.py -- \\
        ../shared/bench/workload.py --variant threads --agent span_profile --duration 32
    python benches/overhead/rss_over_time.py --no-processor -- ../shared/bench/workload.py ...

--no-processor replaces span_profile.SpanProcessor with the SDK's no-op base class before the
workload starts: the agent samples, but no span is recorded.
"""
import argparse
import ctypes
import runpy
import sys
import threading
import time

import span_profile

from procfs import rss_mb


class Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                 "fordblks", "keepcost")]


def heap():
    """glibc's malloc counters: bytes in use and bytes free inside malloc's arenas (MB)."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = Mallinfo2
    m = libc.mallinfo2()
    return (m.uordblks + m.hblkhd) / 2**20, m.fordblks / 2**20


def watch(every, show_heap, trim):
    t0 = time.time()
    while True:
        time.sleep(every)
        s = span_profile.stats()
        extra = ""
        if trim:
            c0 = time.thread_time()
            ctypes.CDLL(None).malloc_trim(0)
            extra += "  trim=%.2f ms" % (1000 * (time.thread_time() - c0))
        if show_heap:
            used, free = heap()
            extra = "  malloc in use=%5.1f MB  free in arenas=%5.1f MB" % (used, free)
        print("t=%3.0f s  rss=%5.1f MB  open spans=%d  span objects=%d  windows=%d  dropped spans=%d%s"
              % (time.time() - t0, rss_mb(), s["spans_started"] - s["spans_ended"], s["span_objects"],
                 s["windows"], s["dropped_spans"], extra), file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--every", type=float, default=5.0)
    ap.add_argument("--no-processor", action="store_true")
    ap.add_argument("--heap", action="store_true", help="also print glibc's mallinfo2 counters")
    ap.add_argument("--trim", action="store_true",
                    help="an experiment: call glibc's malloc_trim(0) before each line, and print its CPU time")
    ap.add_argument("workload", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    argv = [a for a in args.workload if a != "--"]
    if not argv:
        ap.error("give the workload and its arguments after --")
    if args.no_processor:
        from opentelemetry.sdk.trace import SpanProcessor

        span_profile.SpanProcessor = SpanProcessor
    threading.Thread(target=watch, args=(args.every, args.heap, args.trim), daemon=True).start()
    sys.argv = argv
    runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
