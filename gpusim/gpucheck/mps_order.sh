#!/usr/bin/env bash
# Real-GPU check of gpusim's rule for MPS clients (gpusim/sim/blocks.go,
# dispatch): A launches 3 waves of 1 ms blocks (2 blocks of 1024 threads per
# SM fill it), B a small kernel (2 blocks/SM-worth of 128-thread 40 us blocks)
# 200 us later, 30 times. B finishing near 1.04 ms means B got room when A's
# first wave retired; near 3.04 ms, only after every block of A was placed.
# Cases: equal priority; A at CUDA_MPS_CLIENT_PRIORITY=1 (below normal, what
# muxflow gives offline clients); B alone. About 30 s.
# Usage: gpusim/gpucheck/mps_order.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
w=$(mktemp -d /tmp/mps-order.XXXXXX)
nvcc -O2 -o "$w/mps_order" "$here/mps_order.cu" || { echo "mps_order: nvcc failed"; exit 2; }
sms=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
export CUDA_MPS_PIPE_DIRECTORY=$w/pipe CUDA_MPS_LOG_DIRECTORY=$w/log
mkdir -p "$w/pipe" "$w/log"
n=$("$w/mps_order" 0 0 0 0 0 0 0)
nvidia-cuda-mps-control -d || { echo "mps_order: MPS daemon did not start"; exit 2; }
trap 'echo quit | nvidia-cuda-mps-control >/dev/null 2>&1' EXIT
big="$((3 * 2 * n)) 1024 1000"
small="$((2 * n)) 128 40"
echo "GPU: $sms ($n SMs); A: grid $big; B: grid $small, 200 us later"
case_run() { # NAME PRIO_A WITH_A
  local t0=$(( $(date +%s%N) + 4000000000 )) pa=""
  if [ "$3" = 1 ]; then
    CUDA_MPS_CLIENT_PRIORITY=$2 "$w/mps_order" $big "$t0" 0 30 20 >"$w/a.txt" 2>&1 & pa=$!
  fi
  "$w/mps_order" $small "$t0" 200 30 20 >"$w/b.txt" 2>&1
  [ -n "$pa" ] && wait "$pa"
  echo "$1: B $(cat "$w/b.txt")"
  [ -n "$pa" ] && echo "$1: A $(cat "$w/a.txt")"
}
case_run b-alone 0 0
case_run equal-priority 0 1
case_run a-below-normal 1 1
