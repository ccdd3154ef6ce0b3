#!/usr/bin/env bash
# Real-GPU check of SysMonitor (monitor/): runs nvmlprobe against the real
# NVML for 30 s while, if PyTorch can reach the GPU, a 15 s matmul load runs
# from about second 3 (after PyTorch starts), and prints the sampled metrics, the health states
# derived, the events and a PASS/FAIL verdict. Run beside tests/gpu/check.sh
# (it needs nvmlprobe, built with Go here or carried in build/bin); runnable
# alone on any GPU node. Exit status 0 means PASS.
#
# Env: MUXFLOW_BUILD (default <repo>/build) holds bin/nvmlprobe (built here
# with Go if missing); OUT, if set, receives monitor-probe.json and the logs.
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${MUXFLOW_BUILD:-$root/build}
probe=$build/bin/nvmlprobe
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"

echo "== monitor.sh: SysMonitor against the real NVML"
if [ ! -x "$probe" ]; then
  if command -v go >/dev/null 2>&1; then
    echo "building $probe"
    mkdir -p "$build/bin"
    (cd "$root" && go build -o "$build/bin/" ./monitor/cmd/nvmlprobe) || { echo "monitor.sh: FAIL: cannot build nvmlprobe"; exit 1; }
  else
    echo "monitor.sh: FAIL: $probe is missing and there is no Go toolchain; run 'make build' and carry build/" >&2
    exit 1
  fi
fi

command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=index,name,driver_version,temperature.gpu,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv

load_pid=""
busy_flag=""
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  echo "starting a 15 s fp16 matmul load on GPU 0 from about t=3 s (after PyTorch starts)"
  python3 - >"$out/monitor-load.log" 2>&1 <<'PY' &
import time, torch
time.sleep(3)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
b = torch.randn_like(a)
end = time.time() + 15
n = 0
while time.time() < end:
    for _ in range(10):
        c = a @ b
    torch.cuda.synchronize()
    n += 10
print(f"load done: {n} matmuls of 8192^3")
PY
  load_pid=$!
  busy_flag="-require-busy"
else
  echo "PyTorch with CUDA not available: sampling an idle GPU (utilisation check skipped)"
fi

"$probe" -duration 30s -print-every 2s -json "$out/monitor-probe.json" $busy_flag 2>"$out/monitor-probe.log"
rc=$?
if [ -n "$load_pid" ]; then
  wait "$load_pid" || echo "load generator failed:"
  cat "$out/monitor-load.log"
fi
echo "-- monitor log (warnings and transitions)"
grep -E 'level=(WARN|ERROR)|health changed|GPM' "$out/monitor-probe.log" | head -40
if [ $rc -eq 0 ]; then
  echo "monitor.sh: PASS (details in $out/monitor-probe.json)"
else
  tail -3 "$out/monitor-probe.log"
  echo "monitor.sh: FAIL (rc=$rc; details in $out/monitor-probe.json and $out/monitor-probe.log)"
fi
exit $rc
