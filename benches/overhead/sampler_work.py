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

With --record FILE the sampler thread is profiled as well, after the counts, for the same
--seconds (`perf record -F 4999 --call-graph dwarf -t <tid>`; read it with `perf report -i FILE
--no-children`): where the tick's work goes.

It also says what the ticks of the measured seconds did with the service's threads (the agent's
`stats()` before and after): the samples a tick that were counted again (ADR 0035), built again
from a stack the walker reused, or walked in full, the CPU-only samples beside them, and the
scheduler pages opened a second.

Needs `perf` (linux-perf), run as root or with `perf_event_paranoid` at 1 or below (it counts
another process's thread, kernel time included). Prints one line, or with --json the numbers.
"""
import json
import os
import re
import subprocess
import sys
import time

from fixed_load import agent_threads
from service_at_load import agent_stats, load_arguments, service_at_load


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
    ap = load_arguments(__doc__, warmup=4.0)
    ap.add_argument("--record", metavar="FILE", help="also perf record the sampler thread into FILE")
    args = ap.parse_args()

    env = dict(os.environ, SPAN_PROFILE_OVERHEAD_BUDGET="0")
    seconds = args.warmup + args.seconds * (2 if args.record else 1) + 2
    with service_at_load(args.python, args.bench, args.service, "span_profile-full", args.rps, seconds,
                         env=env) as (pid, port):
        time.sleep(args.warmup)
        tid = sampler_tid(pid)
        agent0 = agent_stats(port)
        cpu0, sw0 = schedstat(pid, tid)
        work_ms = task_clock_ms(tid, args.seconds)
        cpu1, sw1 = schedstat(pid, tid)
        agent1 = agent_stats(port)
        threads = len(os.listdir("/proc/%d/task" % pid))
        if args.record:
            subprocess.run(["perf", "record", "-q", "-F", "4999", "--call-graph", "dwarf", "-t", str(tid),
                            "-o", args.record, "--", "sleep", str(args.seconds)], check=True)
    ticks = max(1, sw1 - sw0)
    cpu_us, work_us = (cpu1 - cpu0) / 1e3 / ticks, work_ms * 1e3 / ticks
    result = {"service": args.service, "rps": args.rps, "switches": ticks, "cpu_us_per_switch": round(cpu_us, 1),
              "work_us_per_switch": round(work_us, 1), "wake_us_per_switch": round(cpu_us - work_us, 1),
              "threads": threads}
    # What the ticks of the measured seconds did with the service's threads: each sample is
    # counted again (ADR 0035), built again from a stack the walker reused (its thread had not
    # run, but the sink could not count it again), or walked in full; and the CPU-only samples
    # beside them (ADR 0019).
    def delta(key):
        return (agent1.get(key) or 0) - (agent0.get(key) or 0)

    ticks_agent = delta("walker_ticks")
    if ticks_agent:
        samples, repeated, reused = delta("walker_samples"), delta("walker_samples_repeated"), delta("walker_reused_stacks")
        result["samples_per_tick"] = round(samples / ticks_agent, 2)
        result["repeated_per_tick"] = round(repeated / ticks_agent, 2)
        # Builds before these stats existed leave their lines out.
        if "walker_reused_stacks" in agent1:
            result["rebuilt_per_tick"] = round((reused - repeated) / ticks_agent, 2)
            result["walked_per_tick"] = round((samples - reused) / ticks_agent, 2)
        if "walker_sched_pages_opened" in agent1:
            result["pages_opened_per_s"] = round(delta("walker_sched_pages_opened") / args.seconds, 2)
        result["cpu_only_per_tick"] = round((delta("samples") - samples) / ticks_agent, 2)
    if args.json:
        print(json.dumps(result))
    else:
        print("%s at %g rps: %d switches; the sampler's CPU %.1f µs a switch, its work %.1f (%.0f%%), waking %.1f"
              % (args.service, args.rps, ticks, cpu_us, work_us, 100 * work_us / cpu_us if cpu_us else 0,
                 cpu_us - work_us))
        if "samples_per_tick" in result:
            print("%d threads in the process; %.2f samples a tick, %.2f of them counted again (ADR 0035), and %.2f "
                  "CPU-only samples beside them"
                  % (threads, result["samples_per_tick"], result["repeated_per_tick"], result["cpu_only_per_tick"]))
        if "rebuilt_per_tick" in result:
            print("of the samples a tick, %.2f built again from a stack the walker reused and %.2f walked in full"
                  % (result["rebuilt_per_tick"], result["walked_per_tick"]))
        if "pages_opened_per_s" in result:
            print("scheduler pages opened: %.2f a second (ADR 0033)" % result["pages_opened_per_s"])


if __name__ == "__main__":
    main()
