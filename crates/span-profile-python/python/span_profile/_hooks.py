"""The per-span and per-thread hooks. Kept small: everything here runs inside the application's
own calls (span start and end, thread start and exit)."""
import threading

from opentelemetry.sdk.trace import SpanProcessor as _SdkSpanProcessor

from . import _native

# The native agent the hooks feed; None while no agent runs. Set by _agent.Agent.
_NATIVE = None

_get_ident = threading.get_ident
_get_native_id = getattr(threading, "get_native_id", lambda: 0)

# OpenTelemetry SDK 1.35+ calls `_on_ending(span)` with the live span just before `on_end`.
# There a span's end is recorded from what `on_start` listed, without reading the span, and
# the link goes only on spans that may have samples; `on_end` then does nothing. Older SDKs:
# `on_start` links and `on_end` records the end (docs/adr/0014).
_SDK_ON_ENDING = getattr(_SdkSpanProcessor, "_on_ending", None)
_native.set_ends_at_ending(_SDK_ON_ENDING is not None)


class SpanProcessor(_SdkSpanProcessor):
    """Links OpenTelemetry spans to profiles.

    Add it to the TracerProvider: ``provider.add_span_processor(span_profile.SpanProcessor())``.
    On start it records the span (its parent, local root and ``http.route``) in the agent's span
    table and lists the span object for the sampler. As the span ends it records the end time
    and sets the attribute ``pyroscope.profile.id`` to the span id (16 hex digits) if the span
    may have samples and the output keeps samples under its own id: every span for a directory
    or OTLP, the local roots only for Pyroscope (unless ``PYROSCOPE_SPAN_SCOPE=all``). So a
    link never leads to an empty profile. (SDKs before 1.35, which have no ``_on_ending``, get
    the link on every span in that scope, at start.) Which span is current on a thread is not
    tracked here: the sampler reads OpenTelemetry's own context and attributes samples to its
    span when this processor started it. Does nothing while no agent runs. It never raises
    into the application: failures are counted in ``stats()["hook_errors"]``.

    A subclass that overrides ``on_start`` or ``_on_ending`` must call the base method.
    """

    def __init__(self):
        # The SDK calls these for every span: builtins, so that no Python frame runs (unless
        # a subclass overrides one). They feed the running agent (set_agent) and never raise;
        # failures count in stats()["hook_errors"].
        cls = type(self)
        if cls.on_start is SpanProcessor.on_start:
            self.on_start = _native.span_on_start
        if cls.on_end is SpanProcessor.on_end:
            self.on_end = _native.span_on_end
        if _SDK_ON_ENDING is not None and cls._on_ending is SpanProcessor._on_ending:
            self._on_ending = _native.span_on_ending

    def on_start(self, span, parent_context=None):
        _native.span_on_start(span, parent_context)

    def _on_ending(self, span):
        _native.span_on_ending(span)

    def on_end(self, span):
        _native.span_on_end(span)

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis=30000):
        return True


def set_agent(native):
    """Feeds the span processors and the thread hook from `native` (None: from nothing)."""
    global _NATIVE
    _NATIVE = native
    _native.set_span_hooks(native)


_ORIGINAL_BOOTSTRAP_INNER = threading.Thread._bootstrap_inner


def _bootstrap_inner(self):
    """threading.Thread._bootstrap_inner, plus: name the thread for the sampler on start, and
    forget its span and name when it ends (thread idents are reused)."""
    native = _NATIVE
    if native is not None:
        try:
            native.thread_started(_get_ident(), self.name, _get_native_id())
        except Exception:  # noqa: BLE001
            pass
    try:
        _ORIGINAL_BOOTSTRAP_INNER(self)
    finally:
        native = _NATIVE
        if native is not None:
            try:
                native.thread_exited(_get_ident())
            except Exception:  # noqa: BLE001
                pass


def install_thread_hook():
    threading.Thread._bootstrap_inner = _bootstrap_inner


def uninstall_thread_hook():
    if threading.Thread._bootstrap_inner is _bootstrap_inner:
        threading.Thread._bootstrap_inner = _ORIGINAL_BOOTSTRAP_INNER
