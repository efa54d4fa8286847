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


# The span processor is native (ADR 0016): see its docstring.
SpanProcessor = _native.SpanProcessor


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
