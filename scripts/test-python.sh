#!/usr/bin/env bash
# Runs the span_profile Python specs (crates/span-profile-python/tests/python) on every CPython
# 3.9-3.13 installed under pyenv.
#
# The extension is built for each interpreter (not abi3: ADR 0012) by scripts/build-wheels.sh:
# the manylinux2014 wheels that ship, checked by `auditwheel show` (ADR 0029). Each wheel is
# installed into its interpreter's venv: target/venvs/<version>. Each venv gets opentelemetry-sdk,
# opentelemetry-instrumentation and opentelemetry-distro (the `opentelemetry-instrument` specs),
# pytest, protobuf and py-spy (the walker's oracle tests use it), plus uvloop where it installs
# (the asyncio specs skip it otherwise).
#
#   scripts/test-python.sh                 # every version found
#   SPAN_PROFILE_PYTHONS="3.11" scripts/test-python.sh
#   scripts/test-python.sh -k fork         # extra arguments go to pytest
#
# A missing version is skipped with a note, or fails the run when CI=true. Exits nonzero if any
# step or any version fails (pytest's "no tests collected", exit code 5, counts as a failure).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYENV_ROOT="${PYENV_ROOT:-$HOME/.pyenv}"
VERSIONS="${SPAN_PROFILE_PYTHONS:-3.9 3.10 3.11 3.12 3.13}"
VENVS="$ROOT/target/venvs"
WHEELS="$ROOT/target/span-profile-wheels"
TESTS="$ROOT/crates/span-profile-python/tests/python"
PIP_FLAGS=(--quiet --disable-pip-version-check)

# note, find_python
# shellcheck source=scripts/pyenv-lib.sh
source "$ROOT/scripts/pyenv-lib.sh"

# venv_for <python> <name>: a venv with the test tools, reused across runs.
venv_for() {
    local py="$1" dir="$VENVS/$2"
    if [[ ! -x "$dir/bin/python" ]]; then
        "$py" -m venv "$dir" >&2
    fi
    "$dir/bin/python" -m pip install "${PIP_FLAGS[@]}" --upgrade pip >&2
    "$dir/bin/python" -m pip install "${PIP_FLAGS[@]}" opentelemetry-sdk opentelemetry-instrumentation \
        opentelemetry-distro pytest protobuf py-spy >&2
    # Optional: the asyncio specs run on uvloop too, and skip it where it does not install.
    "$dir/bin/python" -m pip install "${PIP_FLAGS[@]}" uvloop >&2 || note "uvloop did not install for $2"
    printf '%s\n' "$dir"
}

declare -a found=() missing=()
for v in $VERSIONS; do
    if py="$(find_python "$v")"; then
        found+=("$py")
    else
        missing+=("$v")
    fi
done
if ((${#missing[@]})); then
    if [[ "${CI:-}" == "true" ]]; then
        note "missing CPython ${missing[*]} under $PYENV_ROOT/versions (required when CI=true)"
        exit 1
    fi
    note "skipping missing CPython ${missing[*]} (not under $PYENV_ROOT/versions)"
fi
if ((${#found[@]} == 0)); then
    note "no CPython 3.9-3.13 found under $PYENV_ROOT/versions"
    exit 1
fi

# One wheel per interpreter (ADR 0012: the non-abi3 build calls the span hooks through
# vectorcall), built and checked with auditwheel by the script that builds the shipped wheels.
note "building the span_profile wheels"
built=""
for py in "${found[@]}"; do built+="$(basename "$(dirname "$(dirname "$py")")" | cut -d. -f1,2) "; done
SPAN_PROFILE_PYTHONS="$built" WHEELS_DIR="$WHEELS" "$ROOT/scripts/build-wheels.sh"
# The wheel spec (test_wheel_installs.py) installs these into a fresh venv.
export SPAN_PROFILE_WHEELS="$WHEELS"

# The wheel built for an interpreter (its cpXY tag).
wheel_for() {
    local tag
    tag="$("$1" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
    ls "$WHEELS"/span_profile-*-"$tag"-*.whl
}

passed=0 failed=0
declare -a failures=()
for py in "${found[@]}"; do
    ver="$(basename "$(dirname "$(dirname "$py")")")"
    note "CPython $ver"
    if ! venv="$(venv_for "$py" "$ver")"; then
        failures+=("$ver (venv)"); failed=$((failed + 1)); continue
    fi
    "$venv/bin/python" -m pip uninstall "${PIP_FLAGS[@]}" -y span-profile >/dev/null 2>&1 || true
    if ! wheel="$(wheel_for "$py")" || ! "$venv/bin/python" -m pip install "${PIP_FLAGS[@]}" "$wheel"; then
        failures+=("$ver (install)"); failed=$((failed + 1)); continue
    fi
    rc=0
    (cd "$ROOT" && timeout 900 "$venv/bin/python" -m pytest -q -p no:cacheprovider "$TESTS" "$@") || rc=$?
    case "$rc" in
        0) passed=$((passed + 1)) ;;
        5) note "CPython $ver: pytest collected no tests"; failures+=("$ver (no tests)"); failed=$((failed + 1)) ;;
        *) failures+=("$ver (pytest exit $rc)"); failed=$((failed + 1)) ;;
    esac
done

if ((failed)); then
    note "failed: ${failures[*]}"
fi
echo "python versions: $passed passed, $failed failed"
((failed == 0))
