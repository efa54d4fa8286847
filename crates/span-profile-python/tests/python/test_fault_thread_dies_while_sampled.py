"""Fault: threads die while the sampler is walking them. Threads with 60-frame stacks end
continuously while the agent samples at 1000 Hz with no CPU cap, so walks regularly meet a
thread state or frame that is being freed. Each such walk is counted, never a crash: a walk
error (in stats() and in the window's stats) when the thread state is gone, a stack of no
frames marked truncated when only its frames are (ADR 0020, decision 7). Threads that stay
alive are sampled throughout with whole stacks."""
import threading
import time

import span_profile
from conftest import named_function
from pprof_reader import read_all


def dying(n):
    if n:
        return dying(n - 1)
    end = time.perf_counter() + 0.002
    while time.perf_counter() < end:
        pass


def test_threads_dying_mid_walk_are_counted_not_fatal(tmp_path):
    agent = span_profile.start(service="dying", output=str(tmp_path / "p"), sample_rate_hz=1000,
                               window_s=1, overhead_budget=0)
    survivor = named_function("survivor_burns")
    stop = threading.Event()
    started = [0]

    def spawner():
        while not stop.is_set():
            ts = [threading.Thread(target=dying, args=(60,)) for _ in range(8)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            started[0] += len(ts)

    spawners = [threading.Thread(target=spawner) for _ in range(2)]
    for s in spawners:
        s.start()
    try:
        survivor(2.5)
    finally:
        stop.set()
        for s in spawners:
            s.join()
        agent.stop()
    stats = span_profile.stats()
    windows = read_all(agent.output)
    print("%d threads died; %d ticks, %d samples, %d walk errors (%d invalid reads)" % (
        started[0], stats["ticks"], stats["samples"], stats["walk_errors"],
        stats.get("walker_invalid_reads", 0)))
    assert started[0] >= 50
    assert sum(p.meta["stats"]["walk_errors"] for p in windows) == stats["walk_errors"]
    mine = [s for p in windows for s in p.samples if "survivor_burns" in s.functions]
    # Sampled on (nearly) every tick: the dying threads cost it nothing.
    assert sum(s.count for s in mine) >= 0.8 * stats["ticks"], "the surviving thread was sampled throughout"
    assert all(s.functions[-1] != "[truncated]" for s in mine)
    assert any("dying" in s.functions for p in windows for s in p.samples)
