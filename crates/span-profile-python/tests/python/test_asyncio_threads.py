"""Work that leaves the loop thread: asyncio.to_thread and run_in_executor run in a worker
thread with the submitter's span; contextvars.copy_context().run carries the span of the
context it runs, on any thread."""
import asyncio
import contextvars
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from asyncio_helpers import assert_accurate, attribution, hex16, make_sync_burner
from pprof_reader import all_samples


@pytest.mark.skipif(sys.version_info < (3, 9), reason="asyncio.to_thread is new in 3.9")
def test_to_thread_carries_the_submitters_span(agent, tracer):
    burners = [make_sync_burner("tothread_%d" % i) for i in range(3)]
    expected = {}

    async def one(i):
        with tracer.start_as_current_span("submit-%d" % i) as s:
            expected["tothread_%d" % i] = {hex16(s.context.span_id)}
            await asyncio.to_thread(burners[i], 0.3)

    async def main():
        await asyncio.gather(*(one(i) for i in range(3)))

    asyncio.run(main())
    agent.stop()
    assert_accurate(attribution(all_samples(agent.output), expected))


def uvloop_factory():
    uvloop = pytest.importorskip("uvloop", reason="uvloop is not installed for this interpreter")
    return uvloop.new_event_loop


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_run_in_executor_carries_the_submitters_span(agent, tracer, loop):
    new_loop = uvloop_factory() if loop == "uvloop" else asyncio.new_event_loop
    burners = [make_sync_burner("executor_%d" % i) for i in range(3)]
    expected = {}
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="exec")

    async def one(i):
        with tracer.start_as_current_span("submit-%d" % i) as s:
            expected["executor_%d" % i] = {hex16(s.context.span_id)}
            await asyncio.get_running_loop().run_in_executor(pool, burners[i], 0.3)

    async def main():
        await asyncio.gather(*(one(i) for i in range(3)))
        # Afterwards a worker runs without a span again.
        await asyncio.get_running_loop().run_in_executor(pool, make_sync_burner("executor_none"), 0.2)

    event_loop = new_loop()
    try:
        event_loop.run_until_complete(main())
    finally:
        event_loop.close()
    pool.shutdown()
    agent.stop()
    samples = all_samples(agent.output)
    assert_accurate(attribution(samples, expected))
    report = attribution(samples, {"executor_none": {None}})
    assert_accurate(report)


def test_copy_context_run_on_another_thread(agent, tracer):
    burn = make_sync_burner("copied_context_burn")
    plain = make_sync_burner("plain_thread_burn")
    with tracer.start_as_current_span("captured") as s:
        ctx = contextvars.copy_context()
        captured = hex16(s.context.span_id)

    def worker():
        ctx.run(burn, 0.4)  # no attach on this thread: only the context says which span
        plain(0.3)

    t = threading.Thread(target=worker, name="copier")
    t.start()
    t.join()
    agent.stop()
    samples = all_samples(agent.output)
    assert_accurate(attribution(samples, {"copied_context_burn": {captured}, "plain_thread_burn": {None}}))
