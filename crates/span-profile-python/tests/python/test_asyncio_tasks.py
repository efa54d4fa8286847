"""asyncio task names and stacks: a loop thread's samples show the running task's coroutine
chain, and carry its name as the `task_name` label with few distinct values (default names
fold to `Task`)."""
import asyncio
import json
import os
import subprocess
import sys

import pytest

from asyncio_helpers import make_burner
from pprof_reader import all_samples

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


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


#: Run in a fresh interpreter, so that uvloop is first imported before or after the agent starts.
UVLOOP_NAMES = """
import asyncio, json, sys
sys.path.insert(0, sys.argv[3])
when, out = sys.argv[1], sys.argv[2]
if when == "before":
    import uvloop
import span_profile
agent = span_profile.start(service="tests", output=out, sample_rate_hz=250, window_s=1, overhead_budget=0)
if when == "after":
    import uvloop
from asyncio_helpers import make_burner
from pprof_reader import all_samples
named, anon = make_burner("uv_named_burn"), make_burner("uv_anon_burn")

async def main():
    loop = asyncio.get_running_loop()
    tasks = [asyncio.create_task(named(0.3), name="checkout-worker")]
    tasks += [loop.create_task(anon(0.02)) for _ in range(20)]
    await asyncio.gather(*tasks)
    return type(loop).__module__

loop = uvloop.new_event_loop()
try:
    loop_module = loop.run_until_complete(main())
finally:
    loop.close()
agent.stop()
def names(fn):
    return sorted({str(s.labels.get("task_name")) for s in all_samples(out) if fn is None or fn in s.functions})
print(json.dumps({"loop": loop_module, "named": names("uv_named_burn"), "anon": names("uv_anon_burn"),
                  "all": names(None), "restored": "create_task" not in uvloop.Loop.__dict__}))
"""


@pytest.mark.parametrize("when", ["before", "after"])
def test_uvloop_task_names_whether_imported_before_or_after_start(tmp_path, when):
    pytest.importorskip("uvloop", reason="uvloop is not installed for this interpreter")
    run = subprocess.run([sys.executable, "-c", UVLOOP_NAMES, when, str(tmp_path / "profiles"), TESTS_DIR],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["loop"].startswith("uvloop"), got
    assert got["named"] == ["checkout-worker"], got
    assert got["anon"] == ["Task"], got
    assert set(got["all"]) <= {"checkout-worker", "Task", "None"}, got
    assert got["restored"], "agent.stop() left uvloop.Loop.create_task patched"


#: Run in a fresh interpreter, so that asyncio is first imported before or after the agent starts.
ASYNCIO_LATE = """
import json, sys
sys.path.insert(0, sys.argv[3])
when, out = sys.argv[1], sys.argv[2]
if when == "before":
    import asyncio
import span_profile
agent = span_profile.start(service="tests", output=out, sample_rate_hz=250, window_s=1, overhead_budget=0)
imported_by_agent = when == "after" and "asyncio" in sys.modules
import asyncio
from asyncio_helpers import make_burner
from pprof_reader import all_samples
named = make_burner("late_named_burn")

async def main():
    await asyncio.gather(asyncio.create_task(named(0.3), name="checkout-worker"))

asyncio.run(main())
agent.stop()
names = sorted({str(s.labels.get("task_name")) for s in all_samples(out) if "late_named_burn" in s.functions})
print(json.dumps({"imported_by_agent": imported_by_agent, "named": names,
                  "restored": asyncio.create_task.__module__ != "span_profile._asyncio"}))
"""


@pytest.mark.parametrize("when", ["before", "after"])
def test_asyncio_is_hooked_whether_imported_before_or_after_start_and_never_imported_by_the_agent(
        tmp_path, when):
    run = subprocess.run([sys.executable, "-c", ASYNCIO_LATE, when, str(tmp_path / "profiles"), TESTS_DIR],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert not got["imported_by_agent"], "span_profile.start() imported asyncio"
    assert got["named"] == ["checkout-worker"], got
    assert got["restored"], "agent.stop() left asyncio.create_task patched"
