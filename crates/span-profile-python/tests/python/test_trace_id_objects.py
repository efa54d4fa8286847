"""The span processor converts each trace id object once and caches it, but an id that is an
`int` subclass is the application's own object: freeing it may run its code, which may start
spans. The processor must keep working through that, and attribute samples as usual."""
import subprocess
import sys
import textwrap

# Each span's trace id is an int subclass whose finaliser starts and ends a span: if the
# processor released such an object while holding its own lock, the nested span start
# would wait for that lock forever.
SCRIPT = textwrap.dedent("""
    import sys, tempfile
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
    import span_profile

    finalised = []
    in_finaliser = []

    class TraceId(int):
        def __del__(self):
            finalised.append(1)
            in_finaliser.append(1)
            try:
                with tracer.start_as_current_span("from-a-finaliser"):
                    pass
            finally:
                in_finaliser.pop()

    class Ids(RandomIdGenerator):
        def generate_trace_id(self):
            # The finaliser's own span gets a plain int, or each would start the next.
            v = super().generate_trace_id()
            return v if in_finaliser else TraceId(v)

    provider = TracerProvider(id_generator=Ids())
    provider.add_span_processor(span_profile.SpanProcessor())
    tracer = provider.get_tracer("t")
    agent = span_profile.start(service="trace-id-objects", output=tempfile.mkdtemp(), sample_rate_hz=1)
    for _ in range(200):
        with tracer.start_as_current_span("root"):
            with tracer.start_as_current_span("child"):
                pass
    n = len(finalised)
    s = span_profile.stats()
    agent.stop()
    print(n, s["spans_started"], s["hook_errors"])
""")


def test_a_trace_id_whose_finaliser_starts_a_span_does_not_hang_the_processor():
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    finalised, started, errors = map(int, run.stdout.split())
    assert finalised >= 150, "the trace ids were freed along the way"
    # 400 spans of the loop, and one more from each finaliser that had run by then.
    assert started >= 400 + finalised
    assert errors == 0
