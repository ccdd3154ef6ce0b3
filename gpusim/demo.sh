#!/usr/bin/env bash
# gpusim demo: one simulated H100; an online inference service alone, then
# the same service sharing the GPU with an offline training job through the
# (fake) MPS with no limits. Prints online latency, offline throughput, and
# the GPU's utilisation (NVML: time a kernel ran) and SM activity (DCGM:
# share of SMs busy) for each phase.
#
# Usage: gpusim/demo.sh [BUILD_DIR]   (after `make build`)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-${MUXFLOW_BUILD:-$root/build}}
secs=${DEMO_SECONDS:-5}
rate=${DEMO_RATE:-constant:200}
for f in "$build/bin/gpusimd" "$build/gpusim/bin/infer" "$build/gpusim/bin/train" \
         "$build/gpusim/bin/gpusimctl" "$build/gpusim/bin/nvidia-cuda-mps-control" "$build/gpusim/lib/libcuda.so.1"; do
  [ -e "$f" ] || { echo "demo: $f is missing; run 'make build' first" >&2; exit 1; }
done

dir=$(mktemp -d /tmp/gpusim-demo.XXXXXX)
export GPUSIM_SOCKET=$dir/gpusimd.sock
export LD_LIBRARY_PATH=$build/gpusim/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CUDA_MPS_PIPE_DIRECTORY=$dir/mps-pipe CUDA_MPS_LOG_DIRECTORY=$dir/mps-log
ctl=$build/gpusim/bin/gpusimctl
mps=$build/gpusim/bin/nvidia-cuda-mps-control

gpid=
cleanup() {
  [ -S "$CUDA_MPS_PIPE_DIRECTORY/control" ] && echo quit | "$mps" >/dev/null 2>&1 || true
  [ -n "$gpid" ] && kill "$gpid" 2>/dev/null && wait "$gpid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

"$build/bin/gpusimd" -gpus h100 -log-level warn 2>"$dir/gpusimd.log" &
gpid=$!
for _ in $(seq 100); do "$ctl" counters 0 >/dev/null 2>&1 && break; sleep 0.05; done

# jget KEY JSON: a number from the workload's one-line JSON
jget() { sed -n "s/.*\"$1\":\([-0-9.e]*\).*/\1/p" <<<"$2"; }
# counters: cumulative busy time and SM time of GPU 0
counters() { "$ctl" counters 0; }
# usage BEFORE AFTER SECONDS: average utilisation % and SM activity
usage() {
  awk -v a="$1" -v b="$2" -v s="$3" 'BEGIN { split(a, x, " "); split(b, y, " ");
    printf "%.0f%% %.2f", 100*(y[1]-x[1])/(s*1e9), (y[2]-x[2])/(s*1e9)/y[3] }'
}

infer_args=(--rate "$rate" --duration "$secs" --io-bytes 64K --bw 0.6)
printf '\ngpusim demo: one simulated %s, online rate %s, %ss per phase\n\n' "NVIDIA H100" "$rate" "$secs"

# phase 1: online alone
c0=$(counters); t0=$(date +%s.%N)
alone=$("$build/gpusim/bin/infer" "${infer_args[@]}")
c1=$(counters); t1=$(date +%s.%N)
u1=$(usage "$c0" "$c1" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')")

# phase 2: offline alone
c4=$(counters); t4=$(date +%s.%N)
solo=$("$build/gpusim/bin/train" --duration "$secs" --mem 8G --bw 0.8)
c5=$(counters); t5=$(date +%s.%N)
u3=$(usage "$c4" "$c5" "$(awk -v a="$t4" -v b="$t5" 'BEGIN{print b-a}')")

# phase 3: online + offline through MPS, no limits
"$mps" -d
"$build/gpusim/bin/train" --duration "$((secs + 2))" --mem 8G --bw 0.8 >"$dir/train.json" &
tpid=$!
sleep 1
c2=$(counters); t2=$(date +%s.%N)
shared=$("$build/gpusim/bin/infer" "${infer_args[@]}")
c3=$(counters); t3=$(date +%s.%N)
u2=$(usage "$c2" "$c3" "$(awk -v a="$t2" -v b="$t3" 'BEGIN{print b-a}')")
wait "$tpid"
train=$(cat "$dir/train.json")

printf '%-28s %12s %12s %11s %13s %9s %12s\n' "phase" "online p50" "online p99" "online QPS" "offline it/s" "GPU util" "SM activity"
printf '%-28s %9s ms %9s ms %11s %13s %9s %12s\n' "online alone" "$(jget p50_ms "$alone")" "$(jget p99_ms "$alone")" \
  "$(jget qps "$alone")" "-" ${u1}
printf '%-28s %12s %12s %11s %13s %9s %12s\n' "offline alone" "-" "-" "-" "$(jget it_per_s "$solo")" ${u3}
printf '%-28s %9s ms %9s ms %11s %13s %9s %12s\n' "online + offline (MPS)" "$(jget p50_ms "$shared")" "$(jget p99_ms "$shared")" \
  "$(jget qps "$shared")" "$(jget it_per_s "$train")" ${u2}
errs=$(( $(jget errors "$alone") + $(jget errors "$solo") + $(jget errors "$shared") + $(jget errors "$train") ))
printf '\nerrors: %d    (latency tails include this machine'"'"'s CPU contention; the model is in gpusim/README.md)\n' "$errs"
