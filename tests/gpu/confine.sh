#!/usr/bin/env bash
# tests/gpu/confine.sh — libxcuda's confinement (limits confine_pct, green contexts,
# CUDA 12.4+) on a real GPU, in about a minute: tests/gpu/confine.cu run under libxcuda
# with confine_pct 0, then 50. PASS when unconfined blocks used (nearly) every SM and
# confined ones at most 60% of them, every block's write was visible after the stream's
# synchronisation, and the usage page says confined with its SM count. Prints RESULT
# lines, exits non-zero on a FAIL. Usage: tests/gpu/confine.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-$(mktemp -d)}
mkdir -p "$out" && out=$(cd "$out" && pwd)
build=$out/build
fails=0
result() { echo "RESULT $1: $2"; [ "$2" = PASS ] || fails=$((fails + 1)); }
make -s -C libxcuda BUILD="$build" "$build/lib/libxcuda.so" "$build/libxcuda/tests/xcblock" >"$out/compile.log" 2>&1 &&
  nvcc -O2 -o "$out/confine" tests/gpu/confine.cu >>"$out/compile.log" 2>&1 || {
  tail -20 "$out/compile.log"; result confine-build FAIL; exit 1; }
xcblock=$build/libxcuda/tests/xcblock
run() { # run PCT: prints confine.cu's line, then the block's
  rm -rf "$out/blk$1" && "$xcblock" create "$out/blk$1" confine_pct="$1" >/dev/null
  XCUDA_CONTROL_BLOCK="$out/blk$1" XCUDA_DEBUG=1 LD_PRELOAD="$build/lib/libxcuda.so" \
    timeout 60 "$out/confine" 2>"$out/confine$1.err"
  "$xcblock" show "$out/blk$1"
  grep -i confin "$out/confine$1.err" | head -3
}
free=$(run 0); echo "confine_pct=0: $free"
half=$(run 50); echo "confine_pct=50: $half"
val() { sed -n "s/.*\b$2=\([0-9.]*\).*/\1/p" <<<"$1" | head -1; }
sms=$(val "$free" sms)
if [ -z "$sms" ]; then
  result confine-run FAIL
  exit 1
fi
if [ "$(val "$free" distinct_sms)" -ge $((sms * 9 / 10)) ] && [ "$(val "$free" missing)" = 0 ]; then
  result confine-off-uses-the-gpu PASS
else
  result confine-off-uses-the-gpu FAIL
fi
d=$(val "$half" distinct_sms)
if [ -n "$d" ] && [ "$d" -gt 0 ] && [ "$d" -le $((sms * 6 / 10)) ] && [ "$(val "$half" missing)" = 0 ] &&
  [ "$(val "$half" confine_state)" = 1 ] && [ "$(val "$half" confined_sms)" -le $((sms * 6 / 10)) ]; then
  result confine-50-holds-its-partition PASS
else
  result confine-50-holds-its-partition "FAIL (distinct $d of $sms, state $(val "$half" confine_state))"
fi
echo "kernel ms: free $(val "$free" kernel_ms), confined $(val "$half" kernel_ms) (the confined one should take about twice as long: the stream's events cover it)"
exit $((fails > 0))
