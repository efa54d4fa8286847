#!/usr/bin/env python3
"""Runs a workload in this interpreter (through runpy) and prints span_profile.stats() to stderr
when it exits, as one line: `STATS {...}`. The counters say what the agent did during the run:
ticks, windows, its threads' CPU, samples, spans recorded, dropped and left out.

    SPAN_PROFILE_WINDOW_S=10 SPAN_PROFILE_OVERHEAD_BUDGET=0.005 python benches/overhead/runstats.py \\
        ../shared/bench/workload.py --variant threads --threads 256 --agent span_profile --duration 60
"""
import atexit
import json
import runpy
import sys

import span_profile

KEYS = ("ticks", "windows", "sampler_cpu_ns", "exporter_cpu_ns", "samples", "spans_started",
        "spans_ended", "dropped_spans", "unsampled_spans", "walker_direct_ticks", "hook_errors",
        "links_unwritten")


def show():
    s = span_profile.stats() or {}
    print("STATS", json.dumps({k: s.get(k) for k in KEYS}), file=sys.stderr, flush=True)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    atexit.register(show)
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
