"""`opentelemetry-instrument python app.py`, with span_profile installed, profiles with spans
through the `span_profile` instrumentor; OTEL_PYTHON_DISABLED_INSTRUMENTATIONS turns it off."""
import os
import shutil
import sys

import pytest

from pprof_reader import files, samples_in
from zero_code import INSTRUMENTED_APP, env, run, write_app


def instrument_command():
    path = os.path.join(os.path.dirname(sys.executable), "opentelemetry-instrument")
    path = path if os.path.exists(path) else shutil.which("opentelemetry-instrument")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("opentelemetry-instrument is not installed (scripts/test-python.sh installs it)")
        pytest.skip("opentelemetry-instrument is not installed")
    return path


# No exporters: the spans only need to exist.
OTEL_QUIET = {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none"}


def test_opentelemetry_instrument_profiles_with_spans(tmp_path):
    app, out, truth = write_app(tmp_path, INSTRUMENTED_APP), tmp_path / "profiles", tmp_path / "span.txt"
    r = run([instrument_command(), sys.executable, app, str(truth)],
            env=env(SPAN_PROFILE_OUTPUT=str(out), SPAN_PROFILE_SAMPLE_RATE_HZ="250", OTEL_SERVICE_NAME="inst",
                    **OTEL_QUIET))
    assert r.returncode == 0, r.stderr
    span_id = truth.read_text()
    work = samples_in(out, "app_work")
    assert sum(s.count for s in work) >= 20, (work, r.stderr)  # 150 at 250 Hz unloaded
    assert {s.span_id for s in work} == {span_id}


def test_disabled_instrumentations_turn_it_off(tmp_path):
    app, out, truth = write_app(tmp_path, INSTRUMENTED_APP), tmp_path / "profiles", tmp_path / "span.txt"
    r = run([instrument_command(), sys.executable, app, str(truth)],
            env=env(SPAN_PROFILE_OUTPUT=str(out), OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="span_profile",
                    **OTEL_QUIET))
    assert r.returncode == 0, r.stderr
    assert truth.read_text()  # the app ran
    assert files(out) == []
