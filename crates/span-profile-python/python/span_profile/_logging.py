"""The agent's log (ADR 0029): Python's ``logging``, logger ``span_profile``. With no handler
configured, warnings reach stderr through ``logging``'s last-resort handler, as any library's do.

The native side logs through Rust's ``log`` facade into a queue (``module/log_bridge.rs``) that
never waits for the GIL; a daemon thread here takes the records off it (the GIL released while
it waits) and logs them under ``span_profile.<target>``. The same thread checks, every few
seconds, the health counters that deserve one warning (contexts no processor of ours saw)."""
import atexit
import logging
import os
import threading

from . import _native

LOGGER = logging.getLogger("span_profile")

#: Seconds between the pump's health checks.
CHECK_EVERY_S = 2.0

_lock = threading.Lock()
#: Held by the pump from taking records off the native queue until it has logged them, and by
#: ``flush``: so a flush returns only once every record queued before it is logged. Re-entrant:
#: a logging handler on the pump thread may itself call ``flush``.
_emit_lock = threading.RLock()
#: How long ``flush`` waits for the pump's batch in flight (a slow logging handler) before it
#: logs what is left anyway.
FLUSH_WAIT_S = 2.0
_thread = None
_pid = None
_checks = []  # callables run by the pump every CHECK_EVERY_S
_stopping = False


def emit(records):
    """Hands native records ``(level, logger, message)`` to ``logging``."""
    for level, name, message in records:
        try:
            logging.getLogger(name).log(level, "%s", message)
        except Exception:  # noqa: BLE001 - logging must not break the agent
            pass


def flush():
    """Logs what the native side queued so far (``stop()`` and exit call it). When it returns,
    every record queued before the call has been handed to ``logging``: by the pump, if it had
    already taken it (waited for, up to :data:`FLUSH_WAIT_S`), else here."""
    got = _emit_lock.acquire(timeout=FLUSH_WAIT_S)
    try:
        emit(_native.log_drain())
    finally:
        if got:
            _emit_lock.release()


def _pump():
    # The pump is the profiler's, not the application's: the walker leaves this thread out.
    _native.mark_own_thread()
    try:
        _pump_loop()
    finally:
        _native.unmark_own_thread()


def _pump_loop():
    while not _stopping:
        # Records are taken only under the lock flush() takes: one this thread holds is logged
        # before a concurrent flush() returns.
        if _native.log_ready(CHECK_EVERY_S):
            with _emit_lock:
                emit(_native.log_drain())
        if _stopping:
            return
        for check in list(_checks):
            try:
                check()
            except Exception:  # noqa: BLE001
                pass


def ensure_pump():
    """Starts the pump thread in this process unless it runs (a forked child has none)."""
    global _thread, _pid
    with _lock:
        if _thread is not None and _pid == os.getpid() and _thread.is_alive():
            return
        t = threading.Thread(target=_pump, name="span_profile-log", daemon=True)
        # Not through our thread hook's bookkeeping concerns: it is an ordinary daemon thread.
        t.start()
        _thread, _pid = t, os.getpid()


def _stop_pump():
    """At exit (after the agent's own exit hook, registered later, has stopped it and flushed):
    ends the pump before the interpreter finalizes. A daemon thread coming back from its native
    wait during finalization would crash the process."""
    global _stopping
    _stopping = True
    _native.log_wake()
    t = _thread
    if t is not None and _pid == os.getpid() and t.is_alive():
        t.join(1.0)
    flush()


atexit.register(_stop_pump)


def _after_fork_in_child():
    global _emit_lock
    # The pump did not come with the fork; its thread id may come back as a thread of the
    # child's, and the lock it may have held is held by nobody in the child.
    _native.clear_own_threads()
    _emit_lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def add_check(check):
    """Runs ``check()`` on the pump thread every :data:`CHECK_EVERY_S` seconds."""
    _checks.append(check)


def remove_check(check):
    try:
        _checks.remove(check)
    except ValueError:
        pass
