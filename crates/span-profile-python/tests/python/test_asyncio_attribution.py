"""asyncio: every sample of a loop thread carries the span current in the running task's
context, whatever the interleaving (create_task, gather, TaskGroup, wait_for, tasks awaiting
tasks, eager tasks, uvloop)."""
import asyncio
import sys

import pytest

from asyncio_helpers import assert_accurate, attribution, hex16, make_burner
from pprof_reader import all_samples

TASKS = 100


def run_interleaved(tracer, prefix, tasks, seconds, loop_factory=None):
    """`tasks` tasks, each under its own span, burning CPU in its own function and yielding
    between 2 ms chunks; returns {function: {hex span id}}."""
    burners = [make_burner("%s_%d" % (prefix, i)) for i in range(tasks)]
    expected = {}

    async def one(i):
        with tracer.start_as_current_span("task-%d" % i) as span:
            expected[burners[i].__name__] = {hex16(span.context.span_id)}
            await burners[i](seconds)

    async def main():
        await asyncio.gather(*(one(i) for i in range(tasks)))

    if loop_factory is None:
        asyncio.run(main())
    else:
        loop = loop_factory()
        try:
            loop.run_until_complete(main())
        finally:
            loop.close()
    return expected


def test_100_interleaved_tasks_each_carry_their_span(agent, tracer):
    expected = run_interleaved(tracer, "interleaved", TASKS, 0.08)
    agent.stop()
    report = attribution(all_samples(agent.output), expected)
    right = sum(r for r, _, _ in report.values())
    total = sum(t for _, t, _ in report.values())
    print("100 tasks: %d of %d samples right (%.2f%%)" % (right, total, 100.0 * right / max(total, 1)))
    print("stats:", {k: v for k, v in agent.stats().items() if k.startswith(("context", "walker"))})
    print("wrong:", {f: spans for f, (r, t, spans) in report.items() if r < t})
    assert total >= TASKS * 5
    assert right >= 0.99 * total
    # Per function: a few samples each, every one right but for a switch mid-sample.
    assert_accurate(report, min_share=0.9, min_samples=2)


def test_create_task_inherits_and_child_spans_override(agent, tracer):
    parent_burn, child_burn, own_burn = (make_burner(n) for n in ("ct_parent", "ct_child", "ct_own"))
    expected = {}

    async def child_own():
        with tracer.start_as_current_span("own") as s:
            expected["ct_own"] = {hex16(s.context.span_id)}
            await own_burn(0.4)

    async def main():
        with tracer.start_as_current_span("parent") as p:
            expected["ct_parent"] = expected["ct_child"] = {hex16(p.context.span_id)}
            a = asyncio.create_task(child_burn(0.4))
            b = asyncio.create_task(child_own())
            await parent_burn(0.4)
            await a
            await b

    asyncio.run(main())
    agent.stop()
    assert_accurate(attribution(all_samples(agent.output), expected))


def test_gather_and_wait_for(agent, tracer):
    burners = [make_burner("gw_%d" % i) for i in range(4)]
    expected = {}

    async def one(i):
        with tracer.start_as_current_span("g-%d" % i) as s:
            expected["gw_%d" % i] = {hex16(s.context.span_id)}
            await burners[i](0.3)

    async def main():
        await asyncio.gather(one(0), one(1))
        await asyncio.wait_for(asyncio.gather(one(2), asyncio.wait_for(one(3), 30)), 30)

    asyncio.run(main())
    agent.stop()
    assert_accurate(attribution(all_samples(agent.output), expected))


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.TaskGroup is new in 3.11")
def test_task_group(agent, tracer):
    burners = [make_burner("tg_%d" % i) for i in range(3)]
    expected = {}

    async def one(i):
        with tracer.start_as_current_span("tg-%d" % i) as s:
            expected["tg_%d" % i] = {hex16(s.context.span_id)}
            await burners[i](0.3)

    async def main():
        async with asyncio.TaskGroup() as tg:
            for i in range(3):
                tg.create_task(one(i))

    asyncio.run(main())
    agent.stop()
    assert_accurate(attribution(all_samples(agent.output), expected))


def test_tasks_awaiting_tasks(agent, tracer):
    outer_before, inner_burn, outer_after = (make_burner(n) for n in ("aw_before", "aw_inner", "aw_after"))
    expected = {}

    async def inner():
        with tracer.start_as_current_span("inner") as s:
            expected["aw_inner"] = {hex16(s.context.span_id)}
            await inner_burn(0.3)

    async def outer():
        with tracer.start_as_current_span("outer") as s:
            expected["aw_before"] = expected["aw_after"] = {hex16(s.context.span_id)}
            await outer_before(0.3)
            await asyncio.create_task(inner())
            await outer_after(0.3)

    async def main():
        # Two concurrent outers so that awaiting really interleaves with another span.
        other = make_burner("aw_other")

        async def noise():
            with tracer.start_as_current_span("noise") as s:
                expected["aw_other"] = {hex16(s.context.span_id)}
                await other(0.9)

        await asyncio.gather(asyncio.create_task(outer()), noise())

    asyncio.run(main())
    agent.stop()
    assert_accurate(attribution(all_samples(agent.output), expected))


@pytest.mark.skipif(sys.version_info < (3, 12), reason="eager tasks are new in 3.12")
def test_eager_tasks(agent, tracer):
    burners = [make_burner("eager_%d" % i) for i in range(3)]
    expected = {}

    async def one(i):
        with tracer.start_as_current_span("eager-%d" % i) as s:
            expected["eager_%d" % i] = {hex16(s.context.span_id)}
            await burners[i](0.3)  # its first chunk runs eagerly, inside create_task

    async def main():
        asyncio.get_running_loop().set_task_factory(asyncio.eager_task_factory)
        await asyncio.gather(*(asyncio.create_task(one(i)) for i in range(3)))

    asyncio.run(main())
    agent.stop()
    assert_accurate(attribution(all_samples(agent.output), expected))


def test_uvloop(agent, tracer):
    uvloop = pytest.importorskip("uvloop", reason="uvloop is not installed for this interpreter")
    expected = run_interleaved(tracer, "uvloop_task", 10, 0.2, loop_factory=uvloop.new_event_loop)
    agent.stop()
    assert_accurate(attribution(all_samples(agent.output), expected))
