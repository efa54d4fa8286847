#!/usr/bin/env python3
"""The sample rate span_profile and its peers actually achieve at 100 Hz, on each variant of
../shared/bench/workload.py, alternating the arms (A B C D A B C D). Prints one JSON line a run.

  span_profile  workload.py --agent span_profile under runstats.py, the budget off
                (SPAN_PROFILE_OVERHEAD_BUDGET=0); ticks from stats()
  py-spy        py-spy record -r 100 --nonblocking --idle --threads --format raw; ticks are the
                samples of the main thread, which lives through the whole run. --idle makes
                py-spy sample every thread on every tick (without it, it leaves out threads
                that are not running, so its sample count is not a tick count); so this arm
                does more work than compare.py's py-spy arm.

  pyroscope     workload.py --agent pyroscope (pyroscope-io with its defaults: oncpu, gil_only)
                pushing to a capture server (tests/python/pyroscope_capture.py); ticks are the
                samples it pushed: its `cpu` value over the sampling period. It samples only the
                thread holding the GIL, and only when it is on CPU, so this counts the ticks that
                found one: every tick, on a process that is always busy, as all three variants
                are in their main thread or workers; a lower bound otherwise.
  ddtrace       `import ddtrace.profiling.auto` (its defaults: adaptive sampling, 1% target), the
                profile written locally with DD_PROFILING_OUTPUT_PPROF; ticks are the
                `sampling_event_count` its exporter writes beside the profile.

All are counted over the process's wall time, start-up included, so all read a little under
their rate.

    python benches/overhead/achieved_rate.py --python target/venvs/bench-3.12/bin/python \\
        --variants threads asyncio idle64 --arms span_profile py-spy pyroscope ddtrace --runs 2 --duration 6
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PY_TESTS = os.path.join(HERE, "..", "..", "crates", "span-profile-python", "tests", "python")


def span_profile_ticks(args, variant):
    env = dict(os.environ, SPAN_PROFILE_OVERHEAD_BUDGET="0")
    cmd = [args.python, os.path.join(HERE, "runstats.py"), os.path.join(args.bench, "workload.py"),
           "--variant", variant, "--agent", "span_profile", "--duration", str(args.duration)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    wall = time.perf_counter() - t0
    stats = json.loads(p.stderr.split("STATS ", 1)[1].splitlines()[0])
    return stats["ticks"], wall


def main_thread_samples(raw_path):
    """The samples of the thread named MainThread in a py-spy raw file written with --threads:
    lines `thread (TID): NAME;frame;... COUNT` (the name is left out on some lines)."""
    counts, main = {}, None
    with open(raw_path) as f:
        for line in f:
            m = re.match(r"thread \((\d+)\)(?:: ([^;]*))?.* (\d+)$", line.rstrip())
            if not m:
                continue
            tid, name, n = m.group(1), m.group(2), int(m.group(3))
            counts[tid] = counts.get(tid, 0) + n
            if name and name.startswith("MainThread"):
                main = tid
    return counts.get(main, 0)


def py_spy_ticks(args, variant):
    pyspy = os.path.join(os.path.dirname(args.python), "py-spy")
    with tempfile.TemporaryDirectory() as d:
        raw = os.path.join(d, "raw.txt")
        cmd = [pyspy, "record", "-r", "100", "--nonblocking", "--idle", "--threads", "--format", "raw",
               "-o", raw, "--", args.python, os.path.join(args.bench, "workload.py"),
               "--variant", variant, "--agent", "none", "--duration", str(args.duration)]
        t0 = time.perf_counter()
        subprocess.run(cmd, capture_output=True, text=True, check=True)
        wall = time.perf_counter() - t0
        return main_thread_samples(raw), wall


def pushed_samples(capture_dir, period_ns):
    """Samples in every PushRequest the capture server kept, whose `cpu` values are
    nanoseconds, one period a sample."""
    sys.path.insert(0, PY_TESTS)
    from pprof_reader import captured_push_profiles, parse_profile

    ns, types = 0, set()
    for raw in captured_push_profiles(capture_dir):
        profile = parse_profile(raw)
        types.update(profile.sample_types)
        ns += sum(s.values.get("cpu", 0) for s in profile.samples)
    if "cpu" not in types:
        raise SystemExit("pyroscope-io's pushes have no `cpu` sample type (they have %s): "
                         "this bench cannot count its ticks" % (sorted(types) or "no profile"))
    return round(ns / period_ns)


def pyroscope_ticks(args, variant):
    port = 4047
    with tempfile.TemporaryDirectory() as d:
        server = subprocess.Popen([args.python, os.path.join(PY_TESTS, "pyroscope_capture.py"), str(port), d],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.5)
            if server.poll() is not None:
                raise SystemExit("the capture server could not listen on 127.0.0.1:%d; free the port "
                                 "(another pyroscope_capture.py?) and run again" % port)
            cmd = [args.python, os.path.join(args.bench, "workload.py"), "--variant", variant,
                   "--agent", "pyroscope", "--pyroscope-url", "http://127.0.0.1:%d" % port,
                   "--duration", str(args.duration), "--rate", "100"]
            t0 = time.perf_counter()
            subprocess.run(cmd, capture_output=True, text=True, check=True)
            wall = time.perf_counter() - t0
            # The last push is sent at exit; give the server a moment to write it.
            time.sleep(0.5)
            if not glob.glob(os.path.join(d, "*.json")):
                raise SystemExit("pyroscope-io pushed nothing to 127.0.0.1:%d during the run" % port)
            return pushed_samples(d, 10_000_000), wall
        finally:
            server.terminate()
            server.wait()


def ddtrace_ticks(args, variant):
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, DD_TRACE_ENABLED="false", DD_PROFILING_ENABLED="true",
                   DD_INSTRUMENTATION_TELEMETRY_ENABLED="false",
                   DD_PROFILING_OUTPUT_PPROF=os.path.join(d, "prof"),
                   # Nothing listens there: the profile is only written locally.
                   DD_TRACE_AGENT_URL="http://127.0.0.1:9")
        runner = ("import sys, runpy, ddtrace.profiling.auto; sys.argv = sys.argv[1:]; "
                  "runpy.run_path(sys.argv[0], run_name='__main__')")
        cmd = [args.python, "-c", runner, os.path.join(args.bench, "workload.py"), "--variant", variant,
               "--agent", "none", "--duration", str(args.duration), "--rate", "100"]
        t0 = time.perf_counter()
        subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
        wall = time.perf_counter() - t0
        metas = glob.glob(os.path.join(d, "prof.*.internal_metadata.json"))
        if not metas:
            raise SystemExit("ddtrace wrote no profile metadata under %s (DD_PROFILING_OUTPUT_PPROF)" % d)
        ticks = 0
        for m in metas:
            with open(m) as f:
                meta = json.load(f)
            if "sampling_event_count" not in meta:
                raise SystemExit("%s has no sampling_event_count (keys: %s): this ddtrace version "
                                 "does not report its ticks" % (m, ", ".join(sorted(meta))))
            ticks += meta["sampling_event_count"]
        return ticks, wall


ARMS = {"span_profile": span_profile_ticks, "py-spy": py_spy_ticks, "pyroscope": pyroscope_ticks,
        "ddtrace": ddtrace_ticks}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "..", "..", "shared", "bench"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--variants", nargs="+", default=["threads", "asyncio", "idle64"])
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--duration", type=float, default=6.0)
    ap.add_argument("--arms", nargs="+", choices=sorted(ARMS), default=["span_profile", "py-spy"])
    args = ap.parse_args()
    for variant in args.variants:
        for i in range(args.runs):
            for arm in args.arms:
                ticks, wall = ARMS[arm](args, variant)
                print(json.dumps({"variant": variant, "arm": arm, "run": i, "ticks": ticks,
                                  "wall_s": round(wall, 2), "ticks_per_s": round(ticks / wall, 1),
                                  "load1": round(os.getloadavg()[0], 2)}), flush=True)


if __name__ == "__main__":
    main()
