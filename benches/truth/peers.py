#!/usr/bin/env python3
"""span_profile and its peers checked against ground truth that the workload measures itself.
Each run goes through the workloads, and within each the profilers in turn (A B C D), every one
on a fresh child process (workloads.py) at 100 Hz; prints a table, or JSON with --json.

    python benches/truth/peers.py --python target/venvs/peers/bin/python --duration 6 --runs 1

Workloads (workloads.py says how they are built):
  duty   threads burning 100/50/20/5/0% of each 10-100 ms period in `burn_<d>`, beside GIL-free
         hashing threads (one a core) so that more threads are runnable than there are cores.
         Truth: each thread's time.thread_time(). Shown: the CPU the profile gives that thread.
  churn  4 threads each creating, calling once and dropping uniquely named functions
         `churn_t<k>_<seq>` (exec'd def, FunctionType over code.replace, eval'd lambda
         renamed). Truth: which thread ran which name, and when.

Profilers:
  span_profile  in the child, span_profile.start(sample_rate_hz=100, window_s=1, overhead_budget=0):
                the budget off. CPU: the `cpu` value (ns).
  py-spy        py-spy record -r 100 --nonblocking --threads, out of process. duty: --format raw
                without --idle (py-spy leaves out samples of threads it finds idle), CPU = samples
                of the thread x 10 ms, py-spy only counts. churn: --format speedscope --idle, so
                every tick of every thread is kept in order (its only clue to when).
  pyroscope     pyroscope-io in the child with its defaults (py-spy based, oncpu, gil_only) plus
                report_thread_name/id and 1 s pushes, to a capture server on 127.0.0.1
                (tests/python/pyroscope_capture.py). CPU: its `cpu` value.
  ddtrace       `import ddtrace.profiling.auto` with its defaults, the profile written locally
                (DD_PROFILING_OUTPUT_PPROF); tracing off, the agent URL a closed 127.0.0.1 port.
                CPU: its `cpu-time` value.

A sample belongs to the thread its thread label names (name, else id); a sample with neither
goes by the thread's own outer function in its stack.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import readers  # noqa: E402
from readers import PY_TESTS, Unreadable  # noqa: E402

WORKLOADS = os.path.join(HERE, "workloads.py")
CAPTURE = os.path.join(PY_TESTS, "pyroscope_capture.py")
PROFILERS = ("span_profile", "py-spy", "pyroscope", "ddtrace")
RATE_HZ = 100
INTERVAL_NS = 1_000_000_000 // RATE_HZ
#: How each profiler places a sample in time, for the churn criterion.
TIME_BOUND = {"span_profile": "1 s window", "py-spy": "tick index", "pyroscope": "1 s push",
              "ddtrace": "timestamp"}

HOW = {"span_profile": "in process, 100 Hz, budget off, 1 s windows",
       "py-spy": "record -r 100 --nonblocking --threads; duty raw without --idle, churn speedscope --idle",
       "pyroscope": "pyroscope-io defaults (oncpu, gil_only: GIL-free threads are not sampled), 1 s pushes",
       "ddtrace": "ddtrace.profiling.auto defaults (adaptive interval, timeline on)"}


class RunFailed(Exception):
    pass


def py_spy_path(args):
    p = os.path.join(os.path.dirname(args.python), "py-spy")
    return p if os.path.exists(p) else shutil.which("py-spy")


def missing(args, profiler):
    """Why `profiler` cannot run with --python, or None."""
    if profiler == "py-spy":
        return None if py_spy_path(args) else "no py-spy beside %s nor on PATH" % args.python
    module = {"span_profile": "span_profile, opentelemetry.sdk", "pyroscope": "pyroscope",
              "ddtrace": "ddtrace.profiling"}[profiler]
    p = subprocess.run([args.python, "-c", "import " + module], capture_output=True, text=True, timeout=60)
    if p.returncode:
        return "`import %s` fails in %s: %s" % (module, args.python, (p.stderr.strip().splitlines() or ["?"])[-1])
    return None


def child(args, workload, truth, *extra):
    return [args.python, WORKLOADS, "--workload", workload, "--duration", str(args.duration),
            "--truth", truth] + list(extra)


def run(cmd, timeout, env=None):
    """Runs cmd in its own process group, which is killed (with py-spy's child, say) on timeout."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True)
    try:
        _, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise RunFailed("did not finish within %d s" % timeout) from None
    if p.returncode:
        tail = (err.strip().splitlines() or ["no stderr"])[-1]
        raise RunFailed("exited with %d: %s" % (p.returncode, tail))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, seconds=10):
    end = time.monotonic() + seconds
    while time.monotonic() < end and proc.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def lifetimes(truth):
    return {name: (t.get("born_ns", t.get("start_ns", truth["start_ns"])), t.get("end_ns", truth["end_ns"]))
            for name, t in truth["threads"].items()}


def profile_span_profile(args, workload, d, timeout):
    out = os.path.join(d, "profiles")
    env = dict(os.environ, SPAN_PROFILE_OVERHEAD_BUDGET="0")
    run(child(args, workload, os.path.join(d, "truth.json"), "--agent", "span_profile", "--output", out), timeout, env)
    return lambda truth: readers.span_profile(out)


def profile_py_spy(args, workload, d, timeout):
    path = os.path.join(d, "py-spy.out")
    cmd = [py_spy_path(args), "record", "-r", str(RATE_HZ), "--nonblocking", "--threads", "-o", path]
    cmd += ["--format", "raw"] if workload == "duty" else ["--format", "speedscope", "--idle"]
    run(cmd + ["--"] + child(args, workload, os.path.join(d, "truth.json")), timeout)
    if workload == "duty":
        return lambda truth: readers.py_spy_raw(path, INTERVAL_NS)
    return lambda truth: readers.py_spy_speedscope(path, lifetimes(truth))


def profile_pyroscope(args, workload, d, timeout):
    port, capture = free_port(), os.path.join(d, "capture")
    server = subprocess.Popen([sys.executable, CAPTURE, str(port), capture],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not wait_listening(port, server):
            raise RunFailed("the capture server did not listen on 127.0.0.1:%d" % port)
        run(child(args, workload, os.path.join(d, "truth.json"), "--agent", "pyroscope",
                  "--pyroscope-url", "http://127.0.0.1:%d" % port), timeout)
        time.sleep(0.5)  # the last push is sent at shutdown; let the server write it
    finally:
        server.terminate()
        server.wait(timeout=10)
    return lambda truth: readers.pyroscope(capture, INTERVAL_NS)


def profile_ddtrace(args, workload, d, timeout):
    prefix = os.path.join(d, "prof")
    env = dict(os.environ, DD_TRACE_ENABLED="false", DD_PROFILING_ENABLED="true",
               DD_INSTRUMENTATION_TELEMETRY_ENABLED="false", DD_REMOTE_CONFIGURATION_ENABLED="false",
               DD_PROFILING_OUTPUT_PPROF=prefix,
               # Nothing listens there: the profile is only written locally.
               DD_TRACE_AGENT_URL="http://127.0.0.1:9")
    runner = ("import sys, runpy, ddtrace.profiling.auto; sys.argv = sys.argv[1:]; "
              "runpy.run_path(sys.argv[0], run_name='__main__')")
    cmd = child(args, workload, os.path.join(d, "truth.json"))
    run([args.python, "-c", runner] + cmd[1:], timeout, env)
    return lambda truth: readers.ddtrace(prefix)


RUNNERS = {"span_profile": profile_span_profile, "py-spy": profile_py_spy, "pyroscope": profile_pyroscope,
           "ddtrace": profile_ddtrace}


class Threads:
    """Finds the truth thread of a record: by thread name, else by id, else by the thread's own
    outer function in the stack."""

    def __init__(self, truth):
        self.names = set(truth["threads"])
        self.ids, self.frames = {}, {}
        for name, t in truth["threads"].items():
            for k in ("native_id", "ident"):
                if t.get(k):
                    self.ids[t[k]] = name
            for f in t["frames"]:
                self.frames[f] = name

    def of(self, rec):
        if rec.thread in self.names:
            return rec.thread
        if rec.tid in self.ids:
            return self.ids[rec.tid]
        for f in rec.frames:
            name = self.frames.get(f.rsplit(".", 1)[-1])
            if name:
                return name
        return None


def score_duty(truth, recs, profiler):
    threads = Threads(truth)
    cpu, samples = {}, {}
    for r in recs:
        t = threads.of(r)
        if t is None:
            continue
        if r.cpu_ns is None:
            raise Unreadable("a sample of %s carries no CPU value" % t)
        cpu[t] = cpu.get(t, 0) + r.cpu_ns
        samples[t] = samples.get(t, 0) + r.count
    if not samples:
        raise Unreadable("its profile has no sample of any workload thread (%d records in all)" % len(recs))
    rows = []
    for name, t in sorted(truth["threads"].items(), key=lambda kv: order_key(kv[0])):
        meas, got = t["cpu_ns"] / 1e6, cpu.get(name, 0) / 1e6
        ratio = got / meas if meas >= 1.0 else None
        rows.append({"thread": name, "duty_pct": t["duty_pct"], "measured_ms": meas, "profile_ms": got,
                     "samples": samples.get(name, 0), "ratio": ratio,
                     "error_pct": None if ratio is None else 100 * (ratio - 1)})
    return rows


def order_key(name):
    if name.startswith("duty_"):
        return (0, -int(name[5:]))
    return (1, name)


def score_churn(truth, recs, profiler, stale_s):
    """Per churn thread, its samples whose stack holds a churned function's frame (file <churn>
    or a churn_t<k>_<seq> name), classified by the leaf-most such frame:
      right  a name this thread created whose run [start, end] meets the sample's time bound
             widened by stale_s each side
      stale  a name this thread created, but run more than stale_s away from the sample
      wrong  any other name: another thread's, one never created, or not a churn name at all
    Samples of the thread with no such frame (creating, not yet calling) are `outside`."""
    import re

    pat = re.compile(truth["pattern"])
    threads = Threads(truth)
    base, tol = truth["base_ns"], int(stale_s * 1e9)
    per = {name: {"samples": 0, "right": 0, "stale": 0, "wrong": 0, "outside": 0, "wrong_names": {}}
           for name in truth["threads"]}
    for r in recs:
        name = threads.of(r)
        if name is None:
            continue
        t = truth["threads"][name]
        acc = per[name]
        leaf = None
        for fn, fl in zip(r.frames, r.files):
            short = fn.rsplit(".", 1)[-1]
            # The <module> frame of <churn> is the exec of a `def` statement, not a churned function.
            if pat.match(short) or (fl.endswith(truth["file"]) and short != "<module>"):
                leaf = short
                break
        if leaf is None:
            acc["outside"] += r.count
            continue
        acc["samples"] += r.count
        m = pat.match(leaf)
        k, seq = (int(m.group(1)), int(m.group(2))) if m else (None, None)
        if m is None or "churn_t%d" % k != name or seq >= t["names"]:
            acc["wrong"] += r.count
            acc["wrong_names"][leaf] = acc["wrong_names"].get(leaf, 0) + r.count
            continue
        lo = r.t_lo if r.t_lo is not None else truth["start_ns"]
        hi = r.t_hi if r.t_hi is not None else truth["end_ns"]
        start, end = base + t["starts_us"][seq] * 1000, base + t["ends_us"][seq] * 1000
        if end >= lo - tol and start <= hi + tol:
            acc["right"] += r.count
        else:
            acc["stale"] += r.count
    if not any(a["samples"] + a["outside"] for a in per.values()):
        raise Unreadable("its profile has no sample of any churn thread (%d records in all)" % len(recs))
    rows = []
    for name in sorted(per):
        t, acc = truth["threads"][name], per[name]
        top = sorted(acc.pop("wrong_names").items(), key=lambda kv: -kv[1])[:3]
        rows.append(dict(acc, thread=name, bad=acc["stale"] + acc["wrong"], names=t["names"], names_per_s=t["names_per_s"],
                         mean_cpu_us=t["mean_cpu_us"], time_bound=TIME_BOUND[profiler],
                         wrong_examples=top))
    return rows


def one(args, workload, profiler, run_no):
    timeout = int(args.duration) + 120
    with tempfile.TemporaryDirectory(prefix="truth-") as d:
        try:
            read = RUNNERS[profiler](args, workload, d, timeout)
            with open(os.path.join(d, "truth.json")) as f:
                truth = json.load(f)
            recs = read(truth)
            if workload == "duty":
                rows = score_duty(truth, recs, profiler)
            else:
                rows = score_churn(truth, recs, profiler, args.stale_s)
        except (RunFailed, Unreadable, OSError, ValueError, KeyError) as e:
            return [{"workload": workload, "profiler": profiler, "run": run_no,
                     "error": "%s: %s" % (type(e).__name__, e)}]
    for r in rows:
        r.update(workload=workload, profiler=profiler, run=run_no)
    return rows


def pct(a, b):
    return 100.0 * a / b if b else float("nan")


def table(rows, args, skipped):
    out = []
    for p, why in skipped.items():
        out.append("skipped %s: %s" % (p, why))
    errors = {}
    for r in rows:
        if "error" in r:
            errors.setdefault((r["workload"], r["profiler"]), []).append("run %d: %s" % (r["run"], r["error"]))
    good = [r for r in rows if "error" not in r]

    def groups(workload):
        keys = []
        for r in good:
            k = (r["profiler"], r["thread"])
            if r["workload"] == workload and k not in keys:
                keys.append(k)
        return [(k, [r for r in good if r["workload"] == workload and (r["profiler"], r["thread"]) == k])
                for k in keys]

    if "duty" in args.workloads:
        out.append("")
        out.append("duty cycle: %g s, %d run(s). measured = the thread's own time.thread_time(); profile = the CPU "
                   "the profile gives that thread" % (args.duration, args.runs))
        out.append("(py-spy: its samples of the thread x 10 ms). ratio = profile / measured, error = ratio - 1; "
                   "with --runs > 1 the median ratio [min-max].")
        out.append("%-13s %-10s %8s %12s %12s %8s %18s %10s" % ("profiler", "thread", "duty", "measured ms",
                                                              "profile ms", "samples", "ratio", "error %"))
        for (prof, thread), rs in groups("duty"):
            meas = statistics.mean(r["measured_ms"] for r in rs)
            got = statistics.mean(r["profile_ms"] for r in rs)
            samples = statistics.mean(r["samples"] for r in rs)
            duty = "%d%%" % rs[0]["duty_pct"] if rs[0]["duty_pct"] is not None else "GIL-free"
            ratios = [r["profile_ms"] / r["measured_ms"] for r in rs if r["measured_ms"] >= 1.0]
            if ratios:
                med = statistics.median(ratios)
                ratio = "%.2f" % med if len(ratios) == 1 else "%.2f [%.2f-%.2f]" % (med, min(ratios), max(ratios))
                err = "%+.1f" % (100 * (med - 1))
            else:
                ratio, err = "- (< 1 ms)", "%+.1f ms" % (got - meas)
            out.append("%-13s %-10s %8s %12.1f %12.1f %8.0f %18s %10s" % (prof, thread, duty, meas, got, samples,
                                                                          ratio, err))
        for (w, p), es in errors.items():
            if w == "duty":
                out.append("%-13s not measured: %s" % (p, "; ".join(es)))
    if "churn" in args.workloads:
        out.append("")
        out.append("name churn: %g s, %d run(s), 4 threads. Classified by the leaf-most frame of a churned function "
                   "in each sample of a churn thread:" % (args.duration, args.runs))
        out.append("right = a name that thread created, run within %g s of when the sample was taken (as far as the "
                   "profiler says when: `time bound`);" % args.stale_s)
        out.append("bad = stale + wrong: stale = a name that thread created, run more than %g s away; wrong = another "
                   "thread's name, one never created, or no churn name." % args.stale_s)
        out.append("outside = samples of the thread in no churned function (creating one, or the exec of its def). "
                   "names/s and CPU/fn are the workload's own.")
        out.append("%-13s %-9s %8s %9s %8s %8s %8s %8s %8s %8s  %-11s %s" % (
            "profiler", "thread", "names/s", "CPU/fn us", "samples", "right %", "bad %", "stale %", "wrong %",
            "outside", "time bound", "wrong names (top)"))
        for (prof, thread), rs in groups("churn"):
            n = sum(r["samples"] for r in rs)
            right, stale, wrong = (sum(r[k] for r in rs) for k in ("right", "stale", "wrong"))
            examples = {}
            for r in rs:
                for name, c in r["wrong_examples"]:
                    examples[name] = examples.get(name, 0) + c
            ex = ", ".join("%r x%d" % (name[:24], c) for name, c in
                           sorted(examples.items(), key=lambda kv: -kv[1])[:3])
            if n:
                cells = "%8.1f %8.1f %8.1f %8.1f" % (pct(right, n), pct(stale + wrong, n), pct(stale, n),
                                                     pct(wrong, n))
            else:
                cells = "%35s" % "no churned function in any sample"
            out.append("%-13s %-9s %8.0f %9.0f %8d %s %8d  %-11s %s" % (
                prof, thread, statistics.mean(r["names_per_s"] for r in rs),
                statistics.mean(r["mean_cpu_us"] for r in rs), n, cells, sum(r["outside"] for r in rs),
                rs[0]["time_bound"], ex))
        for (w, p), es in errors.items():
            if w == "churn":
                out.append("%-13s not measured: %s" % (p, "; ".join(es)))
    out.append("")
    out.append("How each was run (see --help): " + "; ".join("%s: %s" % (p, HOW[p]) for p in args.profilers
                                                            if p not in skipped))
    out.append("load average at the end: %.2f (2 cores shared with other work)" % os.getloadavg()[0])
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable, help="the interpreter whose environment has the profilers")
    ap.add_argument("--profilers", nargs="+", choices=PROFILERS, default=list(PROFILERS))
    ap.add_argument("--workloads", nargs="+", choices=["duty", "churn"], default=["duty", "churn"])
    ap.add_argument("--duration", type=float, default=6.0, help="seconds each workload runs")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--stale-s", type=float, default=1.0,
                    help="churn: how far (s) from the sample's time bound a name's run may lie and still be right")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of the table")
    args = ap.parse_args()
    if not 0 < args.duration <= 120:
        ap.error("--duration must be in (0, 120] seconds")
    if not 1 <= args.runs <= 20:
        ap.error("--runs must be 1 to 20")

    skipped, profilers = {}, []
    for p in args.profilers:
        why = missing(args, p)
        if why:
            skipped[p] = why
            print("skipping %s: %s" % (p, why), file=sys.stderr, flush=True)
        else:
            profilers.append(p)
    if not profilers:
        sys.exit("no profiler can run with %s" % args.python)
    rows = []
    for i in range(args.runs):
        for w in args.workloads:
            for p in profilers:
                print("run %d %s %s ..." % (i, w, p), file=sys.stderr, flush=True)
                rows += one(args, w, p, i)
    if args.json:
        print(json.dumps({"duration_s": args.duration, "runs": args.runs, "stale_s": args.stale_s,
                          "skipped": skipped, "rows": rows, "load1": os.getloadavg()[0]}, indent=1))
    else:
        print(table(rows, args, skipped))


if __name__ == "__main__":
    main()
