#!/usr/bin/env python3
"""Overhead at a fixed load: what a profiler costs a service per request and in tail latency when
requests arrive at a set rate (open loop), against no profiler and against the peers.

    python benches/overhead/fixed_load.py --python target/venvs/bench-3.12/bin/python \\
        --bench ../shared/bench --services threads asyncio fastapi --loads 0.3 0.7 --runs 5 --duration 10
    python benches/overhead/fixed_load.py --python ... --smoke      # one short pass per arm, untimed

For each service (fixed_load_service.py: threads, asyncio, FastAPI on uvicorn) and each load
level (a fraction of one core, turned into a request rate by a calibration run without a
profiler), every arm runs in turn (none A B C ... none A B C ..., --runs times). Each run starts
the service under the arm, sends --warmup seconds of load, then measures --duration seconds of
load from fixed_load_client.py (another process, Poisson arrivals at the rate, latency from the
scheduled arrival to the end of the response). Per run:

  cpu_ms_per_req  the service process's CPU over the measured load (utime+stime of all its
                  threads, exited ones included, read by the service as process_time_ns at its
                  /stats; so the agent's threads, the span hooks on the request threads and any
                  interference count), plus py-spy's own for that arm, per completed request
  p50/p99/p999_ms latency from scheduled arrival to completion
  rss_steady_mb   median VmRSS over the second half of the measured load; rss_peak_mb: VmHWM
                  (py-spy's own VmHWM is given apart, as profiler_rss_mb)
  sample_hz       span_profile: ticks per second from span_profile.stats(); py-spy: the samples it
                  reports at exit over its run time (every thread's samples); others: not readable
  sampler_us_per_req, export_us_per_req
                  span_profile's own threads' CPU (their schedstat, found by thread name) per
                  completed request: what of cpu_ms_per_req is not the application's threads

Arms: none, span_profile-full (100 Hz, budget off), span_profile (100 Hz, default budget), py-spy
(record -r 100 --nonblocking, out of process), pyroscope (pyroscope-io + pyroscope-otel), ddtrace
(ddtrace.auto with its OpenTelemetry bridge, DD_TRACE_OTEL_ENABLED, and profiling on), and, only when
asked for, ddtrace-100hz (the same with its adaptive sampling off and its interval at 10 ms), and two
arms that break span_profile's cost down: span_profile-hooks (its span hooks, with the sampler at
1 Hz), span_profile-w1 (100 Hz with 1 s windows, so a 10 s run closes and exports ten) and
span_profile-nowatch (100 Hz with SPAN_PROFILE_SCHED_WATCH=0: every thread's CPU clock read each tick,
no scheduler pages, ADR 0033), and three that take span_profile-hooks apart: sdk-noop (the SDK's own
do-nothing SpanProcessor), span_profile-noagent (span_profile's SpanProcessor, no agent started) and
span_profile-nohooks (the agent at 1 Hz without the SpanProcessor); span_profile-50hz and
span_profile-20hz are span_profile-full at a lower rate (what lowering sample_rate_hz buys); none-twin
is none under another name, the control of --concurrent (none beside none). A peer that
is not installed in --python is skipped with a note. Peers upload to a local sink in this process.

The table gives, per service, load and arm, the median over runs and, against the none run of the
same round, the paired change (median [min-max] of the per-round ratios). A second table decides
the targets (--cpu-target, --p99-target: issue 29's +2% CPU a request and +5% p99): the paired
ratios' geometric mean with a 95% interval over the rounds (Student's t on the logs), and "within" only when the
whole interval is at or under the target, "above" when all of it is over, else "not decided". Run
none-twin beside the arms: its interval is what the machine's noise alone gives.

--against B/bin/python compares two builds of span_profile (or of a peer): every arm but none also
runs with that interpreter, named ARM@b, and its change is against the same arm of --python, of the
same round or, with --concurrent, run beside it (the two builds side by side; none is not run then):

    python benches/overhead/fixed_load.py --concurrent --python A/bin/python --against B/bin/python \
        --bench ../shared/bench --services threads --loads 0.3 --arms span_profile-full --runs 8

--concurrent pairs in time instead: in each round every arm runs at the same time as a none run of
its own (the two services and their clients side by side on the machine, the same arrival
schedule, which one starts first alternating by round), and its change is against that none run.
What the machine's other tenants, its clock and its caches do to one run they do to the other, so
the CPU per request resolves differences that runs in turn do not (on the 2-core benchmark VM, none
beside none, --arms none none-twin, read -0.6% to +1.2% over 8 rounds at 30% of a core, where runs in
turn spread ±5-10%).
Latency is then measured beside a neighbour's load: its paired change still compares like with
like, but its values are not a lone service's. Keep the load low enough that two services and two
clients fit the machine. A run whose service did
not keep up (responses still out --drain seconds after the last arrival) is counted in the last
column and left out of the figures. The last column also counts a span_profile arm's runs that
closed a window while measured (they stay in the figures): windows end on the wall clock's
multiples of their length (60 s by default), so a run of a few seconds pays for a close and an
export only when it straddles one, and only such runs' CPU includes them. It counts, too, the runs
in which the service's cyclic garbage collector made a full collection (tens of ms without an
answer, so in that run's p99.9, whatever the arm); the service makes the first one, over what its
imports made, before it listens.
"""
import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
CLK_TCK = os.sysconf("SC_CLK_TCK")
ARMS = ["none", "span_profile-full", "span_profile", "py-spy", "pyroscope", "ddtrace", "ddtrace-100hz",
        "span_profile-hooks", "span_profile-w1", "span_profile-nowatch", "sdk-noop", "span_profile-noagent",
        "span_profile-nohooks", "none-twin", "span_profile-50hz", "span_profile-20hz"]
DEFAULT_ARMS = ARMS[:6]
#: Arms that run span_profile with the budget off, and the sample rate each asks for.
SPAN_PROFILE_RATE = {"span_profile-full": 100, "span_profile-hooks": 1, "span_profile-w1": 100,
                     "span_profile-nowatch": 100, "span_profile-nohooks": 1, "span_profile-50hz": 50,
                     "span_profile-20hz": 20}
#: Arms that are an agent of fixed_load_service.py of their own (the others run span_profile-full's
#: agent with the environment above, or none under py-spy).
OWN_AGENT = {"sdk-noop", "span_profile-noagent", "span_profile-nohooks"}


def proc_cpu_s(pid):
    """utime + stime of a process (all its threads, the exited ones included), in seconds."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def agent_threads(pid):
    """span_profile's own threads in process `pid`, now alive, found by the names the agent
    gives them: {tid: "sampler" or "export"}."""
    out = {}
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for t in tasks:
        try:
            with open("/proc/%d/task/%s/comm" % (pid, t)) as f:
                comm = f.read().strip()
        except OSError:
            continue
        role = {"span-profile-sa": "sampler", "span-profile-ex": "export"}.get(comm[:15])
        if role:
            out[int(t)] = role
    return out


def agent_threads_cpu_s(pid):
    """CPU seconds (the scheduler's `schedstat`) of span_profile's own threads now alive, by
    role: {"sampler": ..., "export": ...}; the rest of the process is the application's."""
    out = {"sampler": 0.0, "export": 0.0}
    for tid, role in agent_threads(pid).items():
        try:
            with open("/proc/%d/task/%d/schedstat" % (pid, tid)) as f:
                out[role] += int(f.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            pass
    return out


def proc_status_mb(pid, key):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


class Sink(BaseHTTPRequestHandler):
    """Accepts any upload (pyroscope's POSTs, ddtrace's PUTs of traces and POSTs of profiles)."""
    protocol_version = "HTTP/1.1"

    def _ok(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_PUT = _ok

    def log_message(self, *a):
        pass


def start_sink():
    ThreadingHTTPServer.daemon_threads = True
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return "http://127.0.0.1:%d" % srv.server_address[1]


#: The suffix of an arm run with the interpreter of --against (another build of span_profile).
AGAINST = "@b"


def build_of(args, arm):
    """(the arm as fixed_load_service.py knows it, the interpreter it runs with): an arm named
    with the suffix AGAINST runs with --against, every other with --python."""
    if arm.endswith(AGAINST):
        return arm[:-len(AGAINST)], args.against
    return arm, args.python


def base_arm(arm):
    """The arm that `arm` is compared with: an arm of the second build (--against) with the same
    arm of the first; any other with none."""
    return arm[:-len(AGAINST)] if arm.endswith(AGAINST) else "none"


def arm_available(args, arm):
    """None when the arm can run with its interpreter (--python, or --against), else why not."""
    arm, python = build_of(args, arm)
    if arm == "py-spy":
        return None if os.access(pyspy_path(python), os.X_OK) else "no py-spy next to " + python
    mod = {"span_profile-full": "span_profile", "span_profile": "span_profile", "pyroscope": "pyroscope.otel",
           "span_profile-hooks": "span_profile", "span_profile-w1": "span_profile",
           "span_profile-nowatch": "span_profile", "span_profile-noagent": "span_profile",
           "span_profile-nohooks": "span_profile", "span_profile-50hz": "span_profile",
           "span_profile-20hz": "span_profile",
           "ddtrace": "ddtrace.opentelemetry", "ddtrace-100hz": "ddtrace.opentelemetry"}.get(arm)
    if mod is None:
        return None
    rc = subprocess.run([python, "-c", "import " + mod], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL).returncode
    return None if rc == 0 else "%s does not import in %s" % (mod, python)


def service_agent(arm):
    """The --agent of fixed_load_service.py for `arm`."""
    if arm in ("py-spy", "none-twin"):
        return "none"  # py-spy: out of process
    if arm in OWN_AGENT:
        return arm
    return "span_profile-full" if arm in SPAN_PROFILE_RATE else arm


def pyspy_path(python):
    return os.path.join(os.path.dirname(python), "py-spy")


def get_json(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=30) as r:
        return json.loads(r.read())


def client(args, port, rate, duration, first, seed):
    out = subprocess.run([args.python, os.path.join(HERE, "fixed_load_client.py"), "--port", str(port),
                          "--rate", "%.3f" % rate, "--duration", str(duration), "--first", str(first),
                          "--seed", str(seed), "--arrivals", args.arrivals],
                         stdout=subprocess.PIPE, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_once(args, service, name, rate, seed, sink):
    """One run of one arm (`name`, with AGAINST's suffix for the second build): starts the
    service, loads it, measures, stops it."""
    arm, python = build_of(args, name)
    cmd = [python, os.path.join(HERE, "fixed_load_service.py"), "--service", service,
           "--agent", service_agent(arm), "--bench", args.bench, "--rate", str(SPAN_PROFILE_RATE.get(arm, 100)),
           "--sink", sink, "--work", str(args.work), "--idle-threads", str(args.idle_threads)]
    env = dict(os.environ)
    for k in [k for k in env if k.startswith(("SPAN_PROFILE_", "DD_"))]:
        del env[k]
    if arm in SPAN_PROFILE_RATE:
        env["SPAN_PROFILE_OVERHEAD_BUDGET"] = "0"
    if arm == "span_profile-w1":
        env["SPAN_PROFILE_WINDOW_S"] = "1"
    if arm == "span_profile-nowatch":
        env["SPAN_PROFILE_SCHED_WATCH"] = "0"
    if arm.startswith("ddtrace"):
        env.update(DD_TRACE_OTEL_ENABLED="true", DD_PROFILING_ENABLED="true", DD_TRACE_AGENT_URL=sink,
                   DD_INSTRUMENTATION_TELEMETRY_ENABLED="false", DD_REMOTE_CONFIGURATION_ENABLED="false",
                   DD_SERVICE="bench", DD_ENV="bench")
    if arm == "ddtrace-100hz":  # its adaptive sampling off, every 10 ms (ddtrace 4.x's private settings)
        env.update(_DD_PROFILING_STACK_ADAPTIVE_SAMPLING_ENABLED="false",
                   _DD_PROFILING_STACK_ADAPTIVE_SAMPLING_MAX_INTERVAL_US="10000")
    if arm == "py-spy":
        cmd = [pyspy_path(python), "record", "-r", "100", "--nonblocking", "-o", os.devnull, "--format", "raw",
               "--"] + cmd
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    err_lines = []
    threading.Thread(target=lambda: err_lines.extend(p.stderr), daemon=True).start()
    port = None
    t_start = time.monotonic()
    while port is None:
        line = p.stdout.readline()
        if not line:
            p.wait()
            return {"error": "the service exited before listening (rc %s): %s" % (p.returncode, "".join(err_lines)[-800:])}
        if line.startswith("READY "):
            port = int(line.split()[1])
    out_lines = []
    reader = threading.Thread(target=lambda: out_lines.extend(p.stdout), daemon=True)
    reader.start()
    try:
        pid = get_json(port, "/stats")["pid"]
        client(args, port, rate, args.warmup, 0, seed + 1000)
        s0 = get_json(port, "/stats")
        c0, pc0, t0 = proc_cpu_s(pid), proc_cpu_s(p.pid) if arm == "py-spy" else 0.0, time.monotonic()
        a0 = agent_threads_cpu_s(pid)
        rss, stop = [], threading.Event()

        def poll_rss():
            while not stop.wait(0.2):
                v = proc_status_mb(pid, "VmRSS")
                if v is not None:
                    rss.append(v)
        poller = threading.Thread(target=poll_rss, daemon=True)
        poller.start()
        load = client(args, port, rate, args.duration, 1_000_000, seed)
        c1, pc1, t1 = proc_cpu_s(pid), proc_cpu_s(p.pid) if arm == "py-spy" else 0.0, time.monotonic()
        a1 = agent_threads_cpu_s(pid)
        stop.set()
        poller.join()
        s1 = get_json(port, "/stats")
        peak = max([proc_status_mb(pid, "VmHWM") or 0.0] + rss)  # VmHWM can trail VmRSS a little
        prof_rss = proc_status_mb(p.pid, "VmHWM") if arm == "py-spy" else None
    finally:
        p.send_signal(signal.SIGINT if arm == "py-spy" else signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        if arm == "py-spy":  # py-spy has passed SIGINT on; make sure the service is gone too
            try:
                os.kill(pid, signal.SIGTERM)
            except (OSError, UnboundLocalError):
                pass
    t_end = time.monotonic()
    reader.join(timeout=5)
    r = dict(load)
    # The service's own count (process_time_ns, at its /stats reads) has nanoseconds where
    # /proc's has 10 ms ticks, 0.5% of an 8 s run at 30% of a core.
    if "cpu_ns" in s0 and "cpu_ns" in s1:
        cpu = (s1["cpu_ns"] - s0["cpu_ns"]) / 1e9 + (pc1 - pc0)
    else:
        cpu = (c1 - c0) + (pc1 - pc0)
    r.update(service=service, arm=name, python=python, cpu_s=round(cpu, 3),
             cpu_ms_per_req=round(1000 * cpu / load["completed"], 4) if load["completed"] else None,
             rss_steady_mb=round(statistics.median(rss[len(rss) // 2:]), 1) if rss else None,
             rss_peak_mb=peak and round(peak, 1), profiler_rss_mb=prof_rss and round(prof_rss, 1),
             sample_hz=None, load1=round(os.getloadavg()[0], 2))
    # What span_profile's own threads used in the run, a request (µs); the rest of the
    # process's CPU is the application's threads, span hooks included.
    if load["completed"]:
        for role in ("sampler", "export"):
            r[role + "_us_per_req"] = round(1e6 * (a1[role] - a0[role]) / load["completed"], 2)
    if "gc_full" in s0 and "gc_full" in s1:
        # A full collection of the cyclic collector while measured: tens of ms in which the
        # service answers nothing, so it is in that run's p99.9 whatever the arm.
        r["gc_full"] = s1["gc_full"] - s0["gc_full"]
    if arm.startswith("span_profile") and "agent" in s0 and "agent" in s1:
        r["sample_hz"] = round((s1["agent"].get("ticks", 0) - s0["agent"].get("ticks", 0)) / (t1 - t0), 1)
        # Windows end on the wall clock's multiples of their length, so a run shorter than a
        # window closes one (and pays its close and export) only if it straddles such an edge.
        r["windows_closed"] = s1["agent"].get("windows", 0) - s0["agent"].get("windows", 0)
    if arm == "py-spy":
        for line in err_lines + out_lines:  # py-spy> Wrote ... Samples: N Errors: M
            if "Samples:" in line:
                try:
                    n = int(line.split("Samples:")[1].split()[0])
                    r["sample_hz"] = round(n / (t_end - t_start), 1)  # all threads' samples
                except (IndexError, ValueError):
                    pass
    return r


def rounds(args, service, arms, rate, run, sink):
    """The runs of round `run`, as lists of (arm, result): one run at a time, each arm in turn;
    or, with --concurrent, every arm but none beside a none run of its own, the two at once
    (the same arrival schedule; which starts first alternates by round and arm)."""
    seed = 100 * run + 1
    if not args.concurrent:
        for arm in arms:
            yield [(arm, run_once(args, service, arm, rate, seed, sink))]
        return
    # Under --against the second build's arms run beside the first's, else every arm beside none.
    compared = [a for a in arms if a.endswith(AGAINST)] if args.against else [a for a in arms if a != "none"]
    for k, arm in enumerate(compared):
        base = base_arm(arm)
        pair = [arm, base] if (run + k) % 2 == 0 else [base, arm]
        res = [None, None]

        def go(i):
            try:
                res[i] = run_once(args, service, pair[i], rate, seed, sink)
            except Exception as e:  # noqa: BLE001  (reported as a failed run, as the main loop does)
                res[i] = {"error": "%s: %s" % (type(e).__name__, e)}
        threads = [threading.Thread(target=go, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i in (0, 1):
            res[i].update(concurrent=True, beside=pair[1 - i])
        yield list(zip(pair, res))


def calibrate(args, service, sink):
    """CPU ms per request without a profiler, at a light load."""
    r = run_once(args, service, "none", args.calibration_rps, 7, sink)
    if "error" in r:
        raise SystemExit("calibration of %s failed: %s" % (service, r["error"]))
    return r["cpu_ms_per_req"]


def spread(v):
    v = [x for x in v if x is not None]
    if not v:
        return None
    return statistics.median(v), min(v), max(v)


def fmt(s, pat="%.2f"):
    if s is None:
        return "-"
    m, lo, hi = s
    return (pat + " [" + pat + "–" + pat + "]") % (m, lo, hi)


def pct(s):
    if s is None:
        return "-"
    m, lo, hi = (100 * (x - 1) for x in s)
    return "%+.1f%% [%+.1f–%+.1f]" % (m, lo, hi)


def closes(runs):
    """How many of `runs` closed a window while measured (their CPU includes a close and an
    export, the others' does not), and how many ran a full collection of the cyclic collector
    (it is in their p99.9); "" when none did."""
    n = sum(1 for r in runs if r.get("windows_closed"))
    g = sum(1 for r in runs if r.get("gc_full"))
    return ("" if not n else " (%d closed a window)" % n) + ("" if not g else " (%d ran a full gc)" % g)


# Student's t at 97.5% by degrees of freedom (1-30); 1.96 beyond.
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042]


def geo_interval(ratios):
    """The geometric mean of `ratios` (an arm's paired ratios, one a round) and its 95% interval
    (Student's t on the logs, which stays honest at a few rounds where a bootstrap is too
    narrow), as changes (0.02 is +2%); None under 3 rounds."""
    logs = [math.log(x) for x in ratios if x and x > 0]
    if len(logs) < 3:
        return None
    m = statistics.fmean(logs)
    df = len(logs) - 1
    half = (T975[df - 1] if df <= len(T975) else 1.96) * statistics.stdev(logs) / math.sqrt(len(logs))
    return tuple(math.exp(x) - 1 for x in (m, m - half, m + half))


def verdict(interval, target_pct):
    """Whether an arm's change is within `target_pct`: only when its whole interval is."""
    if interval is None:
        return "too few rounds (3 needed)"
    _, lo, hi = (100 * x for x in interval)
    if hi <= target_pct:
        return "within +%g%%" % target_pct
    if lo > target_pct:
        return "above +%g%%" % target_pct
    return "not decided"


def runs_of(results, svc, load):
    """The finished runs of one cell, and each run's base run: none's of the same round, or under
    --against the first build's of the same arm; under --concurrent the one that ran beside it. A
    run whose service could not keep up (responses still out after the drain) says nothing about
    CPU per request or latency: it is counted, not averaged in."""
    every = [r for r in results if r.get("service") == svc and r.get("load") == load and "error" not in r]
    rs = [r for r in every if not r.get("unfinished")]
    by = {(r["run"], r["arm"], r.get("beside")): r for r in rs}
    base = lambda r: by.get((r["run"], base_arm(r["arm"]), r["arm"] if r.get("concurrent") else None))  # noqa: E731
    return every, rs, base


def paired_ratios(runs, base, key):
    return [r[key] / base(r)[key] for r in runs if base(r) and r[key] and base(r)[key]]


def load_name(load):
    return "%.0f%%" % (100 * load) if load < 5 else "%.0f rps" % load


def decisions(results, services, loads, arms, cpu_target, p99_target):
    """The targets decided per cell and arm (see the module's doc)."""
    lines = ["| service | load | arm | rounds | CPU/req vs base, geo-mean [95%%] | CPU within +%g%%? "
             "| p99 vs base, geo-mean [95%%] | p99 within +%g%%? |" % (cpu_target, p99_target),
             "|---|---|---|---|---|---|---|---|"]
    show = lambda i: "-" if i is None else "%+.1f%% [%+.1f..%+.1f]" % tuple(100 * x for x in i)  # noqa: E731
    for svc in services:
        for load in loads:
            _, rs, base = runs_of(results, svc, load)
            for arm in arms:
                a = [r for r in rs if r["arm"] == arm]
                if not a or arm == "none":
                    continue
                cpu_r, p99_r = (paired_ratios(a, base, k) for k in ("cpu_ms_per_req", "p99_ms"))
                cpu, p99 = geo_interval(cpu_r), geo_interval(p99_r)
                lines.append("| %s | %s | %s | %d | %s | %s | %s | %s |" % (
                    svc, load_name(load), arm, len(cpu_r), show(cpu),
                    verdict(cpu, cpu_target), show(p99), verdict(p99, p99_target)))
    return "\n".join(lines)


def table(results, services, loads, arms):
    vs = "vs none" if not any(a.endswith(AGAINST) for a in arms) else "vs none (an %s arm: vs the first build)" % AGAINST
    lines = ["| service | load | arm | rps | CPU ms/req | " + vs + " | p50 ms | p99 ms | p99 " + vs + " | p99.9 ms | "
             "RSS steady / peak MB | sample Hz | runs (overloaded) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for svc in services:
        for load in loads:
            every, rs, base = runs_of(results, svc, load)
            for arm in arms:
                a = [r for r in rs if r["arm"] == arm]
                over = sum(1 for r in every if r["arm"] == arm and r.get("unfinished"))
                if not a:
                    if over:
                        lines.append("| %s | %s | %s | | every run overloaded (%d) | | | | | | | |" % (
                            svc, load_name(load), arm, over))
                    continue
                paired = lambda k: spread(paired_ratios(a, base, k))  # noqa: E731
                col = lambda k: spread([r[k] for r in a])  # noqa: E731
                rss_s, rss_p = col("rss_steady_mb"), col("rss_peak_mb")
                prof = col("profiler_rss_mb")
                lines.append("| %s | %s | %s | %.1f | %s | %s | %s | %s | %s | %s | %s | %s | %d (%d)" % (
                    svc, load_name(load), arm, a[0]["rate"], fmt(col("cpu_ms_per_req"), "%.3f"),
                    "" if arm == "none" else pct(paired("cpu_ms_per_req")),
                    fmt(col("p50_ms"), "%.1f"), fmt(col("p99_ms"), "%.1f"),
                    "" if arm == "none" else pct(paired("p99_ms")), fmt(col("p999_ms"), "%.1f"),
                    "%s / %s%s" % ("%.1f" % rss_s[0] if rss_s else "-", "%.1f" % rss_p[0] if rss_p else "-",
                                   " (+%.1f py-spy)" % prof[0] if prof else ""),
                    "-" if col("sample_hz") is None else "%.0f" % col("sample_hz")[0], len(a), over)
                    + closes(a) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=sys.executable, help="the interpreter of the services (with the peers)")
    ap.add_argument("--bench", default=os.path.join(HERE, "..", "..", "..", "shared", "bench"))
    ap.add_argument("--services", nargs="+", default=["threads", "asyncio", "fastapi"],
                    choices=["threads", "asyncio", "fastapi"])
    ap.add_argument("--arms", nargs="+", default=DEFAULT_ARMS, choices=ARMS)
    ap.add_argument("--idle-threads", type=int, default=0, help="idle threads parked in the service")
    ap.add_argument("--loads", nargs="+", type=float, default=[0.3, 0.7], help="fractions of one core")
    ap.add_argument("--rps", nargs="+", type=float, help="request rates instead of --loads (no calibration)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--work", type=int, default=4)
    ap.add_argument("--arrivals", choices=["fixed", "poisson"], default="poisson")
    ap.add_argument("--calibration-rps", type=float, default=30.0)
    ap.add_argument("--smoke", action="store_true",
                    help="one short pass per arm at one load; checks that every arm ran and counted "
                         "every request, no timing")
    ap.add_argument("--concurrent", action="store_true",
                    help="run each arm at the same time as a none run of its own and pair it with that "
                         "run (resolves CPU per request on a noisy machine; latency is then beside a "
                         "neighbour's load)")
    ap.add_argument("--against", metavar="PYTHON",
                    help="a second interpreter, with another build of span_profile: every arm but none "
                         "also runs with it (named ARM%s) and is compared with the same arm of --python "
                         "(with --concurrent, beside it: the two builds side by side)" % AGAINST)
    ap.add_argument("--cpu-target", type=float, default=2.0, metavar="PCT",
                    help="the CPU a request an arm may add, in %% of its base (decided in the second table)")
    ap.add_argument("--p99-target", type=float, default=5.0, metavar="PCT",
                    help="the p99 an arm may add, in %% of its base (decided in the second table)")
    ap.add_argument("--out", help="also write every run as JSON lines to this file")
    ap.add_argument("--table-from", metavar="FILE",
                    help="print the table of the runs in FILE (an --out of an earlier run), run nothing")
    args = ap.parse_args()
    if args.table_from:
        with open(args.table_from) as f:
            rs = [json.loads(line) for line in f if line.strip()]
        seen = lambda k: sorted({r[k] for r in rs if k in r}, key=[r.get(k) for r in rs].index)  # noqa: E731
        order = [v for a in ARMS for v in (a, a + AGAINST)]
        arms = [a for a in order if a in seen("arm")]
        print(table(rs, seen("service"), seen("load"), arms))
        print()
        print(decisions(rs, seen("service"), seen("load"), arms, args.cpu_target, args.p99_target))
        return
    args.bench = os.path.abspath(args.bench)
    if args.smoke:
        args.runs, args.duration, args.warmup = 1, 1.0, 0.3
        if not args.rps:
            args.rps = [40.0]
    if args.against:
        args.against = os.path.abspath(args.against)
    arms = []
    for arm in args.arms:
        for name in (arm, arm + AGAINST) if args.against and arm != "none" else (arm,):
            why = arm_available(args, name)
            if why:
                print("note: skipping arm %s: %s" % (name, why), file=sys.stderr)
            else:
                arms.append(name)
    # Side by side under --against the second build's arms run beside the first's: none is not
    # needed (in turn it still runs, each round's none the first build's base).
    if "none" not in arms and not (args.against and args.concurrent):
        arms.insert(0, "none")
    sink = start_sink()
    out = open(args.out, "a") if args.out else None
    results, failures, levels = [], [], []
    for svc in args.services:
        if args.rps:
            rates = [(r, r) for r in args.rps]
        else:
            cpu_ms = calibrate(args, svc, sink)
            print("calibration: %s costs %.3f ms of CPU a request without a profiler" % (svc, cpu_ms),
                  file=sys.stderr)
            rates = [(load, load * 1000 / cpu_ms) for load in args.loads]
        for level, rate in rates:
            levels.append(level)
            for run in range(args.runs):
                for rs in rounds(args, svc, arms, rate, run, sink):
                    for arm, r in rs:
                        r.update(service=svc, arm=arm, load=level, run=run)
                        line = json.dumps(r)
                        print(line, flush=True)
                        if out:
                            out.write(line + "\n")
                            out.flush()
                        results.append(r)
                        if "error" in r:
                            failures.append("%s %s: %s" % (svc, arm, r["error"]))
                        elif (r["completed"] + r["errors"] + r["unfinished"] != r["sent"] or r["errors"]
                              or not r["cpu_s"]):
                            failures.append("%s %s: %d sent, %d completed, %d errors, %d unfinished, %.3f s CPU" % (
                                svc, arm, r["sent"], r["completed"], r["errors"], r["unfinished"], r["cpu_s"]))
    loads = sorted(set(levels), key=levels.index)
    print()
    print(table(results, args.services, loads, arms))
    print()
    print(decisions(results, args.services, loads, arms, args.cpu_target, args.p99_target))
    if args.concurrent and args.against:
        print("\n--concurrent --against: each %s arm's change is against the same arm of --python run "
              "beside it; latency was measured beside a neighbour's load." % AGAINST)
    elif args.concurrent:
        print("\n--concurrent: each arm's change is against the none run beside it; none's row is "
              "every such run; latency was measured beside a neighbour's load.")
    if failures:
        print("\nfailed runs:\n  " + "\n  ".join(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
