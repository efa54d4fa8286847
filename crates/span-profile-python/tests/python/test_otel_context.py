"""OpenTelemetry's own context is what the sampler reads (ADR 0011): start() leaves the runtime
context alone, attach and detach cost nothing extra, and a sample belongs to the context's
current span when our SpanProcessor started it."""
import threading
import warnings
import weakref

import opentelemetry.context as otel_context
from opentelemetry.context.context import _RuntimeContext
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

import span_profile
from conftest import RATE_HZ, busy
from pprof_reader import samples_in


def test_start_leaves_the_runtime_context_alone(output):
    before = otel_context._RUNTIME_CONTEXT
    agent = span_profile.start(output=output, window_s=600)
    assert otel_context._RUNTIME_CONTEXT is before
    agent.stop()
    assert otel_context._RUNTIME_CONTEXT is before


class CountingContext(ContextVarsRuntimeContext):
    """Someone else's subclass of the contextvars runtime context: its variable is read."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def attach(self, context):
        self.calls += 1
        return super().attach(context)

    def detach(self, token):
        self.calls += 1
        super().detach(token)


def work_under_a_subclassed_context():
    return busy(0.4)


def test_a_subclass_of_the_contextvars_runtime_context_is_read(output, tracer, monkeypatch):
    custom = CountingContext()
    monkeypatch.setattr(otel_context, "_RUNTIME_CONTEXT", custom)
    agent = span_profile.start(output=output, sample_rate_hz=RATE_HZ, window_s=600, overhead_budget=0)
    with tracer.start_as_current_span("s") as span:
        assert agent.current_span().span_id == span.context.span_id
        work_under_a_subclassed_context()
    assert agent.current_span() is None
    assert custom.calls == 2
    agent.stop()
    samples = samples_in(output, "work_under_a_subclassed_context")
    assert sum(s.count for s in samples) > 20
    assert {s.span_id for s in samples} == {format(span.context.span_id, "016x")}


class ThreadLocalContext(_RuntimeContext):
    """A runtime context that keeps the current context in a thread-local, not a ContextVar."""

    def __init__(self):
        self._local = threading.local()

    def attach(self, context):
        token = getattr(self._local, "ctx", None) or otel_context.Context()
        self._local.ctx = context
        return token

    def get_current(self):
        return getattr(self._local, "ctx", None) or otel_context.Context()

    def detach(self, token):
        self._local.ctx = token


def work_under_an_unreadable_context():
    return busy(0.3)


def test_a_runtime_context_that_cannot_be_read_is_reported_and_attributes_nothing(output, tracer, monkeypatch):
    monkeypatch.setattr(otel_context, "_RUNTIME_CONTEXT", ThreadLocalContext())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent = span_profile.start(output=output, sample_rate_hz=RATE_HZ, window_s=600, overhead_budget=0)
    assert any("OTEL_PYTHON_CONTEXT=contextvars_context" in str(w.message) for w in caught)
    with tracer.start_as_current_span("unseen"):
        assert agent.current_span() is None  # what the sampler sees, not what the API says
        work_under_an_unreadable_context()
    agent.stop()
    samples = samples_in(output, "work_under_an_unreadable_context")
    assert sum(s.count for s in samples) > 20
    assert all(s.span_id is None for s in samples)


def foreign_work():
    return busy(0.3)


def test_spans_our_processor_did_not_start_are_not_attributed_and_are_counted(agent):
    # Another provider's spans, and sampled-out (non-recording) spans: no span table record
    # exists for them, so a span id on their samples would point nowhere.
    for provider in (TracerProvider(), TracerProvider(sampler=ALWAYS_OFF)):
        with provider.get_tracer("not-ours").start_as_current_span("foreign"):
            assert agent.current_span() is None
            foreign_work()
    agent.stop()
    samples = samples_in(agent.output, "foreign_work")
    assert sum(s.count for s in samples) > 20
    assert all(s.span_id is None for s in samples)
    assert span_profile.stats()["context_untracked"] > 0


def test_the_span_table_does_not_keep_spans_alive(agent, tracer):
    refs = []
    for i in range(50):
        with tracer.start_as_current_span("short-%d" % i) as s:
            refs.append(weakref.ref(s))
    del s
    for i in range(200):  # later starts sweep the listed spans nothing else references
        with tracer.start_as_current_span("later"):
            pass
    assert all(r() is None for r in refs)
    assert span_profile.stats()["span_objects"] < 50
    held = tracer.start_span("held")  # still referenced: stays listed
    for i in range(200):
        with tracer.start_as_current_span("later"):
            pass
    from opentelemetry.trace import use_span

    with use_span(held, end_on_exit=True):
        assert agent.current_span().span_id == held.context.span_id
    agent.stop()
    assert span_profile.stats()["span_objects"] == 0  # stop lets every span go


def test_route_set_after_start_is_recorded_at_end(agent, tracer):
    from pprof_reader import read_all

    # The span burns CPU so that it has samples: a window keeps only the records of spans
    # its samples carry (ADR 0010).
    with tracer.start_as_current_span("GET") as root:
        root.set_attribute("http.route", "/late/{id}")
        busy(0.2)
    agent.stop()
    sid = format(root.context.span_id, "016x")
    records = [r for p in read_all(agent.output) for r in p.meta["spans"] if r["span_id"] == sid]
    assert records and all(r["route"] == "/late/{id}" for r in records if r["end_unix_ns"])
    assert span_profile.stats()["hook_errors"] == 0
