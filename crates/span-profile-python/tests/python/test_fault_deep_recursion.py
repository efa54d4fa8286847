"""Fault: recursion 10,000 frames deep. The walker keeps the innermost frames up to its depth
cap (128), marks the stack truncated (a "[truncated]" outermost frame in pprof, counted in the
window's truncated_stacks and in stats()["walker_truncated"]), and the process and the sampler
carry on: no crash, no walk error, and the next, shallow stacks are complete again."""
import sys
import threading

import span_profile
from conftest import busy, named_function
from pprof_reader import read_all

DEPTH = 10_000
MAX_DEPTH = 128  # WalkerConfig::default().max_depth
TRUNCATED = "[truncated]"


def deep_leaf(seconds):
    return busy(seconds)


def recurse(n, seconds):
    if n == 0:
        return deep_leaf(seconds)
    return recurse(n - 1, seconds)


def run_deep(seconds):
    """Recurses DEPTH frames in a thread with a large C stack (3.9/3.10 use C stack per call)."""
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(DEPTH + 500)
    old_size = threading.stack_size(256 << 20)
    try:
        t = threading.Thread(target=recurse, args=(DEPTH, seconds), name="deep")
        t.start()
    finally:
        threading.stack_size(old_size)
    t.join()
    sys.setrecursionlimit(old_limit)


def test_a_stack_deeper_than_the_cap_is_cut_and_marked(agent):
    run_deep(1.0)
    shallow = named_function("shallow_after_deep")
    shallow(0.3)
    during = span_profile.stats()
    agent.stop()

    profiles = read_all(agent.output)
    samples = [s for p in profiles for s in p.samples]
    deep = [s for s in samples if "deep_leaf" in s.functions]
    assert deep, "the deep thread was sampled"
    for s in deep:
        assert s.functions[-1] == TRUNCATED, s.functions[-3:]
        assert len(s.frames) == MAX_DEPTH + 1, len(s.frames)
        # The innermost frames are the ones kept: `busy` under `deep_leaf`, or `deep_leaf`
        # itself in the instant it calls `busy` or returns (a rare sample, seen in CI and at
        # load 5-10 here, with the walker of before and after this session alike).
        assert s.functions[:2] in (["busy", "deep_leaf"], ["deep_leaf", "recurse"]), s.functions[:3]
        assert set(s.functions[s.functions.index("deep_leaf") + 1:-1]) == {"recurse"}
    in_busy = sum(s.count for s in deep if s.functions[0] == "busy")
    assert in_busy >= 0.9 * sum(s.count for s in deep), deep
    assert sum(p.meta["stats"]["truncated_stacks"] for p in profiles) >= len(deep)
    assert during["walker_truncated"] >= len(deep)
    # The deep thread keeps calling while it is walked, so a rare torn read (a frame popped
    # mid-walk) is legitimate and counted (its sample kept with no frame, ADR 0020 decision
    # 7); depth itself must not cause failed reads.
    assert during["walk_errors"] + during["walker_unreadable_stacks"] <= 2, during
    after = [s for s in samples if "shallow_after_deep" in s.functions]
    assert after and all(s.functions[-1] != TRUNCATED for s in after)
