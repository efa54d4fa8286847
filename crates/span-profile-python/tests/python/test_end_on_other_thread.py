"""A span ended on another thread: the thread that has it current keeps attributing samples
to it until it detaches the span; the span table records the end time from the other thread."""
import threading

from opentelemetry import trace

from conftest import busy, by_span, hex16
from pprof_reader import read_all, samples_in


def worker_while_current():
    return busy(0.4)


def worker_after_detach():
    return busy(0.3)


def test_span_ended_elsewhere_stays_current_where_attached(agent, tracer):
    span = tracer.start_span("handed-over")
    ended = threading.Event()
    ident = {}

    def worker():
        ident["t"] = threading.get_ident()
        with trace.use_span(span, end_on_exit=False):
            worker_while_current()
            ended.wait(5)
            assert agent.current_span().span_id == span.context.span_id
            worker_while_current()
        assert agent.current_span() is None
        worker_after_detach()

    t = threading.Thread(target=worker, name="handed-over-worker")
    t.start()
    while "t" not in ident:
        pass
    busy(0.1)
    span.end()  # on the main thread, while the worker still has it current
    ended.set()
    t.join()
    agent.stop()

    sid = hex16(span.context.span_id)
    during = samples_in(agent.output, "worker_while_current")
    after = samples_in(agent.output, "worker_after_detach")
    assert by_span(during) == {sid: sum(s.count for s in during)}
    assert by_span(after) == {None: sum(s.count for s in after)}
    assert {s.labels["thread_name"] for s in during} == {"handed-over-worker"}
    records = [r for p in read_all(agent.output) for r in p.meta["spans"] if r["span_id"] == sid]
    assert any(r["end_unix_ns"] == span.end_time for r in records)
