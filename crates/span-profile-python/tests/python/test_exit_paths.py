"""Children keep their samples (issue 27, point 5): a process that ends by os._exit, as every
multiprocessing child started by fork or forkserver does, writes the windows it had before it
exits, within a bounded time (docs/adr/0028). Spawned children exit through sys.exit, where the
agent's atexit hook writes them.

Ground truth: each child records its own span id, its pid and the CPU time its thread used
under the span (time.thread_time()); the store the parent reads must hold that span's samples,
from that child's instance, with that CPU."""
import multiprocessing
import os
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider

import span_profile
from conftest import RATE_HZ, busy, hex16
from pprof_reader import read_all

CHILDREN = 3
#: CPU seconds each child burns under its span (children share the cores, so this is CPU
#: time, not wall time). The CPU a child uses after its span's last sample goes to the next
#: sample, outside the span (ADR 0019), and under load that sample can be late: at 1 s, CI saw
#: 0.53 and 0.73 s of 1.0 on 3.13 (three children and their samplers on 2 cores); the loss does
#: not grow with the work, so 2 s halves it against the tolerance.
WORK_S = 2.0
#: How far the CPU of a child's span in the store may be from what the child measured.
TOLERANCE = 0.25
#: _agent.EXIT_TIMEOUT_S, plus the time a child takes to exit once its work is done.
EXIT_BOUND_S = span_profile._agent.EXIT_TIMEOUT_S + 2.0


def exit_path_child_work(cpu_seconds):
    """Burns `cpu_seconds` of this thread's CPU time."""
    end = time.thread_time() + cpu_seconds
    while time.thread_time() < end:
        busy(0.01)


def child_main(method, output, conn, exit_status):
    """A child's whole life: start the agent where the child does not inherit it (spawn and
    forkserver start a fresh interpreter, where an application starts its agent again), burn
    WORK_S of CPU under a span, report the span, and return (or end by os._exit)."""
    if not span_profile._agent._RUNNING:
        span_profile.start(service="tests", output=output, sample_rate_hz=RATE_HZ, window_s=1,
                           overhead_budget=0)
    provider = TracerProvider()
    provider.add_span_processor(span_profile.SpanProcessor())
    tracer = provider.get_tracer("exit-paths")
    start = time.thread_time()
    with tracer.start_as_current_span("child-work") as span:
        exit_path_child_work(WORK_S)
    cpu_s = time.thread_time() - start
    conn.send((hex16(span.context.span_id), cpu_s, os.getpid(), time.monotonic()))
    conn.close()
    if exit_status is not None:
        os._exit(exit_status)


def pool_task(output):
    """One task of a pool worker: as `child_main`, returning its report instead."""
    recv, send = multiprocessing.Pipe(duplex=False)
    child_main(None, output, send, None)
    return recv.recv()


def run_children(method, output, exit_status):
    """Runs CHILDREN children at once; returns [(span_id, cpu_s, pid, exited_after_s)]."""
    ctx = multiprocessing.get_context(method)
    children = []
    for _ in range(CHILDREN):
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=child_main, args=(method, output, send, exit_status))
        p.start()
        send.close()
        children.append((p, recv))
    out = []
    for p, recv in children:
        span_id, cpu_s, pid, sent_at = recv.recv()
        p.join(30)
        exited_after = time.monotonic() - sent_at
        assert p.exitcode == (0 if exit_status is None else exit_status), "the child's own status"
        out.append((span_id, cpu_s, pid, exited_after))
    return out


@pytest.mark.parametrize("exit_status", [None, 7], ids=["returns", "os_exit_7"])
@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_each_child_keeps_its_spans_and_their_cpu(agent, method, exit_status, recwarn):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip("no %s start method here" % method)
    children = run_children(method, agent.output, exit_status)
    agent.stop()

    profiles = read_all(agent.output)
    for span_id, cpu_s, pid, exited_after in children:
        assert cpu_s >= WORK_S, "the child burned CPU under its span"
        # Bounded: the child exits within the exit timeout once its work is done.
        assert exited_after < EXIT_BOUND_S, (method, pid, exited_after)
        mine = [(p, s) for p in profiles for s in p.samples if s.labels.get("span_id") == span_id]
        assert mine, "child %d (%s): no samples of its span %s in the store" % (pid, method, span_id)
        assert {str(pid) in p.meta["resource"]["instance"] for p, _ in mine} == {True}
        assert any("exit_path_child_work" in s.functions for _, s in mine)
        profiled = sum(s.values.get("cpu", 0) for _, s in mine) / 1e9
        # The samples' CPU is the thread's own CPU time (ADR 0019); the windows must all be there
        # (the work spans two or more 1 s windows, so a lost one costs far more than this). The
        # margin is for the CPU used under the span after its last sample, which goes to the
        # next sample, outside the span: 15% failed when the load average was 16 on 2 cores.
        assert abs(profiled - cpu_s) <= TOLERANCE * cpu_s, (method, pid, profiled, cpu_s)
        spans = [r for p, _ in mine for r in p.meta["spans"] if r["span_id"] == span_id]
        assert spans and {r["name"] for r in spans} == {"child-work"}


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_pool_workers_closed_and_joined_keep_their_spans(agent, method):
    # Pool workers end by returning from their loop once the pool is closed: by os._exit
    # (fork) or sys.exit (spawn). `Pool.terminate()` (and leaving `with Pool()`) sends them
    # SIGTERM instead, which no hook can see (ADR 0028).
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip("no %s start method here" % method)
    pool = multiprocessing.get_context(method).Pool(CHILDREN)
    reports = pool.map(pool_task, [agent.output] * CHILDREN, chunksize=1)
    pool.close()
    pool.join()
    agent.stop()

    profiles = read_all(agent.output)
    for span_id, cpu_s, pid, _ in reports:
        mine = [(p, s) for p in profiles for s in p.samples if s.labels.get("span_id") == span_id]
        assert mine, "worker %d (%s): no samples of its span %s in the store" % (pid, method, span_id)
        assert {str(pid) in p.meta["resource"]["instance"] for p, _ in mine} == {True}
        profiled = sum(s.values.get("cpu", 0) for _, s in mine) / 1e9
        assert abs(profiled - cpu_s) <= TOLERANCE * cpu_s, (method, pid, profiled, cpu_s)


def test_os_exit_is_restored_when_the_agent_stops(agent):
    assert os._exit is not span_profile._hooks._ORIGINAL_OS_EXIT
    agent.stop()
    assert os._exit is span_profile._hooks._ORIGINAL_OS_EXIT
