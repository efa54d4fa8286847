"""A span that is started but never made current gets no samples: the thread's samples go to
whatever is current instead (here nothing, so `background`)."""
from conftest import busy, by_span, hex16
from pprof_reader import samples_in


def never_current_work():
    return busy(0.5)


def test_a_span_never_made_current_gets_no_samples(agent, tracer):
    span = tracer.start_span("started-not-current")
    assert agent.current_span() is None
    never_current_work()
    span.end()
    agent.stop()

    samples = samples_in(agent.output, "never_current_work")
    assert sum(s.count for s in samples) > 20
    assert hex16(span.context.span_id) not in by_span(samples)
    assert by_span(samples) == {None: sum(s.count for s in samples)}
    assert {s.labels["route"] for s in samples} == {"background"}
