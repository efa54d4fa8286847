"""A built wheel installs into a fresh venv with no compiler on PATH, and gives both the
`span-profile` command and `python -m span_profile` (ADR 0029); its first window is stored
seconds after `pip install` (the figure is printed: run pytest with -s to see it)."""
import glob
import os
import shutil
import subprocess
import sys
import time

import pytest

from zero_code import APP

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def built_wheel():
    tag = "cp%d%d" % sys.version_info[:2]
    wheels_dir = os.environ.get("SPAN_PROFILE_WHEELS") or os.path.join(ROOT, "target", "wheels")
    found = sorted(glob.glob(os.path.join(wheels_dir, "span_profile-*-%s-*.whl" % tag)))
    if not found:
        if os.environ.get("CI") == "true":
            pytest.fail("no %s wheel in %s (scripts/build-wheels.sh builds them)" % (tag, wheels_dir))
        pytest.skip("no %s wheel in %s" % (tag, wheels_dir))
    return found[-1]


def test_a_wheel_gives_the_command_and_the_module_without_a_compiler(tmp_path):
    wheel = built_wheel()
    assert "manylinux_2_17_x86_64" in os.path.basename(wheel)
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    bin_dir = str(venv / "bin")
    env = {"PATH": bin_dir, "HOME": str(tmp_path), "SPAN_PROFILE_WINDOW_S": "1"}
    for compiler in ("cc", "gcc", "clang", "cargo", "rustc"):
        assert shutil.which(compiler, path=bin_dir) is None
    t0 = time.monotonic()
    subprocess.run([os.path.join(bin_dir, "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    wheel], check=True, env=env, timeout=600)
    installed = time.monotonic()

    out = tmp_path / "profiles"
    app = tmp_path / "app.py"
    app.write_text(APP)
    proc = subprocess.Popen(["span-profile", "run", "--output", str(out), "--service", "fresh", "--",
                             "python", str(app), str(tmp_path / "span.txt")], env=env)
    first = None
    while first is None and time.monotonic() - installed < 60:
        if glob.glob(str(out / "**" / "*.pb.gz"), recursive=True):
            first = time.monotonic()
        time.sleep(0.02)
    assert proc.wait(timeout=60) == 0
    assert first is not None, "no window stored within 60 s of the install"
    print("\nfigure: pip install %.1f s; first stored window %.1f s after the install began"
          % (installed - t0, first - t0))

    for argv in (["span-profile", "--help"], ["python", "-m", "span_profile", "--help"]):
        r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "Usage: span-profile" in r.stdout and "run" in r.stdout and "spans" in r.stdout
    r = subprocess.run(["span-profile", "ls", str(out)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and "fresh" in r.stdout, r.stdout + r.stderr
