"""The agent: starts the native profiler and installs the hooks; stop() undoes both."""
import atexit
import contextvars
import os
import sys
import threading
import warnings

from . import _asyncio, _hooks, _logging, _native, _settings

LOGGER = _logging.LOGGER

_LOCK = threading.RLock()
_RUNNING = None  # the Agent that is running, if any
_LAST = None  # the last Agent started (for stats() after stop())

#: Our ContextVars, created once per process. The sampler reads OpenTelemetry's own context
#: from the context running on each thread (ADR 0011), and next to it these: SPAN_SLOT holds
#: the span (an ``ActiveSpan``) a ``run_in_executor`` worker was handed, since that worker
#: does not run in the submitter's context; asyncio tasks get a ``TaskTag`` in TASK_TAG.
SPAN_SLOT = contextvars.ContextVar("span_profile.span_slot", default=None)
TASK_TAG = contextvars.ContextVar("span_profile.task_tag", default=None)

STATS_KEYS = (
    "ticks", "samples", "windows", "exported_windows", "dropped_windows", "export_errors", "walk_errors",
    "dropped_samples", "sampler_cpu_ns", "exporter_cpu_ns", "missed_ticks", "truncated_stacks",
    "skipped_threads", "label_overflow", "dropped_spans", "torn_samples", "spans_started", "spans_ended",
    "hook_errors", "links_unwritten", "span_objects", "span_objects_full", "span_objects_evicted",
    "span_objects_contended_reads",
)


def _start_native(settings, forked):
    otel, problem = _otel_context()
    if problem:
        warnings.warn("span_profile: %s" % problem, RuntimeWarning, stacklevel=4)
    return _native.Agent(
        output=settings["output"],
        sample_rate_hz=settings["sample_rate_hz"],
        window_s=settings["window_s"],
        service=settings["service"],
        version=settings["version"],
        environment=settings["environment"],
        instance=settings["instance"],
        forked=forked,
        python_version=tuple(sys.version_info[:2]),
        overhead_budget=settings["overhead_budget"],
        otel=otel,
        slot_var=SPAN_SLOT,
        task_var=TASK_TAG,
    )


def _otel_context():
    """What the sampler needs to read OpenTelemetry's current context in place: the ContextVar
    of its runtime context (the stock ``ContextVarsRuntimeContext`` or a subclass), the
    ``Context`` class, the span key, and a probe context holding a probe span (the native side
    reads it once to check the layout). ``(None, why)`` when the runtime context keeps its
    state elsewhere."""
    import opentelemetry.context as otel_context
    from opentelemetry.context.context import Context
    from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
    from opentelemetry.trace import INVALID_SPAN, set_span_in_context
    from opentelemetry.trace.propagation import _SPAN_KEY

    runtime = otel_context._RUNTIME_CONTEXT
    var = getattr(runtime, "_current_context", None)
    if not isinstance(runtime, ContextVarsRuntimeContext) or not isinstance(var, contextvars.ContextVar):
        return None, ("OpenTelemetry's runtime context is %s, not the contextvars one (set "
                      "OTEL_PYTHON_CONTEXT=contextvars_context); samples carry no spans"
                      % type(runtime).__name__)
    probe_span = INVALID_SPAN
    return (var, Context, _SPAN_KEY, set_span_in_context(probe_span), probe_span), None


class Agent:
    """A running profiler. Returned by :func:`span_profile.start`; stop it with :meth:`stop`
    (also done at interpreter exit). Usable as a context manager."""

    def __init__(self, settings):
        self._settings = settings
        self._native = _start_native(settings, forked=False)
        for problem in self._native.resource_problems:
            warnings.warn("span_profile: %s" % problem, RuntimeWarning, stacklevel=3)
        if self._native.walker.startswith("none"):
            warnings.warn("span_profile: stack sampling is unavailable (%s); spans are still tracked but no "
                          "samples are recorded" % self._native.walker, RuntimeWarning, stacklevel=3)

    # -- settings -------------------------------------------------------------------------------
    @property
    def service(self):
        """``service.name`` of the profiles."""
        return self._native.service

    @property
    def instance(self):
        """The instance label (host and pid unless set)."""
        return self._native.instance

    @property
    def output(self):
        """Where profiles go, with any password or token in the URL redacted."""
        return self._native.output

    @property
    def sample_rate_hz(self):
        return self._settings["sample_rate_hz"]

    @property
    def window_s(self):
        return self._settings["window_s"]

    @property
    def running(self):
        return self._native.running

    def __repr__(self):
        return "<span_profile.Agent service=%r output=%r %s>" % (
            self.service, self.output, "running" if self.running else "stopped")

    # -- lifecycle ------------------------------------------------------------------------------
    def _install(self):
        """Feeds the hooks from this agent: span processor, threads, asyncio; starts the log
        pump and its health check."""
        _logging.ensure_pump()
        _logging.add_check(self._check_untracked)
        native = self._native
        _hooks.set_agent(native)
        _hooks.install_thread_hook()
        me = threading.get_ident()
        for t in threading.enumerate():
            if t.ident is not None:
                # In a forked child the calling thread's `native_id` is still its parent's
                # (3.9-3.13 do not update it): ask the OS for the caller's own.
                native_id = _hooks._get_native_id() if t.ident == me else getattr(t, "native_id", None)
                native.thread_started(t.ident, t.name, native_id or 0)
        _asyncio.install(native, TASK_TAG, SPAN_SLOT, _current_active)
        _hooks.install_exit_hook(_before_os_exit)

    def _uninstall(self):
        _logging.remove_check(self._check_untracked)
        _asyncio.uninstall()
        if _hooks._NATIVE is self._native:
            _hooks.set_agent(None)
            _hooks.uninstall_thread_hook()
            _hooks.uninstall_exit_hook()

    def stop(self, timeout_s=5.0):
        """Stops sampling, removes the hooks and writes the last (partial) window. Waits up to
        ``timeout_s`` for the write; warns if it did not finish. Safe to call twice."""
        global _RUNNING
        with _LOCK:
            self._uninstall()
            if _RUNNING is self:
                _RUNNING = None
        problem = self._native.stop(float(timeout_s))
        _logging.flush()
        self._check_untracked()
        if problem:
            warnings.warn(problem, RuntimeWarning, stacklevel=2)

    def stats(self):
        """Counters of this agent (see :func:`span_profile.stats`)."""
        return self._native.stats()

    def current_span(self):
        """The span the sampler attributes the calling thread's samples to now, as an
        ``ActiveSpan`` (``.span_id``, ``.trace_id``, ``.local_root``), or None: OpenTelemetry's
        current span if our ``SpanProcessor`` started it, else the span a ``run_in_executor``
        worker was handed. For tests and debugging."""
        return _current_active(self._native)

    # -- the log (ADR 0029) -----------------------------------------------------------------------
    _untracked_warned = False

    def _log_start(self):
        """The one line at start (INFO), and a warning if no service name was set."""
        s = self._settings
        budget = s["overhead_budget"]
        LOGGER.info("span_profile: profiling service %r (pid %d) at %d Hz, overhead budget %s; profiles go to %s "
                    "every %g s", self.service, os.getpid(), s["sample_rate_hz"],
                    "%g%% of a core" % (budget * 100) if budget else "off", s["output"], s["window_s"])
        if self._native.stats().get("walker_gil_readable", True) is False:
            LOGGER.info("span_profile: this interpreter's GIL could not be read where CPython %d.%d keeps it, so "
                        "the CPU of a thread preempted while it ran Python may go to an older stack of it "
                        "(stats()['walker_gil_readable'], docs/adr/0019)", *sys.version_info[:2])
        if s["service"] is None and self.service == "unknown_service":
            LOGGER.warning("span_profile: no service name is set, so profiles are stored as 'unknown_service'; set "
                           "OTEL_SERVICE_NAME (or SPAN_PROFILE_SERVICE, or span_profile.start(service=...))")

    def _check_untracked(self):
        """One warning when samples find OpenTelemetry spans that no SpanProcessor of ours saw
        (``context_untracked``): their samples carry no span."""
        if self._untracked_warned:
            return
        n = self._native.stats().get("context_untracked", 0)
        if n:
            self._untracked_warned = True
            LOGGER.warning("span_profile: %d sample(s) found an OpenTelemetry span that no span_profile.SpanProcessor "
                           "saw, so they carry no span; add it to your TracerProvider: "
                           "provider.add_span_processor(span_profile.SpanProcessor()) (span-profile run and "
                           "opentelemetry-instrument add it for you)", n)

    def _restart_after_fork(self):
        """In a forked child: the parent's sampler threads do not exist here. Abandon them and
        start afresh with the same settings and an instance label of our own."""
        self._uninstall()
        self._native.abandon_after_fork()
        self._native = _start_native(self._settings, forked=True)
        self._install()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def start(service=None, output=None, sample_rate_hz=None, window_s=None, **more):
    """Starts profiling this process and returns the :class:`Agent`.

    - ``service``: ``service.name`` (else ``SPAN_PROFILE_SERVICE``, ``OTEL_SERVICE_NAME``,
      ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES``, else ``unknown_service``).
    - ``output``: the directory windows are written to as
      ``<output>/<service>/<date>/<ms>-<instance>-<seq>.pb.gz`` (else ``SPAN_PROFILE_OUTPUT``,
      else ``./profiles``). ``file:///abs/path`` is accepted too, and so are the network
      exporters: ``otlp+http(s)://host:4318`` (OTLP profiles, configured by the
      ``OTEL_EXPORTER_OTLP_*`` variables) and ``pyroscope+http(s)://host:4040``.
    - ``sample_rate_hz``: samples per second of each thread, 1 to 10000 (else
      ``SPAN_PROFILE_SAMPLE_RATE_HZ``, else 100).
    - ``window_s``: seconds per profile file, 0.01 to 3600 (else ``SPAN_PROFILE_WINDOW_S``, else 60).
    - ``version``, ``environment``, ``instance``: resource labels (else from
      ``OTEL_RESOURCE_ATTRIBUTES``).
    - ``overhead_budget``: the sampler's CPU as a share of one core (else
      ``SPAN_PROFILE_OVERHEAD_BUDGET``, else 0.01); over it the sampling interval stretches and
      samples are weighted accordingly. 0 turns the cap off.

    Interpreter memory is copied in-process under a SIGSEGV/SIGBUS guard that catches only its
    own faults (every other fault goes on to the handler that was there before, such as
    ``faulthandler``). ``SPAN_PROFILE_MEMORY_READS=syscall`` reads through ``process_vm_readv``
    instead, which costs the agent more CPU (docs/benchmarks.md, "Guarded in-process reads
    against process_vm_readv").

    Spans are attributed once ``span_profile.SpanProcessor()`` is added to the TracerProvider.
    Raises TypeError/ValueError for bad settings and RuntimeError if an agent already runs.
    """
    global _RUNNING, _LAST
    settings = _settings.resolve(service=service, output=output, sample_rate_hz=sample_rate_hz,
                                 window_s=window_s, **more)
    _settings.check_writable(settings["output"])
    with _LOCK:
        if _RUNNING is not None:
            raise RuntimeError("span_profile is already running (output=%r); call agent.stop() before "
                               "starting another" % _RUNNING.output)
        agent = Agent(settings)
        try:
            agent._install()
        except BaseException:
            agent._uninstall()
            agent._native.stop(1.0)
            raise
        _RUNNING = _LAST = agent
    agent._log_start()
    return agent


def _current_active(native):
    """See :meth:`Agent.current_span`."""
    from opentelemetry.trace import get_current_span

    active = native.active_of(get_current_span()) if native.reads_otel_context else None
    return active if active is not None else SPAN_SLOT.get()


def stats():
    """Counters of the running agent, or of the last one after it stopped (all zero if none
    ran): samples, windows, exports, drops and errors of the profiler; spans started/ended and hook errors of the
    Python hooks; ``links_unwritten`` (spans with samples whose attributes had no room for
    ``pyroscope.profile.id``); ``span_objects`` (spans listed for the sampler), ``span_objects_full``,
    ``span_objects_evicted`` and ``span_objects_contended_reads`` (lookups that gave no span
    because a span start was updating the entry); ``running`` and ``walker`` (what samples the stacks);
    the CPython walker's ``walker_*`` counters (samples, frames, truncated stacks, idle and skipped
    threads, invalid reads, a full code cache, ticks, and ``walker_thread_names_busy``: samples
    labelled ``Thread-<ident>`` because a thread starting or ending held the name map) and its
    ``context_*`` counters (context reads: with a span, without, untracked, invalid, switched);
    ``failed`` and ``failure``: whether a failure (a panic in the sampler) stopped sampling, and
    the message that was then logged once on stderr (the application is never affected)."""
    agent = _LAST
    if agent is None:
        d = dict.fromkeys(STATS_KEYS, 0)
        d["running"] = False
        d["failed"] = False
        d["failure"] = None
        d["walker"] = "none: not started"
        return d
    return agent.stats()


def _after_fork_in_child():
    agent = _RUNNING
    if agent is None:
        return
    try:
        agent._restart_after_fork()
    except Exception as e:  # noqa: BLE001 - never break the child
        warnings.warn("span_profile: could not restart in the forked child: %s" % e, RuntimeWarning)


def _at_exit():
    agent = _RUNNING
    if agent is not None:
        agent.stop()
    _logging.flush()


#: How long os._exit waits for the running agent to write its last windows (docs/adr/0028).
EXIT_TIMEOUT_S = 2.0


def _before_os_exit():
    """Run by os._exit while an agent runs (_hooks.install_exit_hook): stops it, waiting at most
    EXIT_TIMEOUT_S for the last windows to be written or spooled. Takes no lock of ours: in a
    forked child, _LOCK may be held by a thread of the parent that does not exist here."""
    agent = _RUNNING
    if agent is not None:
        problem = agent._native.stop(float(EXIT_TIMEOUT_S))
        if problem:
            warnings.warn(problem, RuntimeWarning, stacklevel=3)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_at_exit)
