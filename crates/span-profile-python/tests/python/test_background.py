"""A thread with no current span: its samples are labelled route=background, with no span
id, and carry the thread's name."""
import threading

from conftest import busy
from pprof_reader import samples_in


def background_only_work():
    return busy(0.5)


def test_thread_without_span_is_background(agent, tracer):
    t = threading.Thread(target=background_only_work, name="housekeeping")
    t.start()
    with tracer.start_as_current_span("unrelated"):
        busy(0.2)  # a span on another thread must not leak onto this one
    t.join()
    agent.stop()

    samples = samples_in(agent.output, "background_only_work")
    assert sum(s.count for s in samples) > 20
    for s in samples:
        assert "span_id" not in s.labels and "trace_id" not in s.labels
        assert s.labels["route"] == "background"
        assert s.labels["thread_name"] == "housekeeping"
