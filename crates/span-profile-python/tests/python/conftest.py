import os
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider

import span_profile

#: High enough that a short burn yields hundreds of samples, low enough for 2 shared cores.
RATE_HZ = 250


#: Variables of the test suite, not of the agent: the wheels' directory (test_wheel_installs.py)
#: and the versions under test.
SUITE_VARIABLES = ("SPAN_PROFILE_WHEELS", "SPAN_PROFILE_PYTHONS")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """Every test starts without the variables that configure the agent (those that configure
    the suite itself, such as where scripts/test-python.sh put the wheels, are kept)."""
    for k in list(os.environ):
        if k in SUITE_VARIABLES:
            continue
        if k.startswith("SPAN_PROFILE_") or k in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
            monkeypatch.delenv(k)


@pytest.fixture
def tracer():
    """A tracer whose provider has the span_profile processor (not the global provider)."""
    provider = TracerProvider()
    provider.add_span_processor(span_profile.SpanProcessor())
    return provider.get_tracer("span-profile-tests")


@pytest.fixture
def output(tmp_path):
    return str(tmp_path / "profiles")


@pytest.fixture
def agent(output):
    """A running agent with 1 s windows and no CPU cap (so the rate is what the test asked for);
    stopped, and so flushed, at the end if the test did not."""
    a = span_profile.start(service="tests", output=output, sample_rate_hz=RATE_HZ, window_s=1, overhead_budget=0)
    yield a
    a.stop()


def clear_of_window_edge(window_s, seconds):
    """Returns once the next wall-clock boundary of `window_s`-second windows is more than
    `seconds` away, sleeping past it if it is nearer. Windows are aligned to the wall clock
    (10:40:00, 10:50:00 for 600 s), so a run that straddles a boundary is rightly two windows: a
    test that counts windows must not straddle one."""
    to_edge = window_s - time.time() % window_s
    if to_edge <= seconds:
        time.sleep(to_edge + 0.05)


def busy(seconds):
    """Burns CPU in the caller's frame for `seconds` (call it from a uniquely named function)."""
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        for i in range(500):
            x += i * i
    return x


def named_function(name):
    """A new function called `name` that burns CPU for its `seconds` argument, so samples show
    exactly which caller ran (one name per thread or task)."""
    ns = {"busy": busy}
    exec("def %s(seconds):\n    return busy(seconds)\n" % name, ns)
    return ns[name]


def by_span(samples):
    """{span_id or None: sample count}."""
    out = {}
    for s in samples:
        out[s.span_id] = out.get(s.span_id, 0) + s.count
    return out


def hex16(span_id):
    return format(span_id, "016x")


def records_of(agent, span):
    """The span's records in the windows the agent wrote, oldest first."""
    from pprof_reader import read_all

    sid = hex16(span.context.span_id)
    return [r for p in read_all(agent.output) for r in p.meta["spans"] if r["span_id"] == sid]
