"""The per-span and per-thread hooks. Kept small: everything here runs inside the application's
own calls (span start and end, thread start and exit)."""
import os
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


# -- os._exit -----------------------------------------------------------------------------------
# A process that ends by os._exit runs no atexit handler, so the agent's last windows would be
# lost: every multiprocessing child started by fork or forkserver ends that way, after its
# target returns (docs/adr/0028). While an agent runs, os._exit first calls the agent's exit
# hook, which stops it within a bounded time, then exits as asked.

_ORIGINAL_OS_EXIT = os._exit
# What os._exit calls before exiting while an agent runs; None otherwise. Set by _agent.Agent.
_BEFORE_OS_EXIT = None


def _os_exit(status):
    """os._exit, plus: first stop the running agent (bounded), so the windows it had are
    written or spooled. Exits with `status` whatever the agent does."""
    before = _BEFORE_OS_EXIT
    try:
        if before is not None:
            before()
    except BaseException:  # noqa: BLE001 - the process must still exit, and with its own status
        pass
    finally:
        _ORIGINAL_OS_EXIT(status)


def install_exit_hook(before):
    """Makes os._exit call `before()` first (see _os_exit)."""
    global _BEFORE_OS_EXIT
    _BEFORE_OS_EXIT = before
    os._exit = _os_exit


def uninstall_exit_hook():
    global _BEFORE_OS_EXIT
    _BEFORE_OS_EXIT = None
    if os._exit is _os_exit:
        os._exit = _ORIGINAL_OS_EXIT
