"""Work that alternates in step with the sampling interval is still split by the time each part
takes: the sampler's ticks are jittered, so they do not fall on the same phase of a periodic
workload every time (ADR 0034).

Ground truth is the clock the workload alternates on. One thread runs `phase_a` in the first
half of every tick period of the monotonic clock (the clock the sampler schedules its ticks
by) and `phase_b` in the second half, so each has half of the thread's time. Ticks at a fixed
interval would all land in the same half (or on its edge) and give one function nearly every
sample; this is how a 2 ms asyncio chunk against a 4 ms tick once gave one task 147 samples
and its twin 3.
"""
import time

from conftest import RATE_HZ
from pprof_reader import all_samples

RUN_S = 3.0
PERIOD_NS = 1_000_000_000 // RATE_HZ
HALF_NS = PERIOD_NS // 2


def _alternate(seconds):
    """Runs `phase_a` and `phase_b` in turn, each for the half of every tick period of the
    monotonic clock that is its own."""
    ns = {"time": time, "HALF_NS": HALF_NS}
    exec(
        "def phase_a():\n"
        "    x = 0\n"
        "    while (time.perf_counter_ns() // HALF_NS) % 2 == 0:\n"
        "        x += 1\n"
        "    return x\n"
        "def phase_b():\n"
        "    x = 0\n"
        "    while (time.perf_counter_ns() // HALF_NS) % 2 == 1:\n"
        "        x += 1\n"
        "    return x\n",
        ns,
    )
    phase_a, phase_b = ns["phase_a"], ns["phase_b"]
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        phase_a()
        phase_b()


def _shares(samples, names, value):
    got = {n: 0 for n in names}
    for s in samples:
        for fn in s.functions:
            if fn in got:
                got[fn] += s.values.get(value, 0)
                break
    total = sum(got.values())
    assert total > 0, "no %s in %s: %r" % (value, names, got)
    return {n: v / total for n, v in got.items()}, got


def test_periodic_work_in_step_with_the_ticks_is_split_by_its_time(agent):
    # perf_counter is CLOCK_MONOTONIC on Linux, as is the sampler's Instant.
    assert time.get_clock_info("perf_counter").implementation == "clock_gettime(CLOCK_MONOTONIC)"
    _alternate(RUN_S)
    agent.stop()
    samples = all_samples(agent.output)
    names = ("phase_a", "phase_b")
    # About RUN_S * RATE_HZ = 750 samples: a fair split is 0.5 within a few hundredths; ticks
    # locked to one phase put nearly all of them on one function. CPU and wall time are
    # weights of those samples (the thread's CPU since its last sample, the time since the
    # last tick), and must split the same way.
    for value in ("samples", "cpu", "wall"):
        shares, got = _shares(samples, names, value)
        for n in names:
            assert 0.35 <= shares[n] <= 0.65, "%s shares %r (%r)" % (value, shares, got)
