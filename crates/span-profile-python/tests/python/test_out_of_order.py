"""Out-of-order ends: a parent ended before its child does not disturb the child, and the
current span always follows the runtime context, not the order of ends."""
from opentelemetry import context, trace

from conftest import busy, by_span, hex16
from pprof_reader import samples_in


def child_after_parent_ended():
    return busy(0.4)


def parent_context_restored():
    return busy(0.3)


def test_parent_ended_before_child(agent, tracer):
    parent = tracer.start_span("parent")
    parent_token = context.attach(trace.set_span_in_context(parent))
    child = tracer.start_span("child")
    child_token = context.attach(trace.set_span_in_context(child))
    parent.end()  # out of order: the parent ends first
    assert agent.current_span().span_id == child.context.span_id
    child_after_parent_ended()
    child.end()
    context.detach(child_token)
    # The parent's context is current again (ended or not): its samples are the parent's.
    assert agent.current_span().span_id == parent.context.span_id
    parent_context_restored()
    context.detach(parent_token)
    assert agent.current_span() is None
    agent.stop()

    c = samples_in(agent.output, "child_after_parent_ended")
    p = samples_in(agent.output, "parent_context_restored")
    assert by_span(c) == {hex16(child.context.span_id): sum(s.count for s in c)}
    assert by_span(p) == {hex16(parent.context.span_id): sum(s.count for s in p)}
    assert all(s.labels["local_root_span_id"] == hex16(parent.context.span_id) for s in c)


def test_detach_out_of_order_follows_the_context(agent, tracer):
    a = tracer.start_span("a")
    b = tracer.start_span("b")
    ta = context.attach(trace.set_span_in_context(a))
    tb = context.attach(trace.set_span_in_context(b))
    context.detach(ta)  # resets to what was current before `a`: nothing
    assert agent.current_span() is None
    context.detach(tb)  # resets to what was current before `b`: `a`
    assert agent.current_span().span_id == a.context.span_id
    context.attach(context.Context())
    assert agent.current_span() is None
    a.end()
    b.end()
