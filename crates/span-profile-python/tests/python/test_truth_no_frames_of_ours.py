"""No sample holds a frame of span_profile's own Python code (ADR 0020), nor a sample of its
own thread (ADR 0029).

The agent wraps `Thread._bootstrap_inner` to name threads as they start, so its frame is under
every thread's stack; the walker leaves out frames of code under the package's directory.
Ground truth: the threads below run only their own function, so every frame in their samples
but the thread machinery's is theirs.

The log pump (`span_profile-log`) is a Python thread of the agent's: it runs `logging` and the
handlers the application configured for the agent's records, and its health checks. The walker
leaves the whole thread out. Ground truth: a check that burns CPU on the pump, timed with
`time.thread_time()` there, so that the pump is known to have been busy while sampled.
"""
import os
import threading
import time

import span_profile
from span_profile import _logging, _native
from conftest import RATE_HZ, busy, named_function
from pprof_reader import all_samples

PACKAGE_DIR = os.path.dirname(span_profile.__file__) + os.sep


def test_no_stack_holds_a_frame_of_ours(agent, output):
    fns = [named_function("worker_%d" % i) for i in range(3)]
    threads = [threading.Thread(target=f, args=(1.0,), name="w%d" % i) for i, f in enumerate(fns)]
    for t in threads:
        t.start()
    busy(1.0)
    for t in threads:
        t.join()
    agent.stop()
    samples = all_samples(output)
    ours = [s for s in samples if any(f[1].startswith(PACKAGE_DIR) for f in s.frames)]
    assert not ours, "frames of span_profile in %d of %d samples, e.g. %s" % (
        len(ours), len(samples), ours[:3])
    # The workers' samples are there, with the thread machinery around them.
    workers = [s for s in samples if any(f.startswith("worker_") for f in s.functions)]
    assert sum(s.count for s in workers) > 100
    assert all(any(f.endswith("_bootstrap_inner") for f in s.functions) for s in workers), workers[:3]


def test_the_log_pump_thread_is_never_sampled(output, monkeypatch):
    monkeypatch.setattr(_logging, "CHECK_EVERY_S", 0.05)
    ran = []  # (thread name, CPU seconds) of each call

    def pump_burner():  # defined here, not in span_profile: a sample of it would show it
        t0 = time.thread_time()
        busy(0.03)
        ran.append((threading.current_thread().name, time.thread_time() - t0))

    agent = span_profile.start(service="tests", output=output, sample_rate_hz=RATE_HZ, window_s=1,
                               overhead_budget=0)
    try:
        _logging.add_check(pump_burner)
        _native.log_wake()  # the pump may be in a longer wait, begun before the patch
        workload = named_function("workload_beside_the_pump")
        # Until the pump has burned 0.2 s of CPU (it shares the GIL and, under load, the
        # cores with the workload), and for 1.5 s at least.
        started = time.monotonic()
        while time.monotonic() - started < 30 and (
                time.monotonic() - started < 1.5 or sum(cpu for _, cpu in ran) < 0.2):
            workload(0.1)
    finally:
        _logging.remove_check(pump_burner)
        agent.stop()
    assert {name for name, _ in ran} == {"span_profile-log"}, ran
    pump_cpu = sum(cpu for _, cpu in ran)
    assert pump_cpu >= 0.2, "the pump was busy while sampled: %.3f s of CPU" % pump_cpu
    samples = all_samples(output)
    pumped = [s for s in samples if "pump_burner" in s.functions
              or s.labels.get("thread_name") == "span_profile-log"]
    assert not pumped, "the pump sampled in %d of %d samples, e.g. %s" % (len(pumped), len(samples), pumped[:3])
    beside = sum(s.count for s in samples if "workload_beside_the_pump" in s.functions)
    assert beside > 100, beside
