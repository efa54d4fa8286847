#!/usr/bin/env bash
# The whole test suite, from a fresh clone of this kind of machine (what .ci/run calls):
#   1. installs what the tests need and the machine may lack: Go (for `go tool pprof`),
#      Chromium (flame-graph check); the Python side installs its own venvs;
#   2. cargo fmt --check and clippy -D warnings on every target and feature (every cargo
#      command --locked: Cargo.lock is what is tested);
#   3. the Rust tests (nextest, each test in its own process), the docs (-D warnings) and the
#      doctests;
#   4. the criterion benches once each, as a smoke test (not timed);
#   5. the Python specs on every CPython 3.9-3.13 (scripts/test-python.sh), run before the
#      Rust tests because those use the venvs it builds. Their wheels are the manylinux2014
#      ones that ship (scripts/build-wheels.sh), and `auditwheel show` checks each.
#
#   scripts/test.sh              # everything
#   SKIP_PYTHON=1 scripts/test.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export RUSTFLAGS="${RUSTFLAGS:--Dwarnings}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# CI builds once from a clean clone: incremental state would only take disk (1.3 GB).
if [[ -n "${CI:-}" ]]; then
    export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
fi
stages=0
# Each stage's heading says how much disk is left, so a run that fills the disk says where.
step() { printf '\n==== %s  [%s free]\n' "$*" "$(df -h --output=avail "$ROOT" 2>/dev/null | tail -1 | tr -d ' ')"; }
done_stage() { stages=$((stages + 1)); }

need_apt=()
command -v go >/dev/null 2>&1 || need_apt+=(golang-go)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
if ((${#need_apt[@]})); then
    step "installing ${need_apt[*]} (apt)"
    if [[ $(id -u) -eq 0 ]]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
    else
        echo "test.sh: please install ${need_apt[*]} (apt-get install ${need_apt[*]})" >&2
        exit 1
    fi
fi

# Independent parties the tests check against, each in its own venv made by a 3.11+ CPython
# (the Python matrix also runs under 3.9, which these packages no longer support):
#   tools: py-spy, the oracle of the CPython walker's Rust tests (walker_real.rs);
#   otlp:  opentelemetry-proto, the decoder behind the OTLP receiver (Rust and Python tests).
base_py="$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[1-3].*/bin/python 2>/dev/null | head -1)"
base_py="${base_py:-python3}"
tool_venv() { # name file-it-must-have package...
    local dir="$ROOT/target/venvs/$1" must="$2"
    shift 2
    if ! compgen -G "$dir/$must" >/dev/null; then
        step "installing $* into $dir"
        "$base_py" -m venv --clear "$dir"
        "$dir/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
    fi
}
if [[ -z "${PY_SPY:-}" ]]; then
    tool_venv tools bin/py-spy py-spy
    export PY_SPY="$ROOT/target/venvs/tools/bin/py-spy"
fi
tool_venv otlp "lib/python3.1*/site-packages/opentelemetry/proto" "opentelemetry-proto==1.45.2"

step "cargo fmt --check"
cargo fmt --all -- --check
done_stage

step "cargo clippy (all targets, all features) -D warnings"
cargo clippy --locked --workspace --all-targets --all-features -- -D warnings
done_stage

# The Python specs first: they build the span_profile wheel and the venvs under target/venvs
# that some Rust tests use (the `overhead` command's end-to-end test).
if [[ -z "${SKIP_PYTHON:-}" ]]; then
    step "Python specs on CPython 3.9-3.13 (wheels built and checked with auditwheel show)"
    scripts/test-python.sh
    done_stage
fi

step "Rust tests"
FEATURES=(--features span-profile-core/otel)
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --locked --workspace "${FEATURES[@]}" --no-fail-fast
else
    cargo test --locked --workspace "${FEATURES[@]}" --no-fail-fast
fi
done_stage

step "native walker with frame pointers (full call paths)"
RUSTFLAGS="$RUSTFLAGS -C force-frame-pointers=yes" CARGO_TARGET_DIR="$ROOT/target/fp" \
    cargo test --locked -p span-profile-native
done_stage

step "cargo doc (libraries, -D warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --locked --workspace --lib --no-deps --all-features
done_stage

step "doctests"
cargo test --locked --workspace --doc "${FEATURES[@]}"
done_stage

step "bench smoke (each bench once, untimed)"
cargo test --locked -p span-profile-benches --benches
done_stage


# ---- fixed-load overhead smoke (issue 29) ---------------------------------------------------
# One short pass of benches/overhead/fixed_load.py per arm and service, untimed: every arm must
# start, serve and count every request it was sent. Needs the wheels of the Python stage and
# ../shared/bench; the peers install into target/venvs/bench-<version>, and a peer that does not
# install is skipped (with a note) by fixed_load.py itself. SKIP_OVERHEAD_SMOKE=1 skips it.
if [[ -z "${SKIP_OVERHEAD_SMOKE:-}" ]]; then
    bench_dir="$ROOT/../shared/bench"
    bench_tag="$("$base_py" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')"
    bench_wheel="$(ls "$ROOT"/target/span-profile-wheels/span_profile-*-"$bench_tag"-*.whl 2>/dev/null | head -1 || true)"
    if [[ ! -f "$bench_dir/workload.py" ]]; then
        # The shared bench lives beside the clone on machines of this kind, not in the tree.
        step "fixed-load overhead smoke: SKIPPED, no ../shared/bench/workload.py beside this clone"
    elif [[ -z "$bench_wheel" && -n "${CI:-}" ]]; then
        echo "test.sh: the overhead smoke needs the $bench_tag wheel the Python stage builds" >&2
        exit 1
    elif [[ -z "$bench_wheel" ]]; then
        step "fixed-load overhead smoke: skipped (no $bench_tag wheel: run the Python stage)"
    else
        step "fixed-load overhead smoke (one short pass per arm)"
        bench_venv="$ROOT/target/venvs/bench-${bench_tag}"
        tool_venv "bench-${bench_tag}" "bin/py-spy" opentelemetry-sdk fastapi uvicorn py-spy
        "$bench_venv/bin/python" -m pip install --quiet --disable-pip-version-check pyroscope-io pyroscope-otel \
            || echo "note: pyroscope-io did not install; its arm is skipped" >&2
        "$bench_venv/bin/python" -m pip install --quiet --disable-pip-version-check ddtrace \
            || echo "note: ddtrace did not install; its arm is skipped" >&2
        "$bench_venv/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$bench_wheel"
        timeout 600 "$bench_venv/bin/python" benches/overhead/fixed_load.py --smoke \
            --python "$bench_venv/bin/python" --bench "$bench_dir"
        # Side by side (--concurrent): an arm and a none run at once, paired.
        timeout 300 "$bench_venv/bin/python" benches/overhead/fixed_load.py --smoke --concurrent \
            --services threads --arms none span_profile-full --python "$bench_venv/bin/python" --bench "$bench_dir"
        # Two builds side by side (--against; here the same build twice): the second beside the first.
        timeout 300 "$bench_venv/bin/python" benches/overhead/fixed_load.py --smoke --concurrent \
            --services threads --arms span_profile-full --python "$bench_venv/bin/python" \
            --against "$bench_venv/bin/python" --bench "$bench_dir"
        done_stage
    fi
fi


# ---- fuzz smoke (issue 9, reliability) --------------------------------------------------------
# Builds every cargo-fuzz target in fuzz/ and runs each for FUZZ_SECONDS (default 10) seconds;
# a crash fails the suite. SKIP_FUZZ=1 skips it (the first build takes several minutes).
if [[ -z "${SKIP_FUZZ:-}" ]]; then
    step "fuzz smoke (each target ${FUZZ_SECONDS:-10} s)"
    scripts/fuzz-smoke.sh
    done_stage
fi

printf '\nsuite: %d passed, 0 failed\n' "$stages"
