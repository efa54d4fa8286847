"""Zero-code start (ADR 0029): what ``span-profile run`` (through ``sitecustomize.py`` here) and
``opentelemetry-instrument`` (through ``span_profile._instrumentor``) call before the
application's code runs.

:func:`autostart` starts the agent from the environment alone (``SPAN_PROFILE_*`` and
``OTEL_*``, as :func:`span_profile.start` reads them) and makes every OpenTelemetry SDK
``TracerProvider`` carry our ``SpanProcessor``: the one already set globally, and every one
constructed later (the SDK class's ``__init__`` is wrapped), so the app's own provider joins
whichever way it is built or set. A provider that already has one of ours gets no second one.

Nothing here raises: a failure is logged (logger ``span_profile``) and the app runs unprofiled.
"""
import logging
import threading
import weakref

LOGGER = logging.getLogger("span_profile")

_LOCK = threading.Lock()
_JOINED = weakref.WeakSet()  # providers that carry one of our processors
_PATCHED = False


def _has_ours(provider):
    from .. import SpanProcessor

    if provider in _JOINED:
        return True
    multi = getattr(provider, "_active_span_processor", None)
    return any(isinstance(p, SpanProcessor) for p in getattr(multi, "_span_processors", ()))


def join(provider):
    """Adds our ``SpanProcessor`` to an SDK ``provider`` unless it has one. True if it has one
    now."""
    from opentelemetry.sdk.trace import TracerProvider

    from .. import SpanProcessor

    if not isinstance(provider, TracerProvider):
        return False
    with _LOCK:
        if _has_ours(provider):
            return True
        _JOINED.add(provider)
    _ORIGINAL_ADD[0](provider, SpanProcessor())
    return True


_ORIGINAL_ADD = [None]
_ORIGINAL_INIT = [None]


def _patch_sdk():
    """Wraps the SDK TracerProvider's ``__init__`` (join every new provider) and
    ``add_span_processor`` (an app that adds ``span_profile.SpanProcessor()`` itself to a
    provider we joined does not get two)."""
    global _PATCHED
    from opentelemetry.sdk.trace import TracerProvider

    from .. import SpanProcessor

    if _PATCHED:
        return
    _PATCHED = True
    original_init = _ORIGINAL_INIT[0] = TracerProvider.__init__
    original_add = _ORIGINAL_ADD[0] = TracerProvider.add_span_processor

    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        try:
            join(self)
        except Exception as e:  # noqa: BLE001 - never break the app's provider
            LOGGER.warning("span_profile: could not add its SpanProcessor to a TracerProvider (%s); "
                           "add span_profile.SpanProcessor() to it yourself", e)

    def add_span_processor(self, span_processor):
        if isinstance(span_processor, SpanProcessor) and self in _JOINED:
            return None
        return original_add(self, span_processor)

    __init__.__wrapped__ = original_init
    add_span_processor.__wrapped__ = original_add
    TracerProvider.__init__ = __init__
    TracerProvider.add_span_processor = add_span_processor


def autostart(source):
    """Starts the agent (unless one runs) from the environment and joins the app's providers.
    ``source`` names the route for the log (``span-profile run``, ``opentelemetry-instrument``).
    Returns the running agent, or None after logging why not."""
    try:
        from opentelemetry import trace

        from .. import _agent

        _patch_sdk()
        agent = _agent._RUNNING
        if agent is None:
            agent = _agent.start()
            agent._started_by = source
        join(trace.get_tracer_provider())
        return agent
    except Exception as e:  # noqa: BLE001 - the app runs unprofiled, and says so
        LOGGER.warning("span_profile: not profiling (%s: %s); the app runs without the agent (started by %s)",
                       type(e).__name__, e, source)
        return None
