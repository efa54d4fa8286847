# The runner every arm of `span-profile overhead` runs with `python -c` (see overhead/mod.rs):
# it starts the arm's profiler in-process, runs the workload with runpy, and at exit prints
# one `SPAN_PROFILE_OVERHEAD {json}` line on stderr.
import atexit, json, os, resource, runpy, sys, tempfile, time
arm = os.environ.get("SPAN_PROFILE_OVERHEAD_ARM", "none")
rate = float(os.environ.get("SPAN_PROFILE_OVERHEAD_RATE", "100"))
t0 = time.perf_counter()
agent = None
if arm == "span-profile":
    import span_profile
    out = os.environ.get("SPAN_PROFILE_OVERHEAD_OUTPUT") or tempfile.mkdtemp(prefix="span-profile-overhead-")
    agent = span_profile.start(output=out, sample_rate_hz=rate,
                               overhead_budget=float(os.environ.get("SPAN_PROFILE_OVERHEAD_BUDGET", "0.01")))
elif arm == "pyroscope":
    import pyroscope
    pyroscope.configure(application_name="overhead", server_address=os.environ["SPAN_PROFILE_OVERHEAD_SINK"],
                        sample_rate=int(rate))
elif arm == "ddtrace":
    import ddtrace.profiling.auto

def _report():
    d = {"wall_s": time.perf_counter() - t0}
    if agent is not None:
        try:
            agent.stop()
        except Exception:
            pass
        import span_profile
        s = span_profile.stats()
        d["agent_cpu_s"] = (s.get("sampler_cpu_ns", 0) + s.get("exporter_cpu_ns", 0)) / 1e9
        d["ticks"] = s.get("ticks", 0)
    r = resource.getrusage(resource.RUSAGE_SELF)
    d["cpu_s"] = r.ru_utime + r.ru_stime
    d["maxrss_kb"] = r.ru_maxrss
    sys.stderr.write("SPAN_PROFILE_OVERHEAD " + json.dumps(d) + "\n")
    sys.stderr.flush()

atexit.register(_report)
if os.environ.get("SPAN_PROFILE_OVERHEAD_SIGTERM"):
    # The fixed-load mode stops a service with SIGTERM: exit cleanly, so the report is printed.
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
sys.argv = sys.argv[1:]
if sys.argv and sys.argv[0] == "-m":
    sys.argv = sys.argv[1:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    runpy.run_path(sys.argv[0], run_name="__main__")
