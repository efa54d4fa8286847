"""Helpers of the zero-code specs: the apps they run (which import only OpenTelemetry) and the
commands that run them."""
import os
import shutil
import subprocess
import sys
import textwrap

#: An unmodified app: sets an SDK TracerProvider of its own, burns CPU inside one span in
#: `app_work`, writes that span's id (hex) to argv[1] as the specs' ground truth and exits with
#: argv[2] (a number, or a signal name to die by).
APP = textwrap.dedent('''
    import os, signal, sys, time
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider())
    tracer = trace.get_tracer("app")

    def app_work(seconds):
        end = time.perf_counter() + seconds
        x = 0
        while time.perf_counter() < end:
            for i in range(500):
                x += i * i
        return x

    with tracer.start_as_current_span("work") as span:
        app_work(0.6)
    with open(sys.argv[1], "w") as f:
        f.write(format(span.get_span_context().span_id, "016x"))
    how = sys.argv[2] if len(sys.argv) > 2 else "0"
    if how.startswith("SIG"):
        sys.stdout.flush()
        os.kill(os.getpid(), getattr(signal, how))
    sys.exit(int(how))
''')

#: The same work under `opentelemetry-instrument`: the provider is the distro's, the app only
#: asks for a tracer.
INSTRUMENTED_APP = textwrap.dedent('''
    import sys, time
    from opentelemetry import trace

    tracer = trace.get_tracer("app")

    def app_work(seconds):
        end = time.perf_counter() + seconds
        x = 0
        while time.perf_counter() < end:
            for i in range(500):
                x += i * i
        return x

    with tracer.start_as_current_span("work") as span:
        app_work(0.6)
    with open(sys.argv[1], "w") as f:
        f.write(format(span.get_span_context().span_id, "016x"))
''')

#: Quick windows, no CPU cap, a rate that gives plenty of samples.
AGENT_ENV = {"SPAN_PROFILE_WINDOW_S": "1", "SPAN_PROFILE_OVERHEAD_BUDGET": "0"}


def write_app(tmp_path, source=APP, name="app.py"):
    path = tmp_path / name
    path.write_text(source)
    return str(path)


def env(**more):
    """The test process's environment without agent settings, plus AGENT_ENV and `more`."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("SPAN_PROFILE_", "OTEL_")) and k != "PYTHONPATH"}
    e.update(AGENT_ENV)
    e.update(more)
    return e


def span_profile_script():
    """The `span-profile` script pip installed next to this interpreter."""
    path = os.path.join(os.path.dirname(sys.executable), "span-profile")
    return path if os.path.exists(path) else shutil.which("span-profile")


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)
