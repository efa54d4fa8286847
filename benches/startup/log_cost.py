"""What the agent's log costs (issue 28): the CPU of its log pump thread (`span_profile-log`,
which takes the native side's records off their queue, hands them to `logging` and runs the
health checks every 2 s) over a run, beside the sampler's and the exporter's own CPU.

    python benches/startup/log_cost.py [SECONDS] [--quiet]

With logging configured at INFO, so that the start-up line is formatted and printed, and no
service name, so that its warning is too (`--quiet`: logging left unconfigured, the warning
only). The app sleeps: what is measured is the agent's, not the app's. The pump thread's CPU is
read from /proc/self/task/<tid>/schedstat, which counts every nanosecond it ran.
"""
import logging
import sys
import tempfile
import threading
import time

import span_profile
from span_profile import _logging


def thread_cpu_ns(native_id):
    with open("/proc/self/task/%d/schedstat" % native_id) as f:
        return int(f.read().split()[0])


def main():
    seconds = float(next((a for a in sys.argv[1:] if not a.startswith("--")), 30))
    if "--quiet" not in sys.argv:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    with tempfile.TemporaryDirectory() as out:
        agent = span_profile.start(output=out, window_s=5)
        pump = _logging._thread
        assert pump is not None and pump.name == "span_profile-log", pump
        pump_start = thread_cpu_ns(pump.native_id)
        time.sleep(seconds)
        pump_ns = thread_cpu_ns(pump.native_id) - pump_start
        stats = agent.stats()
        agent.stop()
    per_min = 60.0 / seconds
    print("run %.0f s, %d threads" % (seconds, threading.active_count()))
    print("log pump:  %.3f ms of CPU (%.3f ms a minute, %.5f%% of a core)" % (
        pump_ns / 1e6, pump_ns / 1e6 * per_min, 100.0 * pump_ns / (seconds * 1e9)))
    print("sampler:   %.1f ms of CPU (%.1f ms a minute)" % (
        stats["sampler_cpu_ns"] / 1e6, stats["sampler_cpu_ns"] / 1e6 * per_min))
    print("exporter:  %.1f ms of CPU (%.1f ms a minute)" % (
        stats["exporter_cpu_ns"] / 1e6, stats["exporter_cpu_ns"] / 1e6 * per_min))


if __name__ == "__main__":
    main()
