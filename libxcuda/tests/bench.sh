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
# Online-aware gating: the node's GPU signal page, slot 0. The online side
# publishes into it (the slot stays set while it launches); the offline side
# follows it (idle: 0).
"$BUILD/libxcuda/tests/xcblock" signal "$work/signal"
"$BUILD/libxcuda/tests/xcblock" create "$work/online" role=1 mask=1
"$BUILD/libxcuda/tests/xcblock" create "$work/offline" role=2 mask=1
echo "== libxcuda: online, publishing to the GPU signal page, no offline container following it"
env LD_LIBRARY_PATH="$stub" LD_PRELOAD="$lib" XCUDA_CONTROL_BLOCK="$work/online" \
  XCUDA_SIGNAL="$work/signal" "$bench" time
# With a follower, each synchronisation that ends online work wakes the holders
# (one FUTEX_WAKE system call).
"$BUILD/libxcuda/tests/xcblock" signal "$work/signal" followers0=1
echo "== libxcuda: online, publishing to the GPU signal page, one offline container following it"
env LD_LIBRARY_PATH="$stub" LD_PRELOAD="$lib" XCUDA_CONTROL_BLOCK="$work/online" \
  XCUDA_SIGNAL="$work/signal" "$bench" time
"$BUILD/libxcuda/tests/xcblock" signal "$work/signal" slot0=0
echo "== libxcuda: offline, following the GPU signal page, no online work"
env LD_LIBRARY_PATH="$stub" LD_PRELOAD="$lib" XCUDA_CONTROL_BLOCK="$work/offline" \
  XCUDA_SIGNAL="$work/signal" "$bench" time
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
  ir_env() {
    local tag=$1; shift
    env LD_LIBRARY_PATH="$stub" LD_PRELOAD="$lib" XCUDA_SIGNAL="$work/signal" "$@" \
      valgrind --tool=callgrind --callgrind-out-file="$work/cg.$tag" \
      --toggle-collect="loop_wrapped" "$bench" wrapped "$n" >/dev/null 2>&1
    awk '/^summary:/ {print $2}' "$work/cg.$tag"
  }
  on=$(ir_env online XCUDA_CONTROL_BLOCK="$work/online")
  "$BUILD/libxcuda/tests/xcblock" signal "$work/signal" slot0=0
  off=$(ir_env offline XCUDA_CONTROL_BLOCK="$work/offline")
  echo "== callgrind: per cuLaunchKernel with the signal page: online (publishing) $((on / n)) (added vs no page $(((on - w) / n))), offline (following, idle) $((off / n)) (added $(((off - w) / n)))"
else
  echo "== callgrind: valgrind not installed, skipped"
fi
