#!/usr/bin/env python3
"""Runs ../shared/bench/workload.py under each profiler arm, alternating the arms (A B C ... A B C),
and prints one JSON line per run plus a summary table (median and min-max per arm and variant).

    python benches/overhead/compare.py --bench ../shared/bench --python target/venvs/bench-3.12/bin/python \
        --variants threads asyncio idle64 --arms none span_profile py-spy pyroscope ddtrace --runs 5 --duration 6

Arms:
  none          workload.py --agent none
  span_profile  workload.py --agent span_profile (agent + SpanProcessor, 100 Hz, default 1% budget
                unless --budget)
  span_profile-full
                the same with the budget off (SPAN_PROFILE_OVERHEAD_BUDGET=0): the full 100 Hz
  span_profile-syscall
                the full rate, reading memory with process_vm_readv (SPAN_PROFILE_MEMORY_READS=syscall,
                the walker before ADR 0009): the baseline of the guarded reads
  py-spy        py-spy record -r 100 --nonblocking -o /dev/null -- python workload.py --agent none
                (agent CPU = py-spy's own utime+stime from /proc/<pid>/stat, polled until it exits)
  pyroscope     workload.py --agent pyroscope (pyroscope-io + pyroscope-otel) sending to sink.py
  ddtrace       `import ddtrace.profiling.auto` before workload.py --agent none, uploads to sink.py
                (DD_TRACE_AGENT_URL), tracing off (DD_TRACE_ENABLED=false)

For in-process arms the agent CPU is workload.py's own `agent_cpu_pct` (threads it did not start).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime
    except (OSError, IndexError, ValueError):
        return None


def run(args, variant, arm):
    py = args.python
    wl = os.path.join(args.bench, "workload.py")
    base = [wl, "--variant", variant, "--duration", str(args.duration), "--rate", "100"]
    env = dict(os.environ)
    env.pop("SPAN_PROFILE_OVERHEAD_BUDGET", None)
    env.pop("SPAN_PROFILE_MEMORY_READS", None)
    if args.budget is not None:
        env["SPAN_PROFILE_OVERHEAD_BUDGET"] = str(args.budget)
    if arm == "none":
        cmd = [py] + base + ["--agent", "none"]
    elif arm in ("span_profile", "span_profile-full", "span_profile-syscall"):
        cmd = [py] + base + ["--agent", "span_profile"]
        if arm != "span_profile":
            env["SPAN_PROFILE_OVERHEAD_BUDGET"] = "0"
        if arm == "span_profile-syscall":
            env["SPAN_PROFILE_MEMORY_READS"] = "syscall"
    elif arm == "pyroscope":
        cmd = [py] + base + ["--agent", "pyroscope", "--pyroscope-url", "http://127.0.0.1:%d" % args.sink_port]
    elif arm == "ddtrace":
        env.update(DD_TRACE_AGENT_URL="http://127.0.0.1:%d" % args.sink_port, DD_TRACE_ENABLED="false",
                   DD_PROFILING_ENABLED="true", DD_INSTRUMENTATION_TELEMETRY_ENABLED="false")
        runner = ("import sys, runpy, ddtrace.profiling.auto; sys.argv = sys.argv[1:]; "
                  "runpy.run_path(sys.argv[0], run_name='__main__')")
        cmd = [py, "-c", runner] + base + ["--agent", "none"]
    elif arm == "py-spy":
        pyspy = os.path.join(os.path.dirname(py), "py-spy")
        cmd = [pyspy, "record", "-r", "100", "--nonblocking", "-o", "/dev/null", "--"] + [py] + base + ["--agent", "none"]
    else:
        raise SystemExit("unknown arm " + arm)
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    last_cpu = None
    if arm == "py-spy":
        while p.poll() is None:
            c = proc_cpu_s(p.pid)
            if c is not None:
                last_cpu = c
            time.sleep(0.05)
    out, _ = p.communicate()
    wall = time.perf_counter() - t0
    res = None
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{") and '"rps"' in line:
            res = json.loads(line)
    if res is None:
        return {"variant": variant, "arm": arm, "error": "no result line", "rc": p.returncode}
    res["arm"] = arm
    if arm == "py-spy" and last_cpu is not None:
        res["agent_cpu_pct"] = round(100 * last_cpu / wall, 3)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "bench"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--variants", nargs="+", default=["threads", "asyncio", "idle64"])
    ap.add_argument("--arms", nargs="+", default=["none", "span_profile", "py-spy", "pyroscope", "ddtrace"])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=6.0)
    ap.add_argument("--budget", type=float, default=None)
    ap.add_argument("--sink-port", type=int, default=4040)
    args = ap.parse_args()
    sink = subprocess.Popen([args.python, os.path.join(args.bench, "sink.py"), str(args.sink_port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    results = []
    try:
        for variant in args.variants:
            for i in range(args.runs):
                for arm in args.arms:
                    r = run(args, variant, arm)
                    r["run"] = i
                    r["load1"] = round(os.getloadavg()[0], 2)
                    print(json.dumps(r), flush=True)
                    results.append(r)
    finally:
        sink.terminate()
    print("\nvariant   arm                  rps median [min-max]        agent CPU % of a core median [min-max]  RSS MB median   load1")
    for variant in args.variants:
        none = [r["rps"] for r in results if r.get("variant") == variant and r["arm"] == "none" and "rps" in r]
        for arm in args.arms:
            rs = [r for r in results if r.get("variant") == variant and r["arm"] == arm and "rps" in r]
            if not rs:
                print("%-9s %-20s not measured" % (variant, arm))
                continue
            rps = [r["rps"] for r in rs]
            cpu = [r["agent_cpu_pct"] for r in rs]
            rss = [r["rss_mb"] for r in rs]
            change = (100 * (statistics.median(rps) / statistics.median(none) - 1)) if none else float("nan")
            print("%-9s %-20s %8.1f [%.1f-%.1f] (%+.1f%%)  %6.2f [%.2f-%.2f]  %6.1f  %.1f" % (
                variant, arm, statistics.median(rps), min(rps), max(rps), change,
                statistics.median(cpu), min(cpu), max(cpu), statistics.median(rss),
                statistics.median([r["load1"] for r in rs])))


if __name__ == "__main__":
    main()
