#!/usr/bin/env python3
"""The sampler thread's CPU at a fixed load, split into its own work and its wake-ups.

The CPU a thread is charged (`/proc/<pid>/task/<tid>/schedstat`, what `fixed_load.py`'s
`sampler_us_per_req` and the agent's own `sampler_cpu_ns` count) includes the kernel's and the
hypervisor's cost of switching it in at every tick. `perf stat -e task-clock -t <tid>` counts
only the time between the thread's switch-in and switch-out: the tick's work. The difference,
per tick, is what waking up costs on this machine, which any sampler waking at that rate pays
(`benches/examples/wake_floor.rs` measures it with nothing else running).

Starts `fixed_load_service.py` with span_profile at 100 Hz (budget off) and `fixed_load_client.py`
at --rps, and after --warmup seconds reads both for --seconds:

    python benches/overhead/sampler_work.py --python target/venvs/bench-3.12/bin/python \\
        --bench ../shared/bench --service threads --rps 377.4

Needs `perf` (linux-perf), run as root or with `perf_event_paranoid` at 1 or below (it counts
another process's thread, kernel time included). Prints one line, or with --json the numbers.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

from fixed_load import agent_threads

HERE = os.path.dirname(os.path.abspath(__file__))


def sampler_tid(pid):
    for tid, role in agent_threads(pid).items():
        if role == "sampler":
            return tid
    sys.exit("no span-profile sampler thread in process %d" % pid)


def schedstat(pid, tid):
    """(CPU ns, switches in) of one thread."""
    with open("/proc/%d/task/%d/schedstat" % (pid, tid)) as f:
        run_ns, _, switches = f.read().split()[:3]
    return int(run_ns), int(switches)


def task_clock_ms(tid, seconds):
    try:
        out = subprocess.run(["perf", "stat", "-x", ",", "-e", "task-clock", "-t", str(tid), "--",
                              "sleep", str(seconds)], capture_output=True, text=True)
    except FileNotFoundError:
        sys.exit("perf is not installed: apt-get install linux-perf (Debian) or linux-tools (Ubuntu)")
    m = re.search(r"^([0-9.]+),[^,]*,task-clock", out.stderr, re.M)
    if not m:
        sys.exit("perf stat gave no task-clock:\n" + out.stderr[-1000:])
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable, help="the service's interpreter (span_profile installed)")
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "..", "..", "shared", "bench"))
    ap.add_argument("--service", choices=["threads", "asyncio", "fastapi"], default="threads")
    ap.add_argument("--rps", type=float, required=True)
    ap.add_argument("--warmup", type=float, default=4.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    env = dict(os.environ, SPAN_PROFILE_OVERHEAD_BUDGET="0")
    svc = subprocess.Popen([args.python, os.path.join(HERE, "fixed_load_service.py"), "--service", args.service,
                            "--agent", "span_profile-full", "--bench", args.bench, "--rate", "100"],
                           stdout=subprocess.PIPE, text=True, env=env)
    client = None
    try:
        line = svc.stdout.readline()
        if not line.startswith("READY"):
            sys.exit("the service did not start: %r" % line)
        port = int(line.split()[1])
        with urllib.request.urlopen("http://127.0.0.1:%d/stats" % port) as r:
            pid = json.load(r)["pid"]
        client = subprocess.Popen([args.python, os.path.join(HERE, "fixed_load_client.py"), "--port", str(port),
                                   "--rate", str(args.rps), "--duration", str(args.warmup + args.seconds + 2)],
                                  stdout=subprocess.DEVNULL)
        time.sleep(args.warmup)
        tid = sampler_tid(pid)
        cpu0, sw0 = schedstat(pid, tid)
        work_ms = task_clock_ms(tid, args.seconds)
        cpu1, sw1 = schedstat(pid, tid)
    finally:
        if client is not None:
            client.wait()
        svc.terminate()
        svc.wait()
    ticks = max(1, sw1 - sw0)
    cpu_us, work_us = (cpu1 - cpu0) / 1e3 / ticks, work_ms * 1e3 / ticks
    result = {"service": args.service, "rps": args.rps, "switches": ticks, "cpu_us_per_switch": round(cpu_us, 1),
              "work_us_per_switch": round(work_us, 1), "wake_us_per_switch": round(cpu_us - work_us, 1)}
    if args.json:
        print(json.dumps(result))
    else:
        print("%s at %g rps: %d switches; the sampler's CPU %.1f µs a switch, its work %.1f (%.0f%%), waking %.1f"
              % (args.service, args.rps, ticks, cpu_us, work_us, 100 * work_us / cpu_us if cpu_us else 0,
                 cpu_us - work_us))


if __name__ == "__main__":
    main()
