"""``opentelemetry-instrument python app.py`` starts the agent through this instrumentor, named
``span_profile`` in the ``opentelemetry_instrumentor`` entry-point group (ADR 0029). It is
configured by the same variables as :func:`span_profile.start` (``SPAN_PROFILE_OUTPUT``...);
``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=span_profile`` turns it off like any other.

OpenTelemetry loads instrumentors after its configurator has set the SDK TracerProvider, so
that provider is joined here, and any provider built later too."""
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor


class SpanProfileInstrumentor(BaseInstrumentor):
    """Starts span_profile's agent and adds its ``SpanProcessor`` to the SDK TracerProviders."""

    def instrumentation_dependencies(self):
        return ()

    def _instrument(self, **kwargs):
        from ._bootstrap import autostart

        autostart("opentelemetry-instrument")

    def _uninstrument(self, **kwargs):
        from . import _agent

        agent = _agent._RUNNING
        if agent is not None:
            agent.stop()
