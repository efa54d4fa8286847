#!/usr/bin/env python3
"""How often a service at a fixed load has no thread run for a whole tick.

A sampler that did not wake when nothing had run since its last tick (ADR 0036) could save at
most the ticks in which no thread of the service ran. This starts `fixed_load_service.py` with
no profiler and `fixed_load_client.py` at --rps, and after --warmup seconds reads the summed
CPU time of all the service's threads (`/proc/<pid>/task/*/schedstat`) every --interval-ms for
--seconds, counting the intervals in which it did not move:

    python benches/overhead/idle_intervals.py --python <venv>/bin/python --bench ../shared/bench \\
        --service fastapi --rps 70.3

`schedstat` moves when a thread is switched out and at the kernel's own tick while it runs, so
a thread that ran all through an interval is still seen; one that ran less than that and was
never switched out in it is not. Prints one line, or with --json the numbers.
"""
import json
import os
import time

from service_at_load import load_arguments, service_at_load



def threads_cpu_ns(pid):
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except OSError:  # the thread ended between the listing and the read
            pass
    return total


def main():
    ap = load_arguments(__doc__, warmup=3.0)
    ap.add_argument("--interval-ms", type=float, default=10.0)
    args = ap.parse_args()

    with service_at_load(args.python, args.bench, args.service, "none", args.rps,
                         args.warmup + args.seconds + 2) as (pid, _port):
        time.sleep(args.warmup)
        step = args.interval_ms / 1000.0
        prev, idle, n = threads_cpu_ns(pid), 0, 0
        due, end = time.monotonic() + step, time.monotonic() + args.seconds
        while due <= end:
            time.sleep(max(0.0, due - time.monotonic()))
            due += step
            now = threads_cpu_ns(pid)
            n += 1
            idle += now == prev
            prev = now
    result = {"service": args.service, "rps": args.rps, "intervals": n, "idle_intervals": idle,
              "idle_share": round(idle / max(1, n), 4)}
    if args.json:
        print(json.dumps(result))
    else:
        print("%s at %g rps: %d intervals of %g ms, %d (%.1f%%) with no thread of the service run"
              % (args.service, args.rps, n, args.interval_ms, idle, 100.0 * idle / max(1, n)))


if __name__ == "__main__":
    main()
