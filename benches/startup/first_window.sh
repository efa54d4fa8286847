#!/usr/bin/env bash
# From `pip install` of a built wheel to the first stored window, on a fresh venv (issue 28).
#
#   benches/startup/first_window.sh PYTHON WHEEL [WINDOW_S]
#
# Creates a venv with PYTHON, times `pip install WHEEL opentelemetry-sdk` (from PyPI or pip's
# cache), then starts an app that only imports OpenTelemetry under `span-profile run` and times
# how long until the first window is in the store. WINDOW_S (default: unset, the agent's 60 s)
# goes to SPAN_PROFILE_WINDOW_S. Windows end on wall-clock multiples of their length, so the first
# one is written between 0 and WINDOW_S seconds after the start.
set -euo pipefail
PYTHON="$1" WHEEL="$2" WINDOW_S="${3:-}"
WORK="$(mktemp -d)"
trap 'kill "${APP:-0}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
"$PYTHON" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
t0=$(date +%s.%N)
"$WORK/venv/bin/python" -m pip install -q --disable-pip-version-check "$WHEEL" opentelemetry-sdk
t1=$(date +%s.%N)
cat > "$WORK/app.py" <<'APP'
import time
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
trace.set_tracer_provider(TracerProvider())
tracer = trace.get_tracer("app")
while True:
    with tracer.start_as_current_span("work"):
        end = time.perf_counter() + 0.01
        while time.perf_counter() < end:
            pass
    time.sleep(0.01)
APP
export SPAN_PROFILE_OUTPUT="$WORK/profiles" OTEL_SERVICE_NAME=first-window
[[ -n "$WINDOW_S" ]] && export SPAN_PROFILE_WINDOW_S="$WINDOW_S"
t2=$(date +%s.%N)
"$WORK/venv/bin/span-profile" run -- "$WORK/venv/bin/python" "$WORK/app.py" &
APP=$!
until find "$WORK/profiles" -name '*.pb.gz' 2>/dev/null | grep -q .; do
    kill -0 "$APP" 2>/dev/null || { echo "the app exited before a window was written" >&2; exit 1; }
    sleep 0.05
done
t3=$(date +%s.%N)
python3 - "$t0" "$t1" "$t2" "$t3" "${WINDOW_S:-60 (default)}" <<'PY'
import sys
t0, t1, t2, t3 = map(float, sys.argv[1:5])
print("pip install (wheel + opentelemetry-sdk): %.1f s" % (t1 - t0))
print("start to first stored window (window %s s): %.1f s" % (sys.argv[5], t3 - t2))
print("pip install to first stored window: %.1f s" % (t3 - t0))
PY
