#!/usr/bin/env bash
# Real-GPU check of gpusim's timing model (gpusim/README.md, "The model"):
# measures on the real GPU, with spin kernels timed by events, the cases the
# simulator's tests assert and prints them next to what gpusim predicts:
#   1. two equal MPS clients each get about half the GPU;
#   2. a client alone at CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30 gets ~30%;
#   3. without MPS two contexts time-slice (each takes about twice as long);
#   4. without MPS a small request next to a busy context waits for the rest
#      of the neighbour's time slice (gpusim: uniform in [0, slice]);
#   5. the same under MPS with an uncapped neighbour: gpusim predicts about
#      half a block time of delay.
# Needs nvcc and a GPU; about 60 s. Prints JSON lines and a summary; exit 0
# unless something failed to run (the numbers are for a human to judge).
#
# Usage: gpusim/gpucheck/timing.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/gpusim-timing.XXXXXX)
ctl=$(command -v nvidia-cuda-mps-control || true)
cleanup() {
  [ -n "$ctl" ] && [ -S "$work/pipe/control" ] && CUDA_MPS_PIPE_DIRECTORY=$work/pipe timeout 10 "$ctl" <<<quit >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
command -v nvcc >/dev/null || { echo "timing: nvcc not found" >&2; exit 2; }
nvcc -O2 -o "$work/timing" "$here/timing.cu" || { echo "timing: nvcc failed" >&2; exit 2; }
sms=$(nvidia-smi --query-gpu=multiprocessor_count --format=csv,noheader 2>/dev/null | head -1)
if ! [[ "$sms" =~ ^[0-9]+$ ]]; then
  sms=$(python3 -c "import torch; print(torch.cuda.get_device_properties(0).multi_processor_count)" 2>/dev/null)
fi
[[ "$sms" =~ ^[0-9]+$ ]] || { echo "timing: cannot read the SM count" >&2; exit 2; }
clk=$(nvidia-smi --query-gpu=clocks.max.sm --format=csv,noheader,nounits | head -1)
cyc=$(( ${clk:-1980} * 1000 ))          # ~1 ms per block at max clock
full=$(( sms * 8 ))                       # 256-thread blocks: 8 per SM, one wave over all SMs
export CUDA_MPS_PIPE_DIRECTORY=$work/pipe CUDA_MPS_LOG_DIRECTORY=$work/log
mkdir -p "$work/pipe" "$work/log"
T=$work/timing
val() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" <<<"$2"; }

echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $sms SMs, max SM clock ${clk} MHz"
alone=$("$T" steps 20 "$full" 256 "$cyc"); echo "alone (no MPS): $alone"
# 3. time slicing without MPS
a=$("$T" steps 40 "$full" 256 "$cyc" & "$T" steps 40 "$full" 256 "$cyc"; wait)
echo "two contexts, no MPS: $(tr '\n' ' ' <<<"$a")"
# 4. small request next to a busy context, no MPS
small=$(( 4 * 8 ))                        # 4 SMs
req_alone=$("$T" requests 50 "$small" 256 "$cyc" 20)
"$T" steps 3000 "$full" 256 "$cyc" >/dev/null & bg=$!
sleep 1
req_busy=$("$T" requests 50 "$small" 256 "$cyc" 20)
kill $bg 2>/dev/null; wait $bg 2>/dev/null
echo "small requests alone: $req_alone; beside a busy context (no MPS): $req_busy"

# MPS cases
if [ -z "$ctl" ]; then echo "timing: no nvidia-cuda-mps-control; MPS cases skipped"; exit 0; fi
"$ctl" -d || { echo "timing: cannot start MPS"; exit 2; }
sleep 1
m=$("$T" steps 40 "$full" 256 "$cyc" & "$T" steps 40 "$full" 256 "$cyc"; wait)
echo "two MPS clients: $(tr '\n' ' ' <<<"$m")"
capped=$(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30 "$T" steps 10 "$full" 256 "$cyc")
echo "MPS alone at 30% active threads: $capped"
"$T" steps 3000 "$full" 256 "$cyc" >/dev/null & bg=$!
sleep 1
req_mps=$("$T" requests 50 "$small" 256 "$cyc" 20)
kill $bg 2>/dev/null; wait $bg 2>/dev/null
echo "small requests beside an uncapped MPS neighbour: $req_mps"
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=70 "$T" steps 3000 "$full" 256 "$cyc" >/dev/null & bg=$!
sleep 1
req_mps70=$("$T" requests 50 "$small" 256 "$cyc" 20)
kill $bg 2>/dev/null; wait $bg 2>/dev/null
echo "small requests beside an MPS neighbour capped at 70%: $req_mps70"

base=$(val ms_per_kernel "$alone")
echo
echo "summary (ratio = solo time / shared time; gpusim's prediction in brackets)"
for l in $m; do r=$(awk -v b="$base" -v x="$(val ms_per_kernel "$l")" 'BEGIN{printf "%.2f", b/x}'); echo "  MPS equal neighbour: $r [0.50]"; done
awk -v b="$base" -v x="$(val ms_per_kernel "$capped")" -v s="$sms" \
  'BEGIN{printf "  MPS 30%% active threads alone: %.3f [%.3f]\n", b/x, int(0.3*s+0.999)/s}'
for l in $a; do r=$(awk -v b="$base" -v x="$(val ms_per_kernel "$l")" 'BEGIN{printf "%.2f", b/x}'); echo "  no MPS, two contexts: $r [0.50]"; done
echo "  small request p50 ms: alone $(val p50_ms "$req_alone") [1.0]; no-MPS neighbour $(val p50_ms "$req_busy") [1 + slice/2];" \
     "MPS uncapped $(val p50_ms "$req_mps") [1.5]; MPS capped 70% $(val p50_ms "$req_mps70") [1.0]"
