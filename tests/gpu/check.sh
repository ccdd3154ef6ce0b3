#!/usr/bin/env bash
# tests/gpu/check.sh — the real-GPU verdict on libxcuda, in one unattended
# run of at most 8 minutes on a machine with an NVIDIA GPU, the CUDA
# toolkit (cuda.h), gcc, make and PyTorch:
#   1. compile libxcuda against NVIDIA's cuda.h (prototype compatibility);
#   2. PyTorch under libxcuda with a memory cap: must hit OOM at the cap;
#   3. PyTorch matmul throughput without libxcuda, under libxcuda at 100%
#      (within 3% of the baseline) and at a 30% share (GPU time 25-35% of the
#      run; work 25-45% of the baseline's, more than the share where the GPU
#      clocks up when less busy);
#   4. gpusim's calibration points measured on this GPU
#      (gpusim/gpucheck/calibration.sh, at most 3 minutes of the 8; INFO, or
#      FAIL when it could not run; CHECK_CALIBRATION=0 skips it).
# Prints a RESULT line per check and a final SUMMARY; exits non-zero if a
# check failed. Usage: tests/gpu/check.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=${1:-${OUT:-$(mktemp -d)}}
mkdir -p "$out" && out=$(cd "$out" && pwd)
log=$out/check.log
exec > >(tee -a "$log") 2>&1
start=$(date +%s)
deadline=$((start + 460)) # leave margin inside 8 minutes
fails=0
result() { echo "RESULT $1: $2"; [ "$2" = PASS ] || [ "$2" = INFO ] || fails=$((fails + 1)); }
left() { echo $((deadline - $(date +%s))); }
run_for() { local t=$1; shift; [ "$(left)" -gt 5 ] || { echo "out of time"; return 124; }
  [ "$t" -gt "$(left)" ] && t=$(left); timeout --kill-after=5 "$t" "$@"; }

echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -4
cuda_inc=""
for d in "${CUDA_HOME:-}/include" /usr/local/cuda/include /usr/include; do
  [ -f "$d/cuda.h" ] && { cuda_inc=$d; break; }
done
py=${PYTHON:-python3}
echo "cuda.h: ${cuda_inc:-not found}; python: $($py -c 'import torch,sys;print(sys.version.split()[0],"torch",torch.__version__,"cuda",torch.version.cuda)' 2>&1 | tail -1)"

build=$out/build
echo "== 1. compile libxcuda against the real cuda.h"
if [ -z "$cuda_inc" ]; then
  result compile-real-cuda-h "FAIL (no cuda.h found; set CUDA_HOME)"
else
  if run_for 120 make -s -C libxcuda BUILD="$build" CUDA_INC="$cuda_inc" "$build/lib/libxcuda.so" >"$out/compile.log" 2>&1; then
    result compile-real-cuda-h PASS
  else
    tail -30 "$out/compile.log"
    result compile-real-cuda-h FAIL
  fi
fi
# The tools below need only the project's own headers.
if ! run_for 60 make -s -C libxcuda BUILD="$build" "$build/libxcuda/tests/xcblock" "$build/libxcuda/tests/xctest" >>"$out/compile.log" 2>&1; then
  tail -20 "$out/compile.log"; result build-tools FAIL
fi
lib=$build/lib/libxcuda.so
xcblock=$build/libxcuda/tests/xcblock
xctest=$build/libxcuda/tests/xctest
if [ ! -f "$lib" ] || [ ! -x "$xcblock" ]; then
  echo "cannot go on without libxcuda and xcblock"
  echo "SUMMARY: $fails check(s) failed"; exit 1
fi

probe() { # probe BLOCK_DIR|none ARGS... — one torch_probe run, JSON on stdout
  local blk=$1; shift
  if [ "$blk" = none ]; then
    run_for 150 env -u LD_PRELOAD "$py" tests/gpu/torch_probe.py "$@" 2>"$out/probe.err" | tail -1
  else
    run_for 150 env LD_PRELOAD="$lib" XCUDA_CONTROL_BLOCK="$blk" XCUDA_DEBUG=1 "$py" tests/gpu/torch_probe.py "$@" 2>"$out/probe.err" | tail -1
    echo "libxcuda log: $(grep -c 'wrapping by name' "$out/probe.err" || true) pointer(s) wrapped by name; $(grep -c 'refused at the cap' "$out/probe.err" || true) refusal(s) at the cap" >&2
  fi
}
jget() { "$py" -c 'import json,sys; d=json.loads(sys.argv[1] or "{}"); print(d.get(sys.argv[2], ""))' "$1" "$2" 2>/dev/null; }

echo "== 1b. entry points against the real driver (1 MiB cap): dlsym and cuGetProcAddress"
"$xcblock" create "$out/blk-entry" mem0=1048576
for way in dlsym gpa; do
  e=$(run_for 60 env LD_PRELOAD="$lib" XCUDA_CONTROL_BLOCK="$out/blk-entry" XCUDA_DEBUG=1 "$xctest" entry "$way" 1048576 2>"$out/entry-$way.err")
  echo "$e" | tr '\n' ' '; echo
  byname=$(grep -c "wrapping by name" "$out/entry-$way.err" || true)
  echo "cuGetProcAddress pointers wrapped by name (not by address): $byname"
  if grep -qx "alloc_owner=libxcuda" <<<"$e" && grep -qx "alloc_over_cap=2" <<<"$e" && grep -qx "alloc_small=0" <<<"$e" && grep -qx "init=0" <<<"$e"; then
    result "entry-$way" PASS
  else
    tail -5 "$out/entry-$way.err"; result "entry-$way" FAIL
  fi
done

echo "== 2. memory cap: 4 GiB, 256 MiB tensors until OOM"
cap=$((4 << 30))
"$xcblock" create "$out/blk-mem" mem0=$cap
j=$(probe "$out/blk-mem" oom 256)
echo "$j"; "$xcblock" show "$out/blk-mem"
alloc=$(jget "$j" allocated_bytes); err=$(jget "$j" error)
if [ -n "$alloc" ] && [ "$alloc" -le "$cap" ] && [ "$alloc" -ge $((cap - (1 << 30))) ] && [[ "$err" == OutOfMemoryError* ]]; then
  result memory-cap PASS
else
  tail -5 "$out/probe.err"
  result memory-cap "FAIL (allocated ${alloc:-?} of cap $cap, error '${err}')"
fi

echo "== 3. throughput: bf16 8192^3 matmuls, 15 s each"
"$xcblock" create "$out/blk-full"
"$xcblock" create "$out/blk-30" share=3000
base=$(probe none matmul 15 8192); echo "baseline (no libxcuda): $base"
full=$(probe "$out/blk-full" matmul 15 8192); echo "libxcuda, 100% share: $full"
thr=$(probe "$out/blk-30" matmul 15 8192); echo "libxcuda, 30% share: $thr"
show30=$("$xcblock" show "$out/blk-30"); echo "$show30"
b=$(jget "$base" iters_per_s); f=$(jget "$full" iters_per_s); t=$(jget "$thr" iters_per_s)
gpu_ns=$(grep -o 'gpu_time_ns=[0-9]*' <<<"$show30" | cut -d= -f2); secs=$(jget "$thr" seconds)
if [ -n "$b" ] && [ -n "$f" ] && [ -n "$t" ] && [ -n "$gpu_ns" ] && [ -n "$secs" ]; then
  rf=$("$py" -c "print(f'{$f/$b:.3f}')"); rt=$("$py" -c "print(f'{$t/$b:.3f}')")
  # The share is of GPU time. A power-capped GPU clocks higher when it is busy
  # less of the time (an H200: 1470 MHz flat out, 1980 MHz at a 30% share), so
  # the work done at a 30% share is more than 30% of the work done flat out.
  st=$("$py" -c "print(f'{$gpu_ns/1e9/$secs:.3f}')")
  echo "ratio libxcuda-100%/baseline = $rf; 30% share: GPU time $st of the run, matmuls $rt of the baseline's"
  "$py" -c "import sys; sys.exit(0 if $rf >= 0.97 else 1)" && result overhead-100pct PASS || result overhead-100pct "FAIL (ratio $rf < 0.97)"
  "$py" -c "import sys; sys.exit(0 if 0.25 <= $st <= 0.35 else 1)" && result share-30pct PASS || result share-30pct "FAIL (GPU-time share $st outside 0.25..0.35)"
  "$py" -c "import sys; sys.exit(0 if 0.25 <= $rt <= 0.45 else 1)" && result share-30pct-work PASS || result share-30pct-work "FAIL (work ratio $rt outside 0.25..0.45)"
else
  tail -5 "$out/probe.err"
  result throughput "FAIL (a run produced no figure)"
fi
echo "== 4. gpusim calibration points on this GPU (the table's real-GPU column)"
cal_budget=$(($(left) - 40)) # leaves room for its cleanup (MPS quit) and the summary
((cal_budget > 170)) && cal_budget=170
if [ "${CHECK_CALIBRATION:-1}" = 0 ]; then
  echo "skipped: CHECK_CALIBRATION=0"
  result gpusim-calibration INFO
elif ((cal_budget < 60)); then
  echo "skipped: only $((cal_budget + 40)) s left"
  result gpusim-calibration INFO
else
  OUT=$out/calibration timeout --kill-after=30 $((cal_budget + 25)) gpusim/gpucheck/calibration.sh "$cal_budget" 2>&1 |
    tee "$out/calibration.txt"
  rc=${PIPESTATUS[0]}
  tally=$(grep -ao 'calibration: [0-9]* measured.*' "$out/calibration.txt" | tail -1)
  case $rc in
  0) result gpusim-calibration INFO ;; # the table above is for a person to read
  1) result gpusim-calibration "FAIL (some points failed to run: ${tally#calibration: }; logs in $out/calibration)" ;;
  *) result gpusim-calibration "FAIL (rc $rc; logs in $out/calibration)" ;;
  esac
fi
echo "SUMMARY: $fails check(s) failed in $(( $(date +%s) - start )) s; log in $log"
[ "$fails" -eq 0 ]
