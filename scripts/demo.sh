#!/usr/bin/env bash
# The one-command demo, from a fresh clone:
#   1. a venv (python3.11 unless $PYTHON says otherwise) with opentelemetry-sdk,
#   2. the span_profile package built from this tree and installed into it,
#   3. examples/python/checkout.py for ~15 s: a checkout service whose pricing.calculate span is
#      slow because of date parsing, profiled to ./profiles (5 s windows),
#   4. the report for the slowest pricing.calculate span, by the span-profile CLI.
#
#   scripts/demo.sh                      # PYTHON=python3.12 scripts/demo.sh for another version
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3.11}"
if ! command -v "$PYTHON" >/dev/null 2>&1; then
    # pyenv installs without shims on PATH: take its newest 3.11.
    for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.11.*/bin/python; do
        [[ -x "$p" ]] && PYTHON="$p"
    done
fi
command -v "$PYTHON" >/dev/null 2>&1 || { echo "demo: $PYTHON not found; set PYTHON=/path/to/python3.9+" >&2; exit 1; }

VENV="$ROOT/target/venvs/demo-$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
OUT="./profiles"

echo "== venv $VENV"
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "maturin>=1.5,<2" opentelemetry-sdk

echo "== building and installing span_profile"
rm -rf "$ROOT/target/demo-wheels"
# The Cargo profile (`wheel`: release with LTO) comes from pyproject.toml.
"$VENV/bin/maturin" build --quiet -m crates/span-profile-python/Cargo.toml \
    -i "$VENV/bin/python" --out "$ROOT/target/demo-wheels"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps \
    "$ROOT"/target/demo-wheels/span_profile-*.whl

echo "== running examples/python/checkout.py (15 s) -> $OUT"
rm -rf "$OUT/checkout"
# A 5% CPU cap instead of the default 1%: on a small, busy machine 1% stretches the sampling
# interval enough to leave a 150 ms span with only a few samples.
"$VENV/bin/python" examples/python/checkout.py "$OUT" --seconds 15 --window-s 5 --overhead-budget 0.05

echo "== which lines made the slowest pricing.calculate slow"
cargo run -q -p span-profile-cli -- top "$OUT" --slowest pricing.calculate
