"""span_profile: a continuous profiler whose samples carry the OpenTelemetry span that was
current on the sampled thread.

    import span_profile
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    provider = TracerProvider()
    provider.add_span_processor(span_profile.SpanProcessor())
    trace.set_tracer_provider(provider)
    agent = span_profile.start(service="checkout", output="./profiles")
    ...
    agent.stop()          # also runs at exit

Profiles are gzip pprof files, one per window, with per-sample labels ``trace_id``, ``span_id``,
``local_root_span_id``, ``route`` and ``thread_name``.
"""
from . import _native
from ._agent import Agent, start, stats
from ._hooks import SpanProcessor

__version__ = _native.__version__
__all__ = ["Agent", "SpanProcessor", "start", "stats", "__version__"]
