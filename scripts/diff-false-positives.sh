#!/usr/bin/env bash
# The diff's false-positive count (ADR 0023): PAIRS pairs of identical deploys of the checkout
# demo, DEPLOY_SECONDS each, then `span-profile diff` on each pair in both directions. A pair that
# exits 1 is a false positive. Then one deploy with an audit_log step added (to the copy of
# checkout.py in a scratch directory that every deploy runs; the tree's is not touched): its
# diff must exit 1 and list audit_log first.
#
#   scripts/demo.sh                          # once: builds target/venvs/demo-3.11
#   scripts/diff-false-positives.sh          # PAIRS=10 DEPLOY_SECONDS=10 WINDOW_S=1
#   KEEP=1 scripts/diff-false-positives.sh   # keeps the store (target/diff-fp) and re-uses it
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PAIRS="${PAIRS:-10}"
SECONDS_PER_DEPLOY="${DEPLOY_SECONDS:-10}"
WINDOW_S="${WINDOW_S:-1}"
VENV="${VENV:-$ROOT/target/venvs/demo-3.11}"
OUT="${OUT:-$ROOT/target/diff-fp}"
PY="$VENV/bin/python"
[[ -x "$PY" ]] || { echo "diff-false-positives: no $PY; run scripts/demo.sh first (or set VENV)" >&2; exit 2; }

deploy() { # version, script
    OTEL_RESOURCE_ATTRIBUTES="service.version=$1" "$PY" "$2" "$OUT" \
        --seconds "$SECONDS_PER_DEPLOY" --window-s "$WINDOW_S" --overhead-budget 0.05 >/dev/null
}

if [[ -z "${KEEP:-}" || ! -d "$OUT/checkout" ]]; then
    rm -rf "$OUT"
    # Every deploy runs the same path, a copy of the demo: frames are function and file, so the
    # regression's copy must stand where the identical deploys' copy stood.
    scratch="$(mktemp -d)"
    trap 'rm -rf "$scratch"' EXIT
    cp examples/python/checkout.py "$scratch/checkout.py"
    for i in $(seq 1 $((2 * PAIRS))); do
        echo "== deploy v$i (${SECONDS_PER_DEPLOY} s)"
        deploy "v$i" "$scratch/checkout.py"
    done
    # The regression: checkout.py with an audit_log step after payment.charge, which builds and
    # hashes a JSON record of the order (its own loop, plus json.dumps below it).
    "$PY" - examples/python/checkout.py "$scratch/checkout.py" <<'EOF'
import sys
src = open(sys.argv[1]).read()
audit = '''

def audit_log(items, total, order_id):
    """The regression: an audit record of every order, serialized and checksummed."""
    record = json.dumps({"order": order_id, "total": str(total), "items": [list(i) for i in items] * 8})
    h = 0
    for _ in range(3):
        for c in record:
            h = (h * 31 + ord(c)) & 0xFFFFFFFF
    return h
'''
step = '''            with self.tracer.start_as_current_span("payment.charge"):
                charge(total, order_id)
'''
assert step in src
src = src.replace("import hashlib\n", "import hashlib\nimport json\n", 1)
src = src.replace("\n\nclass Checkout:", audit + "\n\nclass Checkout:", 1)
src = src.replace(step, step + '''            with self.tracer.start_as_current_span("audit.log"):
                audit_log(items, total, order_id)
''', 1)
open(sys.argv[2], "w").write(src)
EOF
    echo "== deploy audit (${SECONDS_PER_DEPLOY} s, with audit_log)"
    deploy audit "$scratch/checkout.py"
fi

[[ -n "${DEPLOY_ONLY:-}" ]] && exit 0
cargo build -q --locked -p span-profile-cli
CLI="${CARGO_TARGET_DIR:-$ROOT/target}/debug/span-profile"

fp=0
runs=0
for p in $(seq 1 "$PAIRS"); do
    a="v$((2 * p - 1))"
    b="v$((2 * p))"
    for pair in "$a $b" "$b $a"; do
        set -- $pair
        code=0
        out="$("$CLI" diff "$OUT" --old "version=$1" --new "version=$2")" || code=$?
        runs=$((runs + 1))
        if [[ $code == 1 ]]; then
            fp=$((fp + 1))
            echo "FALSE POSITIVE $1 -> $2:"
            echo "$out" | sed 's/^/    /'
        elif [[ $code != 0 ]]; then
            echo "diff $1 -> $2 failed with exit $code" >&2
            exit 4
        fi
    done
done
echo "false positives: $fp of $runs diffs ($PAIRS pairs of identical deploys, both directions)"

code=0
out="$("$CLI" diff "$OUT" --old "version=v$((2 * PAIRS))" --new version=audit)" || code=$?
echo "$out"
first="$(echo "$out" | grep -m1 '^REGRESSION' || true)"
if [[ $code == 1 && "$first" == *audit_log* ]]; then
    echo "regression: flagged, audit_log listed first"
else
    echo "regression: NOT flagged first (exit $code)" >&2
    exit 1
fi
