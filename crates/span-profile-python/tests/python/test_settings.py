"""Settings: every argument has a default, environment variables fill what is not passed, and
bad values fail at start() with a message that says what to change."""
import os

import pytest

import span_profile


def test_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    agent = span_profile.start()
    try:
        assert agent.output == "./profiles"
        assert agent.sample_rate_hz == 100 and agent.window_s == 60
        assert agent.service == "unknown_service"
        assert os.path.isdir(tmp_path / "profiles")
    finally:
        agent.stop()


def test_environment_fills_unset_arguments(output, monkeypatch):
    monkeypatch.setenv("SPAN_PROFILE_OUTPUT", output)
    monkeypatch.setenv("SPAN_PROFILE_SAMPLE_RATE_HZ", "50")
    monkeypatch.setenv("SPAN_PROFILE_WINDOW_S", "2.5")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-otel")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.instance.id=i-1,deployment.environment=prod")
    agent = span_profile.start()
    try:
        assert (agent.output, agent.sample_rate_hz, agent.window_s) == (output, 50, 2.5)
        assert agent.service == "from-otel" and agent.instance == "i-1"
    finally:
        agent.stop()
    monkeypatch.setenv("SPAN_PROFILE_SERVICE", "from-span-profile")
    with span_profile.start(sample_rate_hz=20) as agent:
        assert agent.service == "from-span-profile" and agent.sample_rate_hz == 20
    with span_profile.start(service="explicit", instance="mine") as agent:
        assert agent.service == "explicit" and agent.instance == "mine"


@pytest.mark.parametrize("kwargs, error, words", [
    ({"sample_rate_hz": 0}, ValueError, "sample_rate_hz=0 (from argument sample_rate_hz) is out of range; use 1 to"),
    ({"sample_rate_hz": 20000}, ValueError, "use 1 to 10000"),
    ({"sample_rate_hz": 9.5}, ValueError, "whole number"),
    ({"sample_rate_hz": "fast"}, ValueError, "is not an integer"),
    ({"sample_rate_hz": True}, TypeError, "must be a number"),
    ({"window_s": 0}, ValueError, "window_s=0.0 (from argument window_s) is out of range; use 0.01 to 3600"),
    ({"window_s": float("nan")}, ValueError, "NaN"),
    ({"window_s": [1]}, TypeError, "must be a number, not list"),
    ({"output": ""}, ValueError, "output is empty"),
    ({"output": 42}, TypeError, "output must be a directory path"),
    ({"output": "ftp://host/x"}, ValueError, "unknown scheme \"ftp\""),
    ({"output": "pyroscope+ftp://localhost:4040"}, ValueError, "unknown scheme"),
    ({"output": "file://relative"}, ValueError, "needs an absolute path"),
    ({"service": ""}, ValueError, "service (from argument service) is empty"),
    ({"service": 3}, TypeError, "service must be a str"),
    ({"overhead_budget": 2}, ValueError, "overhead_budget=2.0 (from argument overhead_budget) is out of range"),
    ({"colour": "blue"}, TypeError, "unexpected setting(s) colour; known settings"),
])
def test_bad_arguments_are_clear_errors(output, kwargs, error, words):
    kwargs.setdefault("output", output)
    with pytest.raises(error) as e:
        span_profile.start(**kwargs)
    assert words in str(e.value)
    assert span_profile.stats()["running"] is False


def test_bad_environment_names_the_variable(output, monkeypatch):
    monkeypatch.setenv("SPAN_PROFILE_SAMPLE_RATE_HZ", "lots")
    with pytest.raises(ValueError, match="SPAN_PROFILE_SAMPLE_RATE_HZ"):
        span_profile.start(output=output)


def test_unwritable_output_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ValueError, match="cannot be created.*writable directory"):
        span_profile.start(output=str(blocker / "profiles"))


def test_only_one_agent_at_a_time(agent, output):
    with pytest.raises(RuntimeError, match="already running.*call agent.stop"):
        span_profile.start(output=output)


def test_file_url_output(tmp_path):
    with span_profile.start(output="file://" + str(tmp_path / "p"), window_s=600):
        pass
    assert os.path.isdir(tmp_path / "p")
