"""End to end over OTLP: the checkout demo, profiled with output="otlp+http://…", sends its
windows to a receiver written in Python with the opentelemetry-proto classes (an independent
decoder). The receiver checks every dictionary invariant (zero rows, 16/8-byte links, index
bounds, unique sample identities) and the test checks what the demo must show: samples of
parse_date linked to pricing.calculate spans.

The receiver runs in target/venvs/otlp (opentelemetry-proto==1.45.2), the venv the export
crate's OTLP tests use; scripts/test.sh creates it, and so does the test under Python 3.10+
when it is missing. Without it the test skips, or fails when CI is set.
"""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
RECEIVER = os.path.join(ROOT, "crates", "span-profile-export", "tests", "python", "otlp_receiver.py")
RECEIVER_PYTHON = os.path.join(ROOT, "target", "venvs", "otlp", "bin", "python")
CHECKOUT = os.path.join(ROOT, "examples", "python", "checkout.py")


def receiver_python():
    """The venv's interpreter, made here if missing (opentelemetry-proto 1.45 needs Python
    3.10+, so under 3.9 only an existing venv is used; scripts/test.sh makes it up front)."""
    def ready():
        return os.path.exists(RECEIVER_PYTHON) and subprocess.run(
            [RECEIVER_PYTHON, "-c", "import opentelemetry.proto"], capture_output=True).returncode == 0

    if not ready() and sys.version_info >= (3, 10):
        venv = os.path.dirname(os.path.dirname(RECEIVER_PYTHON))
        subprocess.run([sys.executable, "-m", "venv", "--clear", venv])
        subprocess.run([RECEIVER_PYTHON, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "opentelemetry-proto==1.45.2"])
    if not ready():
        why = "target/venvs/otlp lacks opentelemetry-proto==1.45.2 (scripts/test.sh makes it)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return RECEIVER_PYTHON


def test_checkout_demo_reaches_an_otlp_receiver_with_span_links(tmp_path):
    python = receiver_python()
    out = tmp_path / "requests.jsonl"
    receiver = subprocess.Popen([python, RECEIVER, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        port = int(receiver.stdout.readline())
        env = dict(os.environ, OTEL_SERVICE_NAME="checkout")
        run = subprocess.run(
            [sys.executable, CHECKOUT, "otlp+http://127.0.0.1:%d" % port,
             "--seconds", "4", "--window-s", "1", "--workers", "2", "--overhead-budget", "0"],
            env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
    finally:
        receiver.terminate()
        receiver.wait(timeout=10)

    requests = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(requests) >= 3, "one request per 1 s window"
    assert requests[0]["resource"].get("service.name") == "checkout"
    types = {tuple(p["sample_type"]) for r in requests for p in r["profiles"]}
    assert ("samples", "count") in types
    cpu = [p for r in requests for p in r["profiles"] if p["period_type"] == ["cpu", "nanoseconds"]]
    assert cpu and all(p["period"] == 10_000_000 for p in cpu), "period = 1e9 / 100 Hz"

    # Every sample: [function names leaf first, trace id hex, span id hex, value, attributes].
    samples = [s for p in cpu for s in p["samples"]]
    linked = [s for s in samples if s[2] != "0" * 16]
    in_parse_date = [s for s in linked if "parse_date" in s[0]]
    assert in_parse_date, "parse_date samples carry a span link"
    assert all(len(s[1]) == 32 and len(s[2]) == 16 for s in linked)
    assert all(s[4].get("http.route") in ("/checkout", "/orders/{id}") for s in linked), linked[:3]
    assert all(s[4].get("thread.name") for s in samples)
