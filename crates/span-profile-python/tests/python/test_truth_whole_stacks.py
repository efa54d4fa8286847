"""Whole stacks (issue 27, point 7): a stack is either whole or marked truncated. No sample is
rooted at a generator's or coroutine's frame, nor at `<interpreter trampoline>`.

A generator's or coroutine's frame is linked into its thread's frame chain only while it runs:
its `previous` (`f_back` before 3.11) is set as it is resumed and cleared as it yields. A chain
read at that instant ends at the generator, without its callers. The walker reports such a
stack truncated (a `[truncated]` outermost frame), keeping its leaf frames, CPU and span, and
counts it in `truncated_stacks` and `walker_torn_roots` (ADR 0020).

Nor is any stack spliced (ADR 0020, decision 6): on 3.9/3.10 a frame object freed while its
chain is read keeps a stale `f_back` (its old caller, or the free list's next entry; one sample
in 8,777 was rooted at an earlier test's frames on 3.10 in CI before), and on every version a
frame being pushed where a popped one lay can be copied with the new code under the old
caller, or (3.12+) a C-stack shim's slot read after it was reused (`whole_coro_leaf` under
`whole_drive_coroutines`, in half the runs on 3.13 before).

Ground truth: every thread here is a `threading.Thread`, so every whole stack of it is rooted at
`threading.Thread._bootstrap`; and the calls between this file's functions are the ones listed
in `CALLS`. Eight threads create and drain generators (driven by C `sum`,
by `for`, by `yield from`, by genexps, closed half way) and coroutines (sent to by hand, and
on asyncio event loops), which is what made 3.4% of samples on 3.11 and 1.4% on 3.12 rooted at
a generator, and 63 at the trampoline, before."""
import asyncio
import os
import threading
import time

import span_profile
from conftest import RATE_HZ
from pprof_reader import read_all

RUN_S = 4.0
TRUNCATED = "[truncated]"
ENTRY = ("_bootstrap", "threading.py")
HERE = os.path.basename(__file__)


def whole_gen_leaf(n):
    for i in range(n):
        yield i * i


def whole_gen_outer(n):
    yield from whole_gen_leaf(n)
    yield from (i for i in whole_gen_leaf(n))


def whole_drain_generators(stop):
    while not stop.is_set():
        sum(whole_gen_leaf(40))  # resumed from C (through a C-stack shim on 3.12+)
        for _ in whole_gen_outer(20):  # resumed in place by FOR_ITER / SEND
            pass
        list(x + 1 for x in range(40))
        g = whole_gen_leaf(10)
        next(g)
        g.close()


async def whole_coro_leaf(n):
    s = 0
    for i in range(n):
        s += i
    return s


async def whole_coro_outer(n):
    return await whole_coro_leaf(n) + await whole_coro_leaf(n)


def whole_drive_coroutines(stop):
    while not stop.is_set():
        c = whole_coro_outer(30)
        try:
            c.send(None)
        except StopIteration:
            pass


def whole_event_loop(stop):
    async def main():
        while not stop.is_set():
            await asyncio.gather(*(whole_coro_outer(30) for _ in range(8)))
            await asyncio.sleep(0)

    asyncio.run(main())


WORKLOADS = [whole_drain_generators] * 3 + [whole_drive_coroutines] * 3 + [whole_event_loop] * 2

# Every call from one function of this file to another that the workloads make: (callee,
# caller). A generator's or coroutine's caller is whoever resumes it (`sum` and `list` are C,
# so the generator's frame links to the function that called them).
CALLS = {
    ("whole_gen_leaf", "whole_drain_generators"),  # sum(...), next(g), g.close()
    ("whole_gen_leaf", "whole_gen_outer"),  # yield from whole_gen_leaf(n)
    ("whole_gen_leaf", "<genexpr>"),  # (i for i in whole_gen_leaf(n))
    ("<genexpr>", "whole_gen_outer"),  # yield from (...)
    ("<genexpr>", "whole_drain_generators"),  # list(x + 1 for ...)
    ("<genexpr>", "main"),  # gather(*(... for _ in range(8)))
    ("whole_gen_outer", "whole_drain_generators"),
    ("whole_coro_leaf", "whole_coro_outer"),
    ("whole_coro_outer", "whole_drive_coroutines"),
    # 3.11+: calling a coroutine function runs its frame on the caller's stack for one
    # instruction (RETURN_GENERATOR), which makes the coroutine; gather's are made in `main`'s
    # genexpr. (The others are made by their resumers, listed above.)
    ("whole_coro_outer", "<genexpr>"),
}


def short(name):
    """`whole_event_loop.<locals>.main` (3.11+ qualified names) -> `main`."""
    return name.rsplit(".", 1)[-1] if not name.startswith("<") else name


def impossible_links(frames):
    """The links of a stack (leaf first) that no thread here can make: a frame of another
    test file or of pytest (whose frames a freed frame's stale `f_back` leads to), or a call
    between two functions of this file that the workloads never make."""
    bad = []
    for (callee, cfile, _), (caller, rfile, _) in zip(frames, frames[1:]):
        if cfile.endswith(HERE) and rfile.endswith(HERE) and (short(callee), short(caller)) not in CALLS:
            bad.append((callee, caller))
    for name, file, _ in frames:
        foreign_test = "/tests/python/" in file and not file.endswith(HERE)
        if foreign_test or "/_pytest/" in file or "/pluggy/" in file:
            bad.append((name, file))
    return bad


def test_no_sample_is_rooted_at_a_generator_or_the_trampoline(output):
    agent = span_profile.start(service="tests", output=output, sample_rate_hz=RATE_HZ, window_s=1,
                               overhead_budget=0)
    stop = threading.Event()
    threads = [threading.Thread(target=w, args=(stop,), name="whole-%d" % i) for i, w in enumerate(WORKLOADS)]
    for t in threads:
        t.start()
    time.sleep(RUN_S)
    stop.set()
    for t in threads:
        t.join()
    stats = span_profile.stats()
    agent.stop()

    profiles = read_all(output)
    ours = [s for p in profiles for s in p.samples if s.labels.get("thread_name", "").startswith("whole-")]
    wall = [s for s in ours if s.count > 0]
    total = sum(s.count for s in wall)
    assert total > 0.5 * RUN_S * RATE_HZ, "eight busy threads were sampled"
    rooted_wrong, truncated = [], 0
    for s in wall:
        root_name, root_file = s.frames[-1][0], s.frames[-1][1]
        if root_name == TRUNCATED:
            truncated += s.count
        elif not (root_name.endswith(ENTRY[0]) and root_file.endswith(ENTRY[1])):
            rooted_wrong.append(s)
        assert not any(f[0] == "<interpreter trampoline>" for f in s.frames), s
    assert rooted_wrong == [], "%d of %d samples rooted wrong, e.g. %r" % (
        sum(s.count for s in rooted_wrong), total, rooted_wrong[:3])
    # Whole or truncated, every link of a stack is a call the thread made.
    spliced = [(s, impossible_links(s.frames)) for s in wall if impossible_links(s.frames)]
    assert spliced == [], "%d of %d samples spliced, e.g. %r" % (len(spliced), total, [
        (s.frames, links) for s, links in spliced[:3]])
    # Every stack marked truncated is counted: in the windows and by the walker (torn roots
    # are truncated stacks; these stacks are far shallower than the depth cap).
    assert truncated <= sum(p.meta["stats"]["truncated_stacks"] for p in profiles)
    assert truncated <= stats["walker_truncated"]
    assert stats["walker_torn_roots"] <= stats["walker_truncated"]
    # Whole stacks are the rule: a torn read is the thread switching generators mid-copy.
    assert truncated <= 0.10 * total, (truncated, total)
    print("samples %d, truncated (torn roots) %d = %.2f%%, walker_torn_roots %d, walker_moved_chains %s, invalid %s, unreadable %s" % (
        total, truncated, 100.0 * truncated / total, stats["walker_torn_roots"], stats.get("walker_moved_chains"),
        stats.get("walker_invalid_reads"), stats.get("walker_unreadable_stacks")))
