#!/usr/bin/env bash
# Fuzz smoke: builds every cargo-fuzz target in fuzz/ and runs each for FUZZ_SECONDS seconds
# (default 10). Installs cargo-fuzz if it is missing. cargo-fuzz needs nightly features; the
# stable toolchain provides them with RUSTC_BOOTSTRAP=1. Exits nonzero if a target fails to
# build or finds a crash (the reproducer is left in fuzz/artifacts/<target>/).
#
#   scripts/fuzz-smoke.sh                       # every target, 10 s each
#   FUZZ_SECONDS=300 scripts/fuzz-smoke.sh      # a longer run
#   scripts/fuzz-smoke.sh registry_ops labels   # some targets only
#
# Corpora grow in fuzz/corpus/<target>/ (not committed); fuzz/seeds/<target>/ holds committed
# starting inputs. Per target it prints the executions and the executions per second.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT/fuzz"
export RUSTC_BOOTSTRAP=1
SECS="${FUZZ_SECONDS:-10}"
NICE=(nice -n "${FUZZ_NICE:-19}")

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

if (($#)); then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi
echo "== building ${#targets[@]} fuzz targets"
"${NICE[@]}" cargo fuzz build

failed=()
printf '%-18s %12s %10s %s\n' target executions exec/s result
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t"
    dirs=("corpus/$t")
    [[ -d "seeds/$t" ]] && dirs+=("seeds/$t")
    log="$(mktemp)"
    status=0
    "${NICE[@]}" cargo fuzz run "$t" "${dirs[@]}" -- \
        -max_total_time="$SECS" -print_final_stats=1 -close_fd_mask=3 >"$log" 2>&1 || status=$?
    runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
    rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
    if ((status == 0)); then
        printf '%-18s %12s %10s %s\n' "$t" "${runs:-?}" "${rate:-?}" ok
    else
        printf '%-18s %12s %10s %s\n' "$t" "${runs:-?}" "${rate:-?}" "FAILED (exit $status)"
        grep -E "panicked|ERROR|SUMMARY|Test unit written|assert" "$log" | head -20 >&2 || tail -30 "$log" >&2
        failed+=("$t")
    fi
    rm -f "$log"
done
if ((${#failed[@]})); then
    echo "fuzz smoke: ${#failed[@]} target(s) failed: ${failed[*]} (reproduce: cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run <target> artifacts/<target>/<file>)" >&2
    exit 1
fi
echo "fuzz smoke: ${#targets[@]} targets, ${SECS} s each, no crash"
