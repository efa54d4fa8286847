"""span_profile.stats(): the profiler's and the span hooks' counters."""


import span_profile

from conftest import busy


def test_counters_move_and_survive_stop(agent, tracer):
    before = span_profile.stats()
    assert before["running"] is True
    assert before["walker"].startswith("cpython ")
    for _ in range(10):
        with tracer.start_as_current_span("s"):
            pass
    busy(0.3)
    s = span_profile.stats()
    assert s["spans_started"] == before["spans_started"] + 10
    assert s["spans_ended"] == before["spans_ended"] + 10
    assert 1 <= s["span_objects"] <= 10  # listed for the sampler until nothing else holds them
    assert s["ticks"] > 0 and s["samples"] > 0
    assert s["hook_errors"] == 0
    # A walk racing a running thread may tear and is counted; it must stay rare.
    assert s["walk_errors"] <= 2, s
    agent.stop()
    after = span_profile.stats()
    assert after["running"] is False
    assert after["windows"] >= 1 and after["exported_windows"] == after["windows"]
    assert after["export_errors"] == 0 and after["dropped_windows"] == 0
    assert after["samples"] >= s["samples"]
    assert agent.stats() == after


def test_keys_are_stable():
    s = span_profile.stats()
    for key in ("ticks", "samples", "windows", "exported_windows", "dropped_windows", "export_errors",
                "walk_errors", "dropped_samples", "spans_started", "spans_ended", "hook_errors", "span_objects", "span_objects_full",
                "span_objects_evicted", "span_objects_contended_reads"):
        assert isinstance(s[key], int), key



def test_a_running_agent_reports_every_key_and_every_drop_kind(agent, tracer):
    from span_profile._agent import STATS_KEYS

    busy(0.2)
    agent.stop()
    s = agent.stats()
    missing = [k for k in STATS_KEYS if not isinstance(s.get(k), int)]
    assert not missing, missing
    # Nothing failed: a failure that stops sampling would be named here (and logged once).
    assert s["failed"] is False and s["failure"] is None
    # A sample dropped because its span changed mid-walk is a torn sample of the profiler.
    assert s["torn_samples"] == s["context_switched"], s
