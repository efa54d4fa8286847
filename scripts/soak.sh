#!/usr/bin/env bash
# Soak (not in CI): runs examples/python/checkout.py with the span_profile agent for
# SOAK_MINUTES (default 30) and records, every 10 s, the process's RSS, its open file
# descriptors and the CPU of the agent's threads into a CSV; then says whether each stayed
# flat (after a warm-up, the mean of the last third within 10% of the mean of the first).
#
#   scripts/soak.sh                              # 30 minutes
#   SOAK_MINUTES=10 scripts/soak.sh
#   SOAK_VENV=target/venvs/demo-3.12 scripts/soak.sh   # another venv with span_profile
#
# Other settings: SOAK_WORKERS (request threads, default 2), SOAK_RATE (Hz, default 100),
# SOAK_WINDOW_S (default 10), SOAK_BUDGET (agent CPU cap, default 0.05 of a core),
# SOAK_DIR (where the CSV, the log and the profiles go; default target/soak/<timestamp>),
# SOAK_VENV (default target/venvs/demo-3.11, which scripts/demo.sh builds from this tree, and
# which this script builds by running scripts/demo.sh when it is missing; rerun demo.sh after
# changing the Rust code).
# Exit status: 0 flat, 1 something grew, 2 too few samples, other: the run failed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MINUTES="${SOAK_MINUTES:-30}"
WORKERS="${SOAK_WORKERS:-2}"
RATE="${SOAK_RATE:-100}"
WINDOW_S="${SOAK_WINDOW_S:-10}"
BUDGET="${SOAK_BUDGET:-0.05}"
DIR="${SOAK_DIR:-$ROOT/target/soak/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$DIR"

# The demo's venv has span_profile built from this tree: scripts/demo.sh makes it.
VENV="${SOAK_VENV:-$ROOT/target/venvs/demo-3.11}"
if [[ ! -x "$VENV/bin/python" ]]; then
    echo "== no venv at $VENV: building it with scripts/demo.sh"
    PYTHON="${PYTHON:-python3.11}" scripts/demo.sh
fi
"$VENV/bin/python" -c 'import span_profile, opentelemetry.sdk' || { echo "soak: $VENV lacks span_profile or opentelemetry-sdk" >&2; exit 3; }

SECONDS_TOTAL=$((MINUTES * 60))
WARMUP=$((SECONDS_TOTAL / 10))
((WARMUP > 120)) && WARMUP=120
((WARMUP < 30)) && WARMUP=30
echo "== soak: checkout.py for ${MINUTES} min (${WORKERS} workers, ${RATE} Hz, ${WINDOW_S} s windows); output in $DIR"
"$VENV/bin/python" examples/python/checkout.py "$DIR/profiles" --seconds "$SECONDS_TOTAL" \
    --workers "$WORKERS" --rate "$RATE" --window-s "$WINDOW_S" --overhead-budget "$BUDGET" \
    >"$DIR/checkout.log" 2>&1 &
APP=$!
trap 'kill "$APP" 2>/dev/null || true' INT TERM
verdict=0
"$VENV/bin/python" scripts/soak/monitor.py "$APP" "$DIR/soak.csv" --interval 10 --warmup-s "$WARMUP" || verdict=$?
app_status=0
wait "$APP" || app_status=$?
echo "== checkout.py (exit $app_status):"
cat "$DIR/checkout.log"
files=$(find "$DIR/profiles" -name '*.pb.gz' | wc -l)
torn=$(find "$DIR/profiles" -name '.tmp-*' | wc -l)
echo "== $files windows written, $torn temp files left; CSV: $DIR/soak.csv"
if ((app_status != 0)); then
    echo "soak: the application failed" >&2
    exit 4
fi
exit "$verdict"
