"""Fault: thousands of threads created and destroyed per second (the target is 10,000/s; a
small shared machine reaches less, and the test prints what it reached). Each thread lives for
a few frames of work, so many die while the sampler walks them. The process carries on, memory
stays bounded (RSS growth over the churn, measured after a warm-up, stays under 16 MiB), the
sampler keeps ticking, no span or thread state is left behind, and what could not be walked is
counted (walk_errors; thread names past the cap in label_overflow), never a crash."""
import threading
import time

import span_profile
from conftest import busy
from pprof_reader import read_all

BATCH = 64


def rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def short_lived(n):
    if n:
        return short_lived(n - 1)
    return sum(range(50))


def churn(seconds):
    """Starts and joins threads in batches for `seconds`; returns how many ran."""
    n = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        batch = [threading.Thread(target=short_lived, args=(20,)) for _ in range(BATCH)]
        for t in batch:
            t.start()
        for t in batch:
            t.join()
        n += BATCH
    return n


def test_thread_churn_is_survived_with_bounded_memory(tmp_path):
    # Small thread stacks (the churned threads need little): creating a thread then costs far
    # less, which is what lets CPython approach the 10,000/s target on a small machine.
    old_stack = threading.stack_size(128 * 1024)
    try:
        run_churn(tmp_path)
    finally:
        threading.stack_size(old_stack)


def run_churn(tmp_path):
    # The baseline: the same churn without the agent, measured in the same run (A B A).
    churn(0.5)  # warm-up: the allocator's arenas, glibc's cache of thread stacks
    base = [churn(1.0)]
    agent = span_profile.start(service="churn", output=str(tmp_path / "p"), sample_rate_hz=1000,
                               window_s=1, overhead_budget=0)
    try:
        churn(1.0)  # warm-up: caches, thread stacks, allocator arenas
        rss0, before = rss_kb(), span_profile.stats()
        t0 = time.perf_counter()
        threads = churn(4.0)
        rate = threads / (time.perf_counter() - t0)
        rss1, after = rss_kb(), span_profile.stats()
        busy(0.2)  # a plain sample after the churn
    finally:
        agent.stop()
    base.append(churn(1.0))
    final = span_profile.stats()
    print("churn: without the agent %.0f/s before and %.0f/s after" % tuple(base))
    print("churn: %d threads at %.0f/s; RSS %+.1f MiB; ticks %d; walk errors %d; walker invalid reads %d"
          % (threads, rate, (rss1 - rss0) / 1024, after["ticks"] - before["ticks"],
             after["walk_errors"] - before["walk_errors"], after.get("walker_invalid_reads", 0)))
    assert rate > 500, "the churn did not run: %.0f threads/s" % rate
    assert rss1 - rss0 < 16 * 1024, "RSS grew %d KiB over %d threads" % (rss1 - rss0, threads)
    # 1000 Hz asked; a loaded 2-core machine gives the sampler far less, but never none.
    assert after["ticks"] - before["ticks"] >= 100, "the sampler stalled under churn"
    assert final["exported_windows"] == final["windows"] and final["export_errors"] == 0
    windows = read_all(agent.output)
    assert sum(p.meta["stats"]["walk_errors"] for p in windows) == final["walk_errors"]
    assert any("busy" in s.functions for p in windows for s in p.samples)
    # Every thread has its own default name: past the thread-name cap (1000) the sampled ones
    # become "_other", and that is counted.
    names = {s.labels.get("thread_name") for p in windows for s in p.samples}
    assert len(names) <= 1000
    if "_other" in names:
        assert sum(p.meta["stats"]["label_overflow"] for p in windows) > 0
