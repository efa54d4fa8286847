"""asyncio task names and stacks: a loop thread's samples show the running task's coroutine
chain, and carry its name as the `task_name` label with few distinct values (default names
fold to `Task`)."""
import asyncio

from asyncio_helpers import make_burner
from pprof_reader import all_samples


def test_task_names_label_samples_and_default_names_fold(agent, tracer):
    named = make_burner("named_task_burn")
    anon = make_burner("anonymous_task_burn")

    async def main():
        tasks = [asyncio.create_task(named(0.3), name="checkout-worker")]
        tasks += [asyncio.create_task(anon(0.02)) for _ in range(20)]
        await asyncio.gather(*tasks)

    asyncio.run(main())
    agent.stop()
    samples = all_samples(agent.output)
    names = {s.labels.get("task_name") for s in samples if "named_task_burn" in s.functions}
    assert names == {"checkout-worker"}, names
    anon_names = {s.labels.get("task_name") for s in samples if "anonymous_task_burn" in s.functions}
    assert anon_names == {"Task"}, anon_names
    all_names = {s.labels.get("task_name") for s in samples} - {None}
    assert all_names <= {"checkout-worker", "Task"}, all_names


def test_coroutine_chain_and_loop_frames_are_on_the_stack(agent):
    leaf = make_burner("coro_leaf_burn")

    async def coro_middle():
        await leaf(0.5)

    async def coro_outer():
        await coro_middle()

    async def main():
        await asyncio.gather(asyncio.create_task(coro_outer()), asyncio.create_task(coro_outer()))

    asyncio.run(main())
    agent.stop()
    # Short names: 3.11+ report qualified names (`Handle._run`, `...<locals>.coro_middle`).
    stacks = [([f.rsplit(".", 1)[-1] for f in s.functions], s.count) for s in all_samples(agent.output)]
    stacks = [(f, n) for f, n in stacks if "coro_leaf_burn" in f]
    total = sum(n for _, n in stacks)
    assert total >= 50
    whole = [f for f, n in stacks if "coro_outer" in f and "coro_middle" in f for _ in range(n)]
    assert len(whole) >= 0.95 * total, stacks[:3]
    # The loop's frames above the task step (Handle._run is where each step enters).
    # A walk that races the loop (3.9/3.10 read heap frames one by one) may end early and is
    # counted; nearly every stack must reach the loop's entry.
    entered = [f for f in whole if "_run" in f]
    assert len(entered) >= 0.9 * len(whole), whole[:3]
    full = [f for f in entered if "run_until_complete" in f]
    assert full, entered[:3]
    f = full[0]
    assert f.index("coro_leaf_burn") < f.index("coro_middle") < f.index("coro_outer") < f.index("_run")
