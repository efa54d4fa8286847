"""fork(): the child restarts the agent with an instance label of its own (its pid in it) and
writes its own files; the parent keeps profiling."""
import os
import warnings

from conftest import busy, by_span, hex16
from pprof_reader import read_all, samples_in


def child_work():
    return busy(0.4)


def parent_work():
    return busy(0.3)


def test_forked_child_restarts_with_its_own_instance(agent, tracer):
    parent_instance = agent.instance
    r, w = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
        pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            os.close(r)
            assert agent.running and agent.instance != parent_instance
            with tracer.start_as_current_span("in-child") as span:
                child_work()
            os.write(w, hex16(span.context.span_id).encode())
            agent.stop()
            code = 0
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(w)
    parent_work()
    _, status = os.waitpid(pid, 0)
    child_span = os.read(r, 64).decode()
    os.close(r)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    agent.stop()

    assert str(os.getpid()) in parent_instance
    instances = {p.meta["resource"]["instance"] for p in read_all(agent.output)}
    assert parent_instance in instances
    (child_instance,) = instances - {parent_instance}
    assert str(pid) in child_instance
    child = samples_in(agent.output, "child_work")
    assert child and by_span(child) == {child_span: sum(s.count for s in child)}
    assert all(p.meta["resource"]["instance"] == child_instance
               for p in read_all(agent.output) if any("child_work" in s.functions for s in p.samples))
    assert samples_in(agent.output, "parent_work")


def _perf_fds():
    """This process's descriptors of perf events (the walker's scheduler pages, ADR 0033)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink("/proc/self/fd/" + fd) == "anon_inode:[perf_event]"
        except OSError:
            pass
    return n


def test_a_forked_child_does_not_keep_the_parents_scheduler_pages(agent):
    import threading
    import time

    parked = threading.Event()
    threads = [threading.Thread(target=parked.wait) for _ in range(8)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 5
        while _perf_fds() < 8 and time.monotonic() < deadline:
            time.sleep(0.05)
        stats = agent.stats()
        if stats["walker_sched_page_failures"] and not os.environ.get("CI"):
            return  # this kernel refuses perf_event_open: nothing to inherit
        assert _perf_fds() >= 8, stats
        r, w = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            # Before the child's own agent could have waited 8 ticks for pages of its own.
            os.write(w, str(_perf_fds()).encode())
            os._exit(0)
        os.close(w)
        os.waitpid(pid, 0)
        in_child = int(os.read(r, 16))
        os.close(r)
        assert in_child == 0, "the child inherited %d perf descriptors" % in_child
        assert _perf_fds() >= 8, "the parent's pages stay open"
    finally:
        parked.set()
        for t in threads:
            t.join()
