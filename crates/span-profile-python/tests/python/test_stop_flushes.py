"""stop() writes the last, partial window: nothing sampled before stop() is lost, even with a
window much longer than the run."""
import span_profile

from conftest import RATE_HZ, busy
from pprof_reader import files, samples_in


def work_before_stop():
    return busy(0.5)


def test_stop_writes_the_partial_window(output):
    agent = span_profile.start(service="tests", output=output, sample_rate_hz=RATE_HZ, window_s=600)
    work_before_stop()
    assert files(output) == []
    agent.stop()
    assert len(files(output)) == 1
    assert sum(s.count for s in samples_in(output, "work_before_stop")) > 20
    agent.stop()  # a second stop is harmless
    assert not agent.running


def test_agent_as_context_manager_stops(output):
    with span_profile.start(service="tests", output=output, sample_rate_hz=RATE_HZ, window_s=600) as agent:
        work_before_stop()
    assert not agent.running
    assert len(files(output)) == 1


def test_start_after_stop_works(output):
    span_profile.start(output=output, window_s=600).stop()
    span_profile.start(output=output, window_s=600).stop()
    assert len(files(output)) == 2
