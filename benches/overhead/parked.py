"""Threads parked in `Event.wait()`, for the child interpreters of `idle_threads.py` and
`sampler_instructions.py` (which put this directory on their PYTHONPATH).

With `in_span`, each thread waits inside a SERVER span with a route and a child span, as a
request thread waiting on I/O does. Call it after `span_profile.start()`: a span started before
the agent goes through no hook, and its samples carry no span."""
import os
import threading


def park_threads(n, in_span, wake=0.0):
    """Starts `n` parked threads (waking every `wake` seconds to wait again, if given) and returns
    the event that releases them."""
    import span_profile

    parked = threading.Event()

    def wait():
        while not parked.wait(wake or None):
            pass

    if in_span:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider

        provider = TracerProvider()
        provider.add_span_processor(span_profile.SpanProcessor())
        tracer = provider.get_tracer("parked")

        def in_spans():
            with tracer.start_as_current_span("request", kind=trace.SpanKind.SERVER,
                                              attributes={"http.route": "/parked/{id}"}):
                with tracer.start_as_current_span("io.wait"):
                    wait()

        target = in_spans
    else:
        target = wait
    for _ in range(n):
        threading.Thread(target=target, daemon=True).start()
    return parked


def child_env(env=None):
    """`env` (or this process's environment) with this directory on PYTHONPATH."""
    env = dict(os.environ if env is None else env)
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    return env
