#!/usr/bin/env bash
# The Pyroscope exporter's figures with same-run baselines (benches/benches/export_pyroscope.rs):
#   throughput: 10k-stack windows to a live capture server (pyroscope) vs the file store (file);
#   idle:       agent CPU at one window a second with the server down vs up vs the file store.
# Builds the bench once, copies the binary (so edits in the tree cannot change it mid-run),
# then runs ROUNDS rounds, each arm once per round in the same order (A B A B ...), every run
# wrapped in `flock /tmp/bench.lock` so no other benchmark runs at the same time. Prints each
# RESULT line, `uptime` before every round, and medians and ratios at the end.
#
#   scripts/bench-pyroscope.sh                 # 5 rounds, 30 windows, 20 s idle runs
#   ROUNDS=3 WINDOWS=20 SECONDS_IDLE=10 scripts/bench-pyroscope.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ROUNDS="${ROUNDS:-5}"
WINDOWS="${WINDOWS:-30}"
SECONDS_IDLE="${SECONDS_IDLE:-20}"
OUT="${OUT:-$ROOT/target/bench-pyroscope-$(date +%Y%m%d-%H%M%S).txt}"

exe="$(cargo bench -p span-profile-benches --bench export_pyroscope --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "export_pyroscope":
        print(m["executable"])')"
bin="$(mktemp -d)/export_pyroscope"
cp "$exe" "$bin"
echo "binary: $exe (copied to $bin); output: $OUT" >&2

run() {
    flock /tmp/bench.lock "$bin" --bench "$@" | grep '^RESULT' | tee -a "$OUT"
}

: >"$OUT"
for round in $(seq 1 "$ROUNDS"); do
    echo "round $round: $(uptime)" | tee -a "$OUT"
    for arm in pyroscope file; do
        run --figure throughput --arm "$arm" --windows "$WINDOWS"
    done
    for arm in down up file; do
        run --figure idle --arm "$arm" --seconds "$SECONDS_IDLE"
    done
done
echo "end: $(uptime)" | tee -a "$OUT"

python3 - "$OUT" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    if not line.startswith("RESULT"):
        continue
    kv = dict(f.split("=", 1) for f in line.split()[1:])
    runs.setdefault((kv["figure"], kv["arm"]), []).append(kv)

def med(fig, arm, key):
    return statistics.median(float(r[key]) for r in runs[(fig, arm)])

def show(fig, arm, key):
    vals = [float(r[key]) for r in runs[(fig, arm)]]
    return "%s %s %s: median %.2f [%s]" % (fig, arm, key, statistics.median(vals), ", ".join("%.2f" % v for v in vals))

for key in ("windows_per_s", "peak_rss_mib", "base_rss_mib"):
    for arm in ("pyroscope", "file"):
        print(show("throughput", arm, key))
print("throughput ratio pyroscope/file: %.2f" % (med("throughput", "pyroscope", "windows_per_s") / med("throughput", "file", "windows_per_s")))
for key in ("cpu_pct", "cpu_ms", "export_ms", "retries", "spooled_mib", "peak_rss_mib"):
    for arm in ("down", "up", "file"):
        print(show("idle", arm, key))
print("idle CPU ratio down/up: %.2f, down/file: %.2f" % (
    med("idle", "down", "cpu_pct") / med("idle", "up", "cpu_pct"),
    med("idle", "down", "cpu_pct") / med("idle", "file", "cpu_pct")))
EOF
