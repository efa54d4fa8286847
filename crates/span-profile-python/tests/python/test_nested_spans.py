"""Nested spans: samples carry the innermost current span, and its local root and route."""
from conftest import busy, by_span, hex16
from pprof_reader import samples_in


def nested_outer_work():
    return busy(0.4)


def nested_inner_work():
    return busy(0.4)


def test_samples_carry_the_innermost_span_and_the_local_root(agent, tracer):
    with tracer.start_as_current_span("request", attributes={"http.route": "/orders/{id}"}) as outer:
        nested_outer_work()
        with tracer.start_as_current_span("pricing.calculate") as inner:
            assert agent.current_span().span_id == inner.context.span_id
            assert agent.current_span().local_root == outer.context.span_id
            nested_inner_work()
        assert agent.current_span().span_id == outer.context.span_id
    assert agent.current_span() is None
    agent.stop()

    outer_id, inner_id = hex16(outer.context.span_id), hex16(inner.context.span_id)
    outer_samples = samples_in(agent.output, "nested_outer_work")
    inner_samples = samples_in(agent.output, "nested_inner_work")
    assert sum(s.count for s in outer_samples) > 20
    assert sum(s.count for s in inner_samples) > 20
    assert by_span(outer_samples) == {outer_id: sum(s.count for s in outer_samples)}
    assert by_span(inner_samples) == {inner_id: sum(s.count for s in inner_samples)}
    for s in inner_samples:
        assert s.labels["local_root_span_id"] == outer_id
        assert s.labels["trace_id"] == format(outer.context.trace_id, "032x")
        assert s.labels["route"] == "/orders/{id}"  # the local root's route


def test_spans_get_the_profile_id_attribute(agent, tracer):
    # The file store keeps every sample under its innermost span: every span links.
    with tracer.start_as_current_span("request") as span:
        with tracer.start_as_current_span("inner") as inner:
            pass
    assert span.attributes["pyroscope.profile.id"] == hex16(span.context.span_id)
    assert inner.attributes["pyroscope.profile.id"] == hex16(inner.context.span_id)


def test_a_remote_parent_starts_a_new_local_root(agent, tracer):
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    remote = SpanContext(trace_id=0xABC, span_id=0xDEF, is_remote=True, trace_flags=TraceFlags(1))
    ctx = trace.set_span_in_context(NonRecordingSpan(remote))
    with tracer.start_as_current_span("server", context=ctx, attributes={"http.route": "/r"}) as server:
        with tracer.start_as_current_span("child"):
            current = agent.current_span()
            assert current.local_root == server.context.span_id
            assert current.trace_id == 0xABC
