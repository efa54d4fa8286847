#!/usr/bin/env python3
"""The child process of peers.py: one workload, under an in-process profiler or none, which
measures its own ground truth and writes it to --truth as JSON.

    python workloads.py --workload duty --duration 6 --truth /tmp/truth.json \\
        [--agent none|span_profile|pyroscope] [--output DIR] [--pyroscope-url URL]

duty   threads `duty_<d>` for d in 100/50/20/5/0: each period (10 to 100 ms, drawn at random)
       the thread runs `burn_<d>` for d% of it (by the wall clock) and sleeps the rest; duty_0
       only waits on an Event. Beside them `extra_<i>` threads (one a core) hash 16 MiB buffers
       in `hash_extra_<i>`; hashlib releases the GIL, so they stay runnable next to whichever
       thread holds the GIL and the run queue holds more threads than there are cores. Truth:
       each thread's time.thread_time_ns() when it ends.
churn  threads `churn_t<k>` (outer function `churn_thread_t<k>`) each create, call once and
       drop functions named `churn_t<k>_<seq>`, round robin three ways: a `def` through
       compile + exec, types.FunctionType over a template's code.replace(co_name=...), and an
       eval'd lambda whose code is given the name the same way (co_qualname too, so a reader of
       either sees the unique name). Each burns CPU in its own frame until a wall-clock
       deadline --burn-ms ahead. Truth: every name with its wall-clock start and end.
"""
import argparse
import hashlib
import json
import os
import random
import sys
import threading
import time
import types

#: One template for `duty_<d>`, `burn_<d>` and `hash_extra_<i>` so each thread's frames are unique.
DUTY_SRC = """
def burn_{d}(deadline):
    x = 0
    while perf_counter() < deadline:
        for i in range(100):
            x += i * i
    return x

def duty_{d}(stop, rng):
    if {d} == 0:
        stop.wait()
        return
    while not stop.is_set():
        period = rng.uniform(0.010, 0.100)
        t0 = perf_counter()
        burn_{d}(t0 + period * {d} / 100)
        rest = t0 + period - perf_counter()
        if rest > 0:
            sleep(rest)
"""
EXTRA_SRC = """
def hash_extra_{i}(stop, buf):
    n = 0
    while not stop.is_set():
        sha256(buf).digest()
        n += 1
    return n
"""
CHURN_OUTER_SRC = """
def churn_thread_t{k}(body, *args):
    return body(*args)
"""
#: The churned function's body (the `def` way and the code.replace template).
CHURN_DEF_SRC = """
def {name}(deadline, clock):
    x = 0
    while clock() < deadline:
        for i in range(50):
            x += i * i
    return x
"""
#: The lambda way: the burn runs in C (iter/filter/next call clock() until it passes the
#: deadline), so the lambda's own frame is the leaf Python frame throughout.
CHURN_LAMBDA_SRC = "lambda deadline, clock: next(filter(deadline.__lt__, iter(clock, None)))"
CHURN_PATTERN = r"^churn_t(\d+)_(\d+)$"
#: The file name of every churned function's code, so a frame of one is known whatever its name.
CHURN_FILE = "<churn>"
CHURN_THREADS = 4


def named(src, **fmt):
    ns = {"perf_counter": time.perf_counter, "sleep": time.sleep, "sha256": hashlib.sha256}
    exec(src.format(**fmt), ns)
    return ns


def cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def run_duty(args):
    stop = threading.Event()
    out, lock = {}, threading.Lock()
    buf = os.urandom(16 << 20)

    def thread_main(name, fn, fn_args, frames, duty):
        try:
            fn(*fn_args)
        finally:
            cpu = time.thread_time_ns()
            with lock:
                out[name] = {"cpu_ns": cpu, "duty_pct": duty, "frames": frames,
                             "native_id": threading.get_native_id(), "ident": threading.get_ident()}

    threads = []
    for d in (100, 50, 20, 5, 0):
        fn = named(DUTY_SRC, d=d)["duty_%d" % d]
        threads.append(threading.Thread(
            target=thread_main, name="duty_%d" % d,
            args=("duty_%d" % d, fn, (stop, random.Random(d)), ["duty_%d" % d, "burn_%d" % d], d)))
    for i in range(cores()):
        fn = named(EXTRA_SRC, i=i)["hash_extra_%d" % i]
        threads.append(threading.Thread(
            target=thread_main, name="extra_%d" % i,
            args=("extra_%d" % i, fn, (stop, buf), ["hash_extra_%d" % i], None)))
    t0 = time.time_ns()
    for t in threads:
        t.start()
    stop.wait(args.duration)
    stop.set()
    for t in threads:
        t.join(timeout=10)
    return {"workload": "duty", "start_ns": t0, "end_ns": time.time_ns(), "threads": out,
            "cores": cores()}


def run_churn(args):
    clock = time.perf_counter
    g = {"__builtins__": __builtins__}
    tns = {}
    exec(compile(CHURN_DEF_SRC.format(name="churn_template"), CHURN_FILE, "exec"), g, tns)
    template = tns["churn_template"].__code__
    burn_s = args.burn_ms / 1000
    out, lock = {}, threading.Lock()
    start = threading.Barrier(CHURN_THREADS + 1)
    deadline = [0.0]

    def churn(k, base_ns):
        seq, starts, ends, cpus = 0, [], [], []
        while clock() < deadline[0]:
            name = "churn_t%d_%06d" % (k, seq)
            way = seq % 3
            if way == 0:
                ns = {}
                exec(compile(CHURN_DEF_SRC.format(name=name), CHURN_FILE, "exec"), g, ns)
                f = ns.pop(name)
            elif way == 1:
                f = types.FunctionType(template.replace(co_name=name, co_qualname=name), g)
            else:
                lam = eval(compile(CHURN_LAMBDA_SRC, CHURN_FILE, "eval"), g)
                f = types.FunctionType(lam.__code__.replace(co_name=name, co_qualname=name), g)
                del lam
            c0, t0 = time.thread_time_ns(), time.time_ns()
            f(clock() + burn_s, clock)
            t1, c1 = time.time_ns(), time.thread_time_ns()
            del f  # the function, its code and its name string are freed here
            starts.append((t0 - base_ns) // 1000)
            ends.append((t1 - base_ns) // 1000)
            cpus.append(c1 - c0)
            seq += 1
        return seq, starts, ends, cpus

    def thread_main(k, base_ns):
        born = time.time_ns()
        outer = named(CHURN_OUTER_SRC, k=k)["churn_thread_t%d" % k]
        start.wait()
        t0 = time.time_ns()
        n, starts, ends, cpus = outer(churn, k, base_ns)
        t1 = time.time_ns()
        with lock:
            out["churn_t%d" % k] = {
                "frames": ["churn_thread_t%d" % k], "native_id": threading.get_native_id(),
                "ident": threading.get_ident(), "born_ns": born,
                "names": n, "starts_us": starts, "ends_us": ends, "start_ns": t0, "end_ns": t1,
                "mean_cpu_us": round(sum(cpus) / max(n, 1) / 1000, 1),
                "names_per_s": round(n / max((t1 - t0) / 1e9, 1e-9), 1)}

    base_ns = time.time_ns()
    threads = [threading.Thread(target=thread_main, args=(k, base_ns), name="churn_t%d" % k)
               for k in range(CHURN_THREADS)]
    for t in threads:
        t.start()
    deadline[0] = clock() + args.duration
    start.wait()
    for t in threads:
        t.join(timeout=args.duration + 10)
    return {"workload": "churn", "base_ns": base_ns, "start_ns": base_ns, "end_ns": time.time_ns(),
            "threads": out, "pattern": CHURN_PATTERN, "file": CHURN_FILE, "burn_ms": args.burn_ms,
            "switch_interval_s": sys.getswitchinterval()}


def start_agent(args):
    """Starts the in-process profiler and returns its stop function."""
    if args.agent == "span_profile":
        import span_profile

        # Full rate: the budget off, as the earlier benches (benches/overhead) run it.
        agent = span_profile.start(service="truth", output=args.output, sample_rate_hz=100,
                                   window_s=1, overhead_budget=0)
        return agent.stop
    if args.agent == "pyroscope":
        import pyroscope

        # Its defaults (py-spy based, oncpu, gil_only), with thread labels and 1 s pushes.
        pyroscope.configure(application_name="truth", server_address=args.pyroscope_url,
                            sample_rate=100, report_thread_name=True, report_thread_id=True,
                            upload_interval=1)
        return pyroscope.shutdown
    return lambda: None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=["duty", "churn"], required=True)
    ap.add_argument("--duration", type=float, default=6.0)
    ap.add_argument("--truth", required=True)
    ap.add_argument("--agent", choices=["none", "span_profile", "pyroscope"], default="none")
    ap.add_argument("--output", help="span_profile's output directory")
    ap.add_argument("--pyroscope-url", default="http://127.0.0.1:4040")
    ap.add_argument("--burn-ms", type=float, default=0.15, help="churn: wall time each function burns")
    ap.add_argument("--switch-interval-ms", type=float, default=None,
                    help="churn: sys.setswitchinterval, so 4 threads sharing the GIL interleave finely")
    args = ap.parse_args()
    if args.switch_interval_ms:
        sys.setswitchinterval(args.switch_interval_ms / 1000)
    stop = start_agent(args)
    truth = run_duty(args) if args.workload == "duty" else run_churn(args)
    time.sleep(0.3)  # a last tick on every thread's exit before the profiler stops
    stop()
    with open(args.truth, "w") as f:
        json.dump(truth, f)


if __name__ == "__main__":
    main()
