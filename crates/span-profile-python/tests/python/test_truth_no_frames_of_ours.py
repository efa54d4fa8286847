"""No sample holds a frame of span_profile's own Python code (ADR 0020).

The agent wraps `Thread._bootstrap_inner` to name threads as they start, so its frame is under
every thread's stack; the walker leaves out frames of code under the package's directory.
Ground truth: the threads below run only their own function, so every frame in their samples
but the thread machinery's is theirs.
"""
import os
import threading

import span_profile
from conftest import busy, named_function
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
