#!/usr/bin/env python3
"""Samples a profiled process every INTERVAL seconds until it exits, into a CSV, then judges
whether RSS, open file descriptors and the agent's CPU stayed flat.

    monitor.py PID CSV [--interval 10] [--warmup-s 120] [--tolerance 0.10]
    monitor.py 0 CSV                 # judge an earlier run's CSV again

Columns: t_s (since start), rss_kb (VmRSS), fds (entries in /proc/PID/fd), threads,
agent_cpu_pct (CPU of the agent's threads, "span-profile-*", over the last interval, as a
percentage of one core), process_cpu_pct (the whole process, same unit). The verdict also
judges agent_share_pct, the agent's CPU as a share of the process's (load on a shared machine
moves both together).

Flat means: after the warm-up, the mean of the last third of the samples is within the
tolerance (default 10%) of the mean of the first third; for small values an absolute slack
applies as well (2 fds, 0.2 percentage points of CPU, 1 MiB of RSS), so that a value of 3 vs 4
does not count as 33% growth. Exit status: 0 if all are flat, 1 if not, 2 if there were
too few samples to judge.
"""
import argparse
import csv
import os
import sys
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
AGENT_THREAD_PREFIX = "span-profile"


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def rss_kb(pid):
    status = read("/proc/%d/status" % pid) or ""
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


def fds(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return None


def cpu_ticks(stat):
    # The comm field may contain spaces and parentheses: split after the last ')'.
    rest = stat[stat.rindex(")") + 2:].split()
    return int(rest[11]) + int(rest[12])  # utime, stime (fields 14 and 15)


def thread_cpu(pid):
    """(agent ticks, process ticks, thread count)."""
    agent = 0
    threads = 0
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return None
    for tid in tids:
        stat = read("/proc/%d/task/%s/stat" % (pid, tid))
        comm = (read("/proc/%d/task/%s/comm" % (pid, tid)) or "").strip()
        if stat is None:
            continue
        threads += 1
        if comm.startswith(AGENT_THREAD_PREFIX):
            agent += cpu_ticks(stat)
    stat = read("/proc/%d/stat" % pid)
    if stat is None:
        return None
    return agent, cpu_ticks(stat), threads


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def judge(rows, warmup_s, tolerance):
    body = [r for r in rows if r["t_s"] >= warmup_s]
    if len(body) < 6:
        print("soak: only %d samples after the %d s warm-up; too few to judge" % (len(body), warmup_s))
        return 2
    third = len(body) // 3
    first, last = body[:third], body[-third:]
    for r in rows:
        # The agent's CPU as a share of the whole process's: flat even when a busy machine
        # gives the whole process less CPU in one third than in another.
        r["agent_share_pct"] = 100.0 * r["agent_cpu_pct"] / r["process_cpu_pct"] if r["process_cpu_pct"] else 0.0
    checks = [("rss_kb", 1024), ("fds", 2), ("agent_cpu_pct", 0.2), ("agent_share_pct", 0.5)]
    ok = True
    print("%-15s %14s %14s %9s  %s" % ("metric", "first third", "last third", "change", "verdict"))
    for key, slack in checks:
        a, b = mean([r[key] for r in first]), mean([r[key] for r in last])
        change = (b - a) / a if a else 0.0
        flat = abs(b - a) <= max(tolerance * abs(a), slack)
        ok &= flat
        print("%-15s %14.2f %14.2f %+8.1f%%  %s" % (key, a, b, 100 * change, "flat" if flat else "NOT FLAT"))
    peak = max(r["rss_kb"] for r in body)
    print("samples: %d after warm-up (%d in total); peak RSS %.1f MiB; max fds %d; threads %d..%d" % (
        len(body), len(rows), peak / 1024, max(r["fds"] for r in body),
        min(r["threads"] for r in body), max(r["threads"] for r in body)))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pid", type=int)
    ap.add_argument("csv")
    ap.add_argument("--interval", type=float, default=10.0)
    ap.add_argument("--warmup-s", type=float, default=120.0)
    ap.add_argument("--tolerance", type=float, default=0.10)
    args = ap.parse_args()

    if args.pid == 0:
        # Judge an earlier run's CSV again: monitor.py 0 soak.csv
        with open(args.csv) as f:
            rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]
        sys.exit(judge(rows, args.warmup_s, args.tolerance))
    rows = []
    start = time.monotonic()
    prev = None
    with open(args.csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_s", "rss_kb", "fds", "threads", "agent_cpu_pct", "process_cpu_pct"])
        while True:
            now = time.monotonic()
            sample = (rss_kb(args.pid), fds(args.pid), thread_cpu(args.pid))
            if None in sample:
                break  # the process exited
            rss, nfd, (agent, proc, threads) = sample
            if prev is not None:
                dt = now - prev[0]
                row = {
                    "t_s": round(now - start, 1),
                    "rss_kb": rss,
                    "fds": nfd,
                    "threads": threads,
                    "agent_cpu_pct": round(100.0 * (agent - prev[1]) / CLK_TCK / dt, 3),
                    "process_cpu_pct": round(100.0 * (proc - prev[2]) / CLK_TCK / dt, 3),
                }
                rows.append(row)
                w.writerow([row[k] for k in ("t_s", "rss_kb", "fds", "threads", "agent_cpu_pct",
                                              "process_cpu_pct")])
                f.flush()
            prev = (now, agent, proc)
            time.sleep(max(0.0, args.interval - (time.monotonic() - now)))
    sys.exit(judge(rows, args.warmup_s, args.tolerance))


if __name__ == "__main__":
    main()
