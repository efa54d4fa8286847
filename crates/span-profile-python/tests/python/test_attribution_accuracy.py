"""Attribution accuracy: N threads burn CPU at the same time, each in its own function under
its own span; at least 99% of each function's samples carry that thread's span id."""
import threading

from conftest import by_span, hex16, named_function
from pprof_reader import all_samples

THREADS = 4


def test_each_threads_function_carries_its_span(agent, tracer):
    burners = [named_function("accuracy_burn_%d" % i) for i in range(THREADS)]
    span_ids = {}
    go = threading.Barrier(THREADS)

    def run(i):
        go.wait()
        for round_ in range(3):  # several spans per thread, back to back
            with tracer.start_as_current_span("burn-%d-%d" % (i, round_)) as span:
                span_ids.setdefault(i, set()).add(hex16(span.context.span_id))
                burners[i](0.4)

    threads = [threading.Thread(target=run, args=(i,), name="burner-%d" % i) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    agent.stop()

    samples = all_samples(agent.output)
    report = {}
    for i in range(THREADS):
        mine = [s for s in samples if "accuracy_burn_%d" % i in s.functions]
        counts = by_span(mine)
        total = sum(counts.values())
        right = sum(n for sid, n in counts.items() if sid in span_ids[i])
        report[i] = (right, total)
        assert total >= 50, "thread %d: only %d samples" % (i, total)
        assert right >= 0.99 * total, "thread %d: %d of %d samples carry its spans: %r" % (i, right, total, counts)
    print("attribution:", report)
