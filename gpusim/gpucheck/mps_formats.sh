#!/usr/bin/env bash
# Real-GPU check for gpusim's fake nvidia-cuda-mps-control: runs the same
# command-mode session against the real MPS control daemon and against the
# fake (over gpusimd), with PIDs normalised, and prints both transcripts and
# their differences. Exit status: 0 when they agree, 1 when they differ,
# 2 when it could not run. Needs a GPU, nvidia-cuda-mps-control, python3 with
# torch (or set MPS_CLIENT to any command that holds a CUDA context for a few
# seconds), and `make build` done. Takes about 30 s. Uses private pipe/log
# directories and quits both daemons it starts.
#
# Usage: gpusim/gpucheck/mps_formats.sh [BUILD_DIR]
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-${MUXFLOW_BUILD:-$root/build}}
real=$(command -v nvidia-cuda-mps-control || true)
fake=$build/gpusim/bin/nvidia-cuda-mps-control
# (a default written inside ${...:-...} would lose its inner quotes)
torch_client="python3 -c 'import torch,time; torch.zeros(1).cuda(); torch.cuda.synchronize(); time.sleep(6)'"
client=${MPS_CLIENT:-$torch_client}

if [ -z "$real" ]; then echo "mps_formats: no real nvidia-cuda-mps-control in PATH" >&2; exit 2; fi
for f in "$fake" "$build/bin/gpusimd" "$build/gpusim/lib/libcuda.so.1"; do
  [ -e "$f" ] || { echo "mps_formats: $f missing; run 'make build'" >&2; exit 2; }
done

work=$(mktemp -d /tmp/mps-formats.XXXXXX)
gpid=
cleanup() {
  for d in real fake; do
    [ -S "$work/$d/pipe/control" ] && CUDA_MPS_PIPE_DIRECTORY=$work/$d/pipe CUDA_MPS_LOG_DIRECTORY=$work/$d/log \
      timeout 10 "$( [ $d = real ] && echo "$real" || echo "$fake")" <<<quit >/dev/null 2>&1
  done
  [ -n "$gpid" ] && kill "$gpid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# session TOOL DIR: one daemon, a command script, a client in the middle
session() {
  local tool=$1 dir=$2 cpid srv
  mkdir -p "$dir/pipe" "$dir/log"
  export CUDA_MPS_PIPE_DIRECTORY=$dir/pipe CUDA_MPS_LOG_DIRECTORY=$dir/log
  cmd() { printf '%s\n' "$1" | timeout 10 "$tool" 2>&1; echo "[exit $?]"; }
  "$tool" -d; echo "start -d: exit $?"
  "$tool" -d 2>&1; echo "second -d: exit $?"
  for c in get_default_active_thread_percentage "set_default_active_thread_percentage 40" \
           get_default_active_thread_percentage "set_default_active_thread_percentage 0" \
           "set_default_active_thread_percentage 140" "set_default_device_pinned_mem_limit 0 2G" \
           "get_default_device_pinned_mem_limit 0" get_server_list no_such_command; do
    echo "> $c"; cmd "$c"
  done
  bash -c "$client" >"$dir/client.log" 2>&1 & cpid=$!
  for _ in $(seq 100); do srv=$(printf 'get_server_list\n' | "$tool" 2>/dev/null | head -1); [ -n "$srv" ] && break; sleep 0.2; done
  [ -n "$srv" ] || { echo "(no server within 20 s; the client said:)"; tail -5 "$dir/client.log"; }
  sleep 1
  echo "> get_server_list"; cmd get_server_list
  echo "> get_client_list SERVER"; cmd "get_client_list $srv"
  echo "> get_active_thread_percentage SERVER"; cmd "get_active_thread_percentage $srv"
  echo "> get_server_status SERVER"; cmd "get_server_status $srv"
  wait "$cpid"
  echo "> quit"; cmd quit
  for _ in $(seq 50); do [ -S "$dir/pipe/control" ] || break; sleep 0.1; done # the real daemon leaves asynchronously
  [ -S "$dir/pipe/control" ] && echo "control socket still present" || echo "control socket gone"
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
}

# normalise PIDs: every number of 3+ digits that is a live or past pid becomes PID
norm() { sed -E 's/\b[0-9]{3,7}\b/PID/g'; }

echo "== real: $real"
session "$real" "$work/real" | tee "$work/real.txt"

"$build/bin/gpusimd" -socket "$work/gpusimd.sock" -gpus h200 2>"$work/gpusimd.log" & gpid=$!
sleep 1
export GPUSIM_SOCKET=$work/gpusimd.sock LD_LIBRARY_PATH=$build/gpusim/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
client="$build/gpusim/bin/train --duration 6 --mem 0"   # a CUDA client of the fake driver
echo "== fake: $fake"
session "$fake" "$work/fake" | tee "$work/fake.txt"

echo "== differences (real vs fake, PIDs normalised)"
if diff <(norm <"$work/real.txt") <(norm <"$work/fake.txt"); then
  echo "mps_formats: the fake answers like the real tool"; exit 0
fi
echo "mps_formats: outputs differ (see above); update gpusim/mpscontrol to match the real tool"
exit 1
