#!/usr/bin/env bash
# Builds the span_profile wheels: manylinux2014 (glibc 2.17), x86_64, one per CPython 3.9-3.13
# found under pyenv, with the span-profile command linked into the extension (ADR 0029), and
# checks each with `auditwheel show`.
#
# The glibc 2.17 floor comes from linking with zig (maturin --zig, through the `ziglang` pip
# package), so no manylinux container is needed. A build venv holds maturin, ziglang and
# auditwheel. aarch64 would need the Rust target aarch64-unknown-linux-gnu, which this machine
# cannot install; only x86_64 is built.
#
#   scripts/build-wheels.sh                         # every version found, into target/wheels
#   SPAN_PROFILE_PYTHONS="3.12" scripts/build-wheels.sh
#   WHEELS_DIR=/tmp/w scripts/build-wheels.sh
#
# Exits nonzero if a build fails, a version is missing when CI=true, or auditwheel does not
# find a wheel manylinux2014-compatible.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYENV_ROOT="${PYENV_ROOT:-$HOME/.pyenv}"
VERSIONS="${SPAN_PROFILE_PYTHONS:-3.9 3.10 3.11 3.12 3.13}"
WHEELS_DIR="${WHEELS_DIR:-$ROOT/target/wheels}"
BUILD_VENV="${BUILD_VENV:-$ROOT/target/venvs/wheel-build}"
PIP_FLAGS=(--quiet --disable-pip-version-check)
# Pinned so that every run links the same way.
TOOLS=("maturin>=1.5,<2" "ziglang==0.13.0" "auditwheel==6.8.2")

# note, find_python
# shellcheck source=scripts/pyenv-lib.sh
source "$ROOT/scripts/pyenv-lib.sh"

interpreters=() missing=()
for v in $VERSIONS; do
    if py="$(find_python "$v")"; then interpreters+=(-i "$py"); else missing+=("$v"); fi
done
if ((${#missing[@]})); then
    if [[ "${CI:-}" == "true" ]]; then
        note "missing CPython ${missing[*]} under $PYENV_ROOT/versions (required when CI=true)"
        exit 1
    fi
    note "skipping missing CPython ${missing[*]}"
fi
if ((${#interpreters[@]} == 0)); then
    note "no CPython 3.9-3.13 found under $PYENV_ROOT/versions"
    exit 1
fi

if [[ ! -x "$BUILD_VENV/bin/python" ]]; then
    base="$(find_python 3.12 || find_python 3.11 || command -v python3)"
    "$base" -m venv "$BUILD_VENV"
fi
"$BUILD_VENV/bin/python" -m pip install "${PIP_FLAGS[@]}" "${TOOLS[@]}"
# maturin finds zig through the ziglang package's `python -m ziglang`.
export PATH="$BUILD_VENV/bin:$PATH"

rm -rf "$WHEELS_DIR"
note "building the wheels (manylinux2014, zig) into $WHEELS_DIR"
start=$SECONDS
maturin build --locked --zig --compatibility manylinux2014 --target x86_64-unknown-linux-gnu \
    -m "$ROOT/crates/span-profile-python/Cargo.toml" "${interpreters[@]}" --out "$WHEELS_DIR"
note "built in $((SECONDS - start)) s"

status=0
for whl in "$WHEELS_DIR"/*.whl; do
    report="$(auditwheel show "$whl")"
    printf '%s\n%s\n' "$(basename "$whl") ($(du -h "$whl" | cut -f1))" "$report"
    if ! grep -q 'manylinux_2_17_x86_64' <<<"$report"; then
        note "$(basename "$whl") is not manylinux2014 (glibc 2.17) compatible"
        status=1
    fi
done
exit "$status"
