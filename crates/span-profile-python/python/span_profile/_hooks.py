"""The per-span and per-thread hooks. Kept small: everything here runs inside the application's
own calls (span start and end, thread start and exit)."""
import threading

from opentelemetry.sdk.trace import SpanProcessor as _SdkSpanProcessor

# The native agent the hooks feed; None while no agent runs. Set by _agent.Agent.
_NATIVE = None

_get_ident = threading.get_ident
_get_native_id = getattr(threading, "get_native_id", lambda: 0)


class SpanProcessor(_SdkSpanProcessor):
    """Links OpenTelemetry spans to profiles.

    Add it to the TracerProvider: ``provider.add_span_processor(span_profile.SpanProcessor())``.
    On start it records the span (its parent, local root and ``http.route``) in the agent's span
    table and sets the attribute ``pyroscope.profile.id`` to the span id (16 hex digits) on the
    spans whose own id the output keeps samples under: every span for a directory or OTLP, the
    local roots only for Pyroscope (unless ``PYROSCOPE_SPAN_SCOPE=all``). On end it records the
    end time. Which span is current on a thread is tracked separately, by the
    runtime-context hook that ``span_profile.start()`` installs. Does nothing while no agent runs.
    It never raises into the application: failures are counted in ``stats()["hook_errors"]``.
    """

    def on_start(self, span, parent_context=None):
        native = _NATIVE
        if native is not None:
            native.on_start(span)  # never raises; failures count in stats()["hook_errors"]

    def on_end(self, span):
        native = _NATIVE
        if native is not None:
            native.on_end(span)

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis=30000):
        return True


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
