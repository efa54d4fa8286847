"""The walker copies interpreter memory in-process, guarded by a SIGSEGV/SIGBUS handler that
catches only faults of its own copy instruction (ADR 0009).

- By default every tick's reads are guarded copies (no system call per read).
- A fault handler installed after start() (faulthandler, signal.signal) replaces ours: from the
  next tick the walker reads through process_vm_readv, and samples keep coming. When ours is
  restored, guarded copies resume.
- A real crash of the program still reaches faulthandler and kills the process.
- SPAN_PROFILE_MEMORY_READS=syscall turns the guarded copies off; a bad value is a clear error.

The handler cases run in a fresh interpreter: they change process-wide signal handlers, and
pytest has its own faulthandler installed."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

import span_profile
from conftest import busy


def run(code, env=None, timeout=60):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full_env, timeout=timeout)


def guarded_busy(seconds):
    return busy(seconds)


def test_reads_are_guarded_copies_by_default(agent):
    guarded_busy(0.5)
    s = agent.stats()
    assert s["walker_ticks"] > 20
    assert s["walker_direct_ticks"] == s["walker_ticks"]
    assert s["walker_samples"] > 20


PHASES = """
    import faulthandler, threading, time, span_profile
    from opentelemetry.sdk.trace import TracerProvider

    provider = TracerProvider()
    provider.add_span_processor(span_profile.SpanProcessor())
    tracer = provider.get_tracer("t")

    def burn(seconds):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            sum(i * i for i in range(500))

    agent = span_profile.start(service="t", output=OUT, sample_rate_hz=200, window_s=1, overhead_budget=0)
    def phase():
        before = agent.stats()
        with tracer.start_as_current_span("phase"):
            burn(0.6)
        after = agent.stats()
        return (after["walker_ticks"] - before["walker_ticks"],
                after["walker_direct_ticks"] - before["walker_direct_ticks"],
                after["walker_samples"] - before["walker_samples"])
    first = phase()
    REPLACE
    second = phase()
    RESTORE
    third = phase()
    agent.stop()
    print(first, second, third)
"""


@pytest.mark.parametrize("how", ["faulthandler", "signal.signal"])
def test_a_handler_installed_after_start_switches_reads_to_the_syscall_until_ours_is_back(tmp_path, how):
    # faulthandler.disable() puts back the handler it found (ours). signal.signal cannot: it
    # returns SIG_DFL for a handler installed from C, so "restoring" it leaves ours out.
    if how == "faulthandler":
        replace, restore, back = "faulthandler.enable()", "faulthandler.disable()", True
    else:
        replace = "import signal; old = signal.signal(signal.SIGSEGV, lambda *a: None)"
        restore, back = "signal.signal(signal.SIGSEGV, old)", False
    code = PHASES.replace("OUT", repr(str(tmp_path))).replace("REPLACE", replace).replace("RESTORE", restore)
    p = run(code)
    assert p.returncode == 0, p.stderr
    first, second, third = (tuple(int(x) for x in part.strip("() ").split(",")) for part in
                            p.stdout.strip().replace(") (", ")|(").split("|"))
    # (ticks, direct ticks, samples) in each phase.
    assert first[1] >= first[0] - 1 and first[0] > 20, first
    assert second[0] > 20 and second[1] <= 2, second  # at most the tick in flight at the switch
    assert second[2] > 20, "sampling goes on through the syscall"
    assert third[0] > 20 and third[2] > 20, third
    if back:
        assert third[1] >= third[0] - 2, third
    else:
        assert third[1] == 0, third


def test_a_real_crash_still_reaches_faulthandler(tmp_path):
    code = """
        import ctypes, faulthandler, time, span_profile
        faulthandler.enable()
        agent = span_profile.start(service="t", output=%r, sample_rate_hz=200, window_s=1, overhead_budget=0)
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:
            pass
        assert agent.stats()["walker_direct_ticks"] > 10
        ctypes.string_at(1)
    """ % str(tmp_path)
    p = run(code)
    assert p.returncode == -signal.SIGSEGV, (p.returncode, p.stderr)
    assert "Fatal Python error: Segmentation fault" in p.stderr, p.stderr


def test_syscall_reads_on_request_and_a_bad_value_says_what_is_accepted(monkeypatch, output):
    monkeypatch.setenv("SPAN_PROFILE_MEMORY_READS", "syscall")
    a = span_profile.start(service="t", output=output, sample_rate_hz=200, window_s=1, overhead_budget=0)
    try:
        guarded_busy(0.3)
        s = a.stats()
        assert s["walker_ticks"] > 10 and s["walker_direct_ticks"] == 0
        assert s["walker_samples"] > 10
    finally:
        a.stop()
    monkeypatch.setenv("SPAN_PROFILE_MEMORY_READS", "mmap")
    with pytest.raises(ValueError, match="use `guarded`"):
        span_profile.start(service="t", output=output)
