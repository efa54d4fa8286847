"""Thread pool reuse: a ThreadPoolExecutor runs many spans on few threads; every task's
samples carry that task's span, never the previous task's on the same thread."""
from concurrent.futures import ThreadPoolExecutor

from conftest import by_span, hex16, named_function
from pprof_reader import all_samples

TASKS = 24


def test_each_pooled_task_gets_its_own_span(agent, tracer):
    funcs = [named_function("pool_task_%d" % i) for i in range(TASKS)]
    span_ids = {}

    def task(i):
        with tracer.start_as_current_span("task-%d" % i) as span:
            span_ids[i] = hex16(span.context.span_id)
            funcs[i](0.08)
        assert agent.current_span() is None

    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="pool") as pool:
        list(pool.map(task, range(TASKS)))
    agent.stop()

    samples = all_samples(agent.output)
    seen = 0
    for i in range(TASKS):
        mine = [s for s in samples if "pool_task_%d" % i in s.functions]
        seen += bool(mine)
        assert set(by_span(mine)) <= {span_ids[i]}, "task %d: %r" % (i, by_span(mine))
    assert seen >= TASKS * 3 // 4  # nearly every 80 ms task was sampled at least once
    pool_threads = {s.labels["thread_name"] for s in samples if any(f.startswith("pool_task_") for f in s.functions)}
    assert pool_threads
    # A pool thread's samples carry its name. The sampler never waits for the name map: if a
    # thread starting or ending held it through every attempt, the sample gets the default
    # name, and that is counted.
    unnamed = {n for n in pool_threads if not n.startswith("pool")}
    assert not unnamed or agent.stats()["walker_thread_names_busy"] > 0, unnamed
    assert len(unnamed) < len(pool_threads), pool_threads
