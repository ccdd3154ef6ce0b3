#!/bin/sh
# evaluate.sh — the full evaluation behind docs/results.md: every scenario under every
# strategy, one muxexp run per scenario (so a stopped evaluation keeps what it finished),
# then one summary table of the target checks.
#
#   tests/scenarios/evaluate.sh [SCENARIO.toml...]
#   DURATION=15s REPEAT=3 STRATEGIES=all OUT=build/eval MUXFLOW_BUILD=build tests/scenarios/evaluate.sh
set -eu
cd "$(dirname "$0")/../.."
: "${MUXFLOW_BUILD:=$PWD/build}" "${OUT:=build/eval}" "${DURATION:=15s}" "${REPEAT:=3}" "${STRATEGIES:=all}"
export MUXFLOW_BUILD
muxexp="$MUXFLOW_BUILD/bin/muxexp"
[ -x "$muxexp" ] || { echo "evaluate.sh: $muxexp is missing: run make build first" >&2; exit 1; }
[ $# -gt 0 ] || set -- tests/scenarios/*.toml
mkdir -p "$OUT"
for f in "$@"; do
	n=$(basename "$f" .toml)
	echo "$(date +%T) $n" >&2
	if ! "$muxexp" run "$f" --duration "$DURATION" --repeat "$REPEAT" --strategies "$STRATEGIES" --markdown \
		--plot "$OUT/$n.png" --json "$OUT/$n.json" >"$OUT/$n.md" 2>"$OUT/$n.err"; then
		echo "evaluate.sh: $n failed: $(tail -1 "$OUT/$n.err")" >&2
	fi
done
# Summary: one row per scenario, one column per target (the "met" cell and its figure).
{
	printf '| scenario | muxflow p99 ÷ alone | offline norm. (alone util) | vs mps | vs static | dynamic over static |\n'
	printf '|---|---|---|---|---|---|\n'
	for f in "$@"; do
		n=$(basename "$f" .toml)
		[ -s "$OUT/$n.md" ] || continue
		awk -v n="$n" -F' \\| ' '
			/^\| target \| measured \| met \|/ { on = 1; next }
			on && /^\|---/ { next }
			on && /^\| / { sub(/ \|$/, "", $3); cell[++k] = $2 " (" $3 ")" }
			on && !/^\|/ { on = 0 }
			END { if (k) printf "| %s | %s | %s | %s | %s | %s |\n", n, cell[1], cell[2], cell[3], cell[4], cell[5] }
		' "$OUT/$n.md"
	done
} >"$OUT/summary.md"
cat "$OUT/summary.md"
