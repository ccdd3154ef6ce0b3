#!/usr/bin/env bash
# tests/gpu/all.sh — every real-GPU check in one unattended run of about 8
# minutes (10 at most, the limits below summed), for a session lent a GPU: check.sh (libxcuda and the
# calibration points), protect.sh (online protection with PyTorch),
# monitor.sh (SysMonitor against NVML, with NVML's per-call costs),
# confine.sh (libxcuda's confinement to a green context), gpusim/gpucheck/mps_formats.sh
# and mps_order.sh (gpusim's MPS control and block-dispatch rule against the hardware's). Each runs under its own time
# limit; a summary line per check comes last; the logs are packed into
# OUT_DIR/gpu-logs.tgz.
#
# The GPU host needs CUDA (nvcc), PyTorch and nvidia-cuda-mps-control, and no
# Go: run `make build` first and bring build/bin/nvmlprobe, build/bin/gpusimd
# and build/gpusim along (the device tool's carry).
# Usage: tests/gpu/all.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: tests/gpu/all.sh OUT_DIR}
mkdir -p "$out" && out=$(cd "$out" && pwd)
logs=$(mktemp -d /tmp/gpu-all.XXXXXX)
export PYTHONUNBUFFERED=1
summary=()
step() { # step NAME LIMIT_S CMD... — runs one check, keeps its log and verdict
  local name=$1 limit=$2 rc
  shift 2
  echo "=== $name (at most ${limit}s)"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$logs/$name.txt"
  rc=${PIPESTATUS[0]}
  summary+=("$name: exit $rc")
}
step check 245 tests/gpu/check.sh "$logs/check"
step protect 205 tests/gpu/protect.sh "$logs/protect"
step confine 30 tests/gpu/confine.sh "$logs/confine"
step monitor 45 env OUT="$logs/monitor" MUXFLOW_BUILD="$PWD/build" tests/gpu/monitor.sh
step mps_formats 35 gpusim/gpucheck/mps_formats.sh "$PWD/build"
step mps_order 35 gpusim/gpucheck/mps_order.sh
echo "=== summary"
printf '%s\n' "${summary[@]}" | tee "$logs/summary.txt"
tar czf "$out/gpu-logs.tgz" -C "$logs" . && echo "logs: $out/gpu-logs.tgz"
