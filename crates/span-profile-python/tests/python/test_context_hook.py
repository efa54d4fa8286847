"""The runtime-context hook: installed by start(), removed by stop(), delegating to whatever
runtime context OpenTelemetry had, and publishing the current span of every attach/detach."""
import opentelemetry.context as otel_context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

import span_profile
from conftest import busy


def test_start_wraps_and_stop_restores_the_runtime_context(output):
    before = otel_context._RUNTIME_CONTEXT
    agent = span_profile.start(output=output, window_s=600)
    assert otel_context._RUNTIME_CONTEXT is not before
    assert otel_context._RUNTIME_CONTEXT.original is before
    agent.stop()
    assert otel_context._RUNTIME_CONTEXT is before


class CountingContext(ContextVarsRuntimeContext):
    """A runtime context of someone else's: the hook must go through its methods."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def attach(self, context):
        self.calls += 1
        return super().attach(context)

    def detach(self, token):
        self.calls += 1
        super().detach(token)


def test_a_custom_runtime_context_is_called_through(output, tracer, monkeypatch):
    custom = CountingContext()
    monkeypatch.setattr(otel_context, "_RUNTIME_CONTEXT", custom)
    with span_profile.start(output=output, window_s=600) as agent:
        with tracer.start_as_current_span("s") as span:
            assert agent.current_span().span_id == span.context.span_id
        assert agent.current_span() is None
        assert custom.calls == 2
    assert otel_context._RUNTIME_CONTEXT is custom


def test_spans_our_processor_did_not_see_are_their_own_local_root(agent):
    tracer = TracerProvider().get_tracer("no-span-profile-processor")
    with tracer.start_as_current_span("outer"):
        with tracer.start_as_current_span("inner") as inner:
            current = agent.current_span()
            assert current.span_id == inner.context.span_id
            assert current.local_root == inner.context.span_id
            assert current.trace_id == inner.context.trace_id


def test_sampled_out_spans_still_carry_their_trace(agent):
    tracer = TracerProvider(sampler=ALWAYS_OFF).get_tracer("sampled-out")
    with tracer.start_as_current_span("dropped") as span:
        assert not span.is_recording()
        assert agent.current_span().span_id == span.get_span_context().span_id
    assert agent.current_span() is None


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
