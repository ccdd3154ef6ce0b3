#!/usr/bin/env bash
# libxcuda benchmarks (make bench): added cost of an intercepted call on the
# fast path versus the same driver called directly, in one process, and the
# instruction count per intercepted launch (callgrind).
set -euo pipefail
BUILD=${1:?usage: bench.sh BUILD}
lib=$BUILD/lib/libxcuda.so
stub=$BUILD/libxcuda/stub
bench=$BUILD/libxcuda/tests/xcbench
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$BUILD/libxcuda/tests/xcblock" create "$work/ctl"

run() { env LD_LIBRARY_PATH="$stub" LD_PRELOAD="$lib" XCUDA_CONTROL_BLOCK="$work/ctl" "$@"; }

echo "== libxcuda: fast path, control block present, not throttled"
run "$bench" time
echo "== libxcuda: no control block (pass-through)"
env LD_LIBRARY_PATH="$stub" LD_PRELOAD="$lib" XCUDA_CONTROL_BLOCK="$work/none" "$bench" time

if command -v valgrind >/dev/null; then
  n=100000
  ir() {
    run valgrind --tool=callgrind --callgrind-out-file="$work/cg.$1" \
      --toggle-collect="loop_$1" "$bench" "$1" "$n" >/dev/null 2>&1
    awk '/^summary:/ {print $2}' "$work/cg.$1"
  }
  d=$(ir direct); w=$(ir wrapped)
  echo "== callgrind: instructions per cuLaunchKernel: direct $((d / n)), intercepted $((w / n)), added $(((w - d) / n))"
else
  echo "== callgrind: valgrind not installed, skipped"
fi
