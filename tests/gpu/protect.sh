#!/usr/bin/env bash
# tests/gpu/protect.sh — online protection on a real GPU, in about 3 minutes:
# a PyTorch online service (Poisson requests of GPU-filling bf16 matmuls,
# latency from arrival) next to a PyTorch offline trainer (8192^3 matmuls),
# on one GPU, under:
#   ts-alone / ts-plain    time slicing (no MPS): online alone, then with
#                          the offline job unmanaged;
#   mps-alone / mps-plain  a private MPS daemon: the same two;
#   mps-static             the offline job under libxcuda: 30% GPU-time share,
#                          70% MPS thread percentage (muxflow-static);
#   mps-follow             the same, following the online side's signal page
#                          (hold, bounded queue, hold-ahead: muxflow).
# Also the SM clock during a full-speed and a 30%-share matmul run, which is
# why a time share buys more than its share of work on a power-capped GPU.
# Prints one RESULT line per case (INFO: figures for a person to read) and
# the online p99 ratio to the same mode's alone run. Needs what check.sh
# needs plus nvidia-cuda-mps-control. Usage: tests/gpu/protect.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-${OUT:-$(mktemp -d)}}
mkdir -p "$out" && out=$(cd "$out" && pwd)
exec > >(tee -a "$out/protect.log") 2>&1
py=${PYTHON:-python3}
rate=${ONLINE_RATE:-100} secs=${ONLINE_SECONDS:-12} n=${ONLINE_N:-4096} k=${ONLINE_K:-4}
offline_secs=$((secs + 9)) # covers the online process's start and its whole run

build=$out/build
make -s -C libxcuda BUILD="$build" "$build/lib/libxcuda.so" "$build/libxcuda/tests/xcblock" >"$out/build.log" 2>&1 ||
  { tail -20 "$out/build.log"; echo "protect: cannot build libxcuda"; exit 2; }
lib=$build/lib/libxcuda.so
xcblock=$build/libxcuda/tests/xcblock
jget() { "$py" -c 'import json,sys; d=json.loads(sys.argv[1] or "{}"); print(d.get(sys.argv[2], ""))' "$1" "$2" 2>/dev/null; }

w=$(mktemp -d /tmp/protect.XXXXXX)
mps_up=""
cleanup() {
  [ -n "$mps_up" ] && echo quit | CUDA_MPS_PIPE_DIRECTORY=$w/pipe timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1
  jobs -p | xargs -r kill 2>/dev/null
}
trap cleanup EXIT
"$xcblock" signal "$w/sig" followers0=1
"$xcblock" create "$w/blk-online" role=1 mask=1
"$xcblock" create "$w/blk-static" share=3000 mps_pct=70
"$xcblock" create "$w/blk-follow" share=3000 mps_pct=70 role=2 mask=1

online() { # online BLOCK — the service under libxcuda (publishing), JSON on stdout
  env LD_PRELOAD="$lib" XCUDA_CONTROL_BLOCK="$1" XCUDA_SIGNAL="$w/sig" \
    timeout 120 "$py" tests/gpu/torch_probe.py online "$rate" "$secs" "$n" "$k" 2>>"$out/online.err" | tail -1
}
offline() { # offline none|BLOCK — the trainer in the background, JSON to $w/offline.json
  if [ "$1" = none ]; then
    timeout 120 "$py" tests/gpu/torch_probe.py matmul "$offline_secs" 8192 >"$w/offline.json" 2>>"$out/offline.err" &
  else
    env LD_PRELOAD="$lib" XCUDA_CONTROL_BLOCK="$1" XCUDA_SIGNAL="$w/sig" \
      timeout 120 "$py" tests/gpu/torch_probe.py matmul "$offline_secs" 8192 >"$w/offline.json" 2>>"$out/offline.err" &
  fi
  off_pid=$!
  sleep 6 # the trainer is running before the first request
}
declare -A p99
run_case() { # run_case NAME MODE OFFLINE(none|-|BLOCK)
  local name=$1 mode=$2 off=$3 j o=""
  [ "$off" != - ] && offline "$off"
  j=$(online "$w/blk-online")
  if [ "$off" != - ]; then wait "$off_pid"; o=$(tail -1 "$w/offline.json"); fi
  p99[$name]=$(jget "$j" p99_ms)
  local alone=${p99[$mode-alone]:-}
  local ratio=""
  [ -n "$alone" ] && [ -n "${p99[$name]}" ] && ratio=$("$py" -c "print(f'{${p99[$name]}/$alone:.2f}')")
  echo "$name: online $j"
  [ -n "$o" ] && echo "$name: offline $o"
  echo "RESULT $name: INFO (online p99 ${p99[$name]:-?} ms${ratio:+, ${ratio}x alone}${o:+; offline $(jget "$o" iters_per_s) matmuls/s})"
}

echo "== machine"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
echo "online: $rate requests/s for $secs s, each $k bf16 ${n}^3 matmuls; offline: bf16 8192^3 matmuls"

echo "== SM clock: full speed against a 30% GPU-time share"
for c in none "$w/blk-static"; do
  nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 250 >"$w/clk" &
  smi=$!
  if [ "$c" = none ]; then
    j=$(timeout 60 "$py" tests/gpu/torch_probe.py matmul 8 8192 2>>"$out/offline.err" | tail -1)
  else
    j=$(env LD_PRELOAD="$lib" XCUDA_CONTROL_BLOCK="$c" timeout 60 "$py" tests/gpu/torch_probe.py matmul 8 8192 2>>"$out/offline.err" | tail -1)
  fi
  kill "$smi"; wait "$smi" 2>/dev/null
  # The busiest 60% of samples: the probe's own run, not PyTorch's start.
  echo "$( [ "$c" = none ] && echo full-speed || echo share-30 ): $j; SM MHz / W (median of busiest samples): $(
    "$py" -c 'import sys
rows=[tuple(map(float,l.split(","))) for l in open(sys.argv[1]) if l.count(",")==1 and "N/A" not in l]
rows.sort(key=lambda r:-r[1]); rows=rows[:max(1,int(len(rows)*0.6))]
m=lambda xs: sorted(xs)[len(xs)//2]
print(f"{m([r[0] for r in rows]):.0f} MHz / {m([r[1] for r in rows]):.0f} W over {len(rows)} samples")' "$w/clk")"
done

echo "== time slicing (no MPS)"
run_case ts-alone ts -
run_case ts-plain ts none

echo "== MPS (private daemon)"
export CUDA_MPS_PIPE_DIRECTORY=$w/pipe CUDA_MPS_LOG_DIRECTORY=$w/log
mkdir -p "$w/pipe" "$w/log"
if nvidia-cuda-mps-control -d; then
  mps_up=1
  run_case mps-alone mps -
  run_case mps-plain mps none
  run_case mps-static mps "$w/blk-static"
  run_case mps-follow mps "$w/blk-follow"
  "$xcblock" show "$w/blk-follow"
else
  echo "RESULT mps: FAIL (nvidia-cuda-mps-control -d failed)"
fi
echo "SUMMARY: online p99 ms: $(for c in ts-alone ts-plain mps-alone mps-plain mps-static mps-follow; do printf '%s=%s ' "$c" "${p99[$c]:-?}"; done)"
