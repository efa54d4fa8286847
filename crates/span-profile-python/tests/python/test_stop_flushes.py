"""stop() writes the last, partial window: nothing sampled before stop() is lost, even with a
window much longer than the run."""
import span_profile

from conftest import RATE_HZ, busy, clear_of_window_edge
from pprof_reader import files, samples_in


WINDOW_S = 600


def work_before_stop():
    return busy(0.5)


def test_stop_writes_the_partial_window(output):
    clear_of_window_edge(WINDOW_S, 5)
    agent = span_profile.start(service="tests", output=output, sample_rate_hz=RATE_HZ, window_s=WINDOW_S)
    work_before_stop()
    assert files(output) == []
    agent.stop()
    assert len(files(output)) == 1
    assert sum(s.count for s in samples_in(output, "work_before_stop")) > 20
    agent.stop()  # a second stop is harmless
    assert not agent.running


def test_agent_as_context_manager_stops(output):
    clear_of_window_edge(WINDOW_S, 5)
    with span_profile.start(service="tests", output=output, sample_rate_hz=RATE_HZ, window_s=WINDOW_S) as agent:
        work_before_stop()
    assert not agent.running
    assert len(files(output)) == 1


def test_start_after_stop_works(output):
    clear_of_window_edge(WINDOW_S, 5)
    span_profile.start(output=output, window_s=WINDOW_S).stop()
    span_profile.start(output=output, window_s=WINDOW_S).stop()
    assert len(files(output)) == 2
