"""`span-profile run -- python app.py` and `python -m span_profile run app.py` profile an app that
imports only OpenTelemetry: the agent starts before the app's code, joins the app's own
TracerProvider, the flags and variables configure it, the user's sitecustomize still runs and
the app's exit status (a signal included) is the command's."""
import signal
import sys

from pprof_reader import read_all, samples_in
from zero_code import env, run, span_profile_script, write_app


def assert_profiled(output, truth_file, service):
    span_id = open(truth_file).read()
    work = samples_in(output, "app_work")
    # 0.6 s of CPU at 250 Hz is 150 samples; at least 20 even on a loaded machine, all in the span.
    assert sum(s.count for s in work) >= 20, work
    assert {s.span_id for s in work} == {span_id}
    assert {p.meta["resource"]["service"] for p in read_all(output)} == {service}


def test_span_profile_run_profiles_an_unmodified_app(tmp_path):
    app, out, truth = write_app(tmp_path), tmp_path / "profiles", tmp_path / "span.txt"
    r = run([span_profile_script(), "run", "--output", str(out), "--service", "shop", "--rate", "250", "--",
             sys.executable, app, str(truth), "7"], env=env())
    assert r.returncode == 7, r.stderr
    assert_profiled(out, truth, "shop")


def test_python_m_span_profile_run_takes_a_script(tmp_path):
    app, out, truth = write_app(tmp_path), tmp_path / "profiles", tmp_path / "span.txt"
    r = run([sys.executable, "-m", "span_profile", "run", "--output", str(out), app, str(truth), "3"],
            env=env(SPAN_PROFILE_SAMPLE_RATE_HZ="250", OTEL_SERVICE_NAME="from-otel"))
    assert r.returncode == 3, r.stderr
    assert_profiled(out, truth, "from-otel")


def test_variables_configure_the_agent_and_flags_win(tmp_path):
    app, out, truth = write_app(tmp_path), tmp_path / "profiles", tmp_path / "span.txt"
    r = run([span_profile_script(), "run", "--service", "flag", "--", sys.executable, app, str(truth)],
            env=env(SPAN_PROFILE_OUTPUT=str(out), SPAN_PROFILE_SERVICE="variable",
                    SPAN_PROFILE_SAMPLE_RATE_HZ="250"))
    assert r.returncode == 0, r.stderr
    assert_profiled(out, truth, "flag")


def test_death_by_a_signal_passes_through(tmp_path):
    app, out, truth = write_app(tmp_path), tmp_path / "profiles", tmp_path / "span.txt"
    r = run([span_profile_script(), "run", "--output", str(out), "--", sys.executable, app, str(truth), "SIGTERM"],
            env=env())
    assert r.returncode == -signal.SIGTERM, (r.returncode, r.stderr)


def test_the_users_own_sitecustomize_still_runs(tmp_path):
    app, out, truth = write_app(tmp_path), tmp_path / "profiles", tmp_path / "span.txt"
    user = tmp_path / "user"
    user.mkdir()
    marker = tmp_path / "marker.txt"
    (user / "sitecustomize.py").write_text("open(%r, 'w').write('user sitecustomize ran')\n" % str(marker))
    r = run([span_profile_script(), "run", "--output", str(out), "--rate", "250", "--", sys.executable, app,
             str(truth)], env=env(PYTHONPATH=str(user)))
    assert r.returncode == 0, r.stderr
    assert marker.read_text() == "user sitecustomize ran"
    assert_profiled(out, truth, "unknown_service")


def test_a_program_that_is_not_found_says_so(tmp_path):
    r = run([span_profile_script(), "run", "--", "no-such-program-xyz"], env=env())
    assert r.returncode == 4
    assert "could not start no-such-program-xyz" in r.stderr and "PATH" in r.stderr
