"""Nested spans: samples carry the innermost current span, and its local root and route."""
import span_profile
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


def linked_inner_work():
    return busy(0.2)


def test_spans_with_samples_link_to_their_profile_and_spans_without_do_not(agent, tracer):
    # The file store keeps every sample under its innermost span, so each span that may have
    # samples links: `inner` through its own, `request` as the parent of a span with samples.
    # `never_current` was never current, so no sample can name it: a link would lead to an
    # empty profile, so it carries none.
    with tracer.start_as_current_span("request") as span:
        with tracer.start_as_current_span("inner") as inner:
            linked_inner_work()
        never_current = tracer.start_span("never_current")
        never_current.end()
    assert span.attributes["pyroscope.profile.id"] == hex16(span.context.span_id)
    assert inner.attributes["pyroscope.profile.id"] == hex16(inner.context.span_id)
    assert "pyroscope.profile.id" not in never_current.attributes
    assert span_profile.stats()["links_unwritten"] == 0


def test_a_span_whose_attributes_are_full_is_counted_not_evicted(agent):
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider

    provider = TracerProvider(span_limits=SpanLimits(max_span_attributes=1))
    provider.add_span_processor(span_profile.SpanProcessor())
    with provider.get_tracer("full").start_as_current_span("request", attributes={"app": "kept"}) as span:
        linked_inner_work()
    assert dict(span.attributes) == {"app": "kept"}  # the application's attribute stays
    assert span_profile.stats()["links_unwritten"] == 1


def test_an_sdk_without_on_ending_links_every_span_at_start(agent, tracer):
    # SDKs before 1.35 have no `_on_ending`: the link is set at start on every span in the
    # link scope, and the end is recorded from the span `on_end` gets.
    from span_profile import _hooks, _native

    _native.set_ends_at_ending(False)
    try:
        with tracer.start_as_current_span("request") as span:
            never_current = tracer.start_span("never_current")
            never_current.end()
    finally:
        _native.set_ends_at_ending(_hooks._SDK_ON_ENDING is not None)
    assert span.attributes["pyroscope.profile.id"] == hex16(span.context.span_id)
    assert never_current.attributes["pyroscope.profile.id"] == hex16(never_current.context.span_id)
    s = span_profile.stats()
    assert s["spans_ended"] == s["spans_started"] == 2 and s["hook_errors"] == 0


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
