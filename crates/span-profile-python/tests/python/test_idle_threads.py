"""A thread that has not run since its last sample (its CPU clock did not move) is reported
from the copy taken then, span included: neither its frames nor its context are read again.
When it runs, both are read afresh, so a span it entered or left while parked shows at once."""
import threading
import time

from conftest import busy
from pprof_reader import samples_in


def parked_inside_span(event):
    event.wait()


def parked_after_span(event):
    event.wait()


def test_a_parked_thread_keeps_its_span_without_reading_its_context(agent, tracer):
    first, second = threading.Event(), threading.Event()
    spans = {}

    def worker():
        with tracer.start_as_current_span("held") as s:
            spans["held"] = format(s.context.span_id, "016x")
            parked_inside_span(first)
        busy(0.05)
        parked_after_span(second)

    t = threading.Thread(target=worker, name="parked")
    before = agent.stats()
    t.start()
    time.sleep(1.0)
    during = agent.stats()
    first.set()
    time.sleep(1.0)
    second.set()
    t.join()
    agent.stop()

    inside = samples_in(agent.output, "parked_inside_span")
    after = samples_in(agent.output, "parked_after_span")
    assert sum(s.count for s in inside) > 50, inside
    assert sum(s.count for s in after) > 50, after
    assert {s.labels.get("span_id") for s in inside} == {spans["held"]}
    assert {s.labels.get("span_id") for s in after} == {None}, "the span left while parked stuck"
    # Each tick samples this thread and the main thread (both parked in sleep/wait): without
    # the reuse, every sample would look its context up.
    samples = during["walker_samples"] - before["walker_samples"]
    lookups = during["context_lookups"] - before["context_lookups"]
    assert samples > 100
    assert lookups < samples / 10, (lookups, samples)
