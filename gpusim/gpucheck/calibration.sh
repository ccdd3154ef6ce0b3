#!/usr/bin/env bash
# Real-GPU run of gpusim's calibration points (gpusim/calibration/points.go,
# docs/gpusim-calibration.md): the same setups, played with synthetic CUDA
# kernels (calibration.cu) on the real GPU, printed as one table row a point
#   point  published  measured  error  | alone  shared  | note
# so that the measured column can be pasted beside the published and gpusim
# columns of docs/gpusim-calibration.md.
#
#   elvinger_tb_fit/_full   two 1 ms sleep kernels of 1024 threads (grid = SMs,
#                           2 x SMs) on two streams of one context: together / alone
#   elvinger_atp_tpc        the most SMs an MPS client at 50% active threads runs
#                           on at one instant (published: 40 of an 82-SM RTX 3090;
#                           here: this GPU's count, printed with both rounding
#                           rules); 25% and 10% as extra rows, where they differ
#   nos_ts_N / nos_mps_N    N processes each looping 1000 small kernels (96 x 256
#                           threads, ~5 us), without MPS / with MPS: mean loop time
#                           shared / alone (alone under the same sharing)
#   tally_*                 BERT-like inference (Poisson, half its alone rate) next
#                           to ResNet-like or BERT-like training, Llama-like decode
#                           next to ResNet-like training, MPS and time slicing:
#                           inference p99 (mean for Llama) and training throughput
#                           shared / alone
# Latencies are host-clock spans from a unit's first launch to its completion
# (what a client feels, waits for time slices included); the event-timed GPU
# span is printed as a note (gpusim's figure is an event span). Each run warms
# up 0.3 s and measures 2 s (nos) or 4 s (Tally); the time-slicing runs see no
# MPS daemon (CUDA_MPS_PIPE_DIRECTORY points at an empty directory).
#
# Needs nvcc, a GPU and, for the MPS points, nvidia-cuda-mps-control. MPS runs
# in private pipe/log directories and is quit on exit (also on INT/TERM); every
# sub-run has a timeout, and the whole run stays within BUDGET_S seconds
# (default 170; points that no longer fit are printed as skipped). Logs go to
# $OUT/ when OUT is set. Exit status: 0 when every point ran or was skipped for
# time, 1 when some failed, 2 when nothing could run.
#
# Usage: gpusim/gpucheck/calibration.sh [BUDGET_S]
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
budget=${1:-${CALIBRATION_BUDGET_S:-170}}
[[ "$budget" =~ ^[0-9]+$ ]] || { echo "calibration: BUDGET_S must be a number of seconds" >&2; exit 2; }
start=$(date +%s)
deadline=$((start + budget))
work=$(mktemp -d /tmp/gpusim-calibration.XXXXXX) || exit 2
pipe=$work/pipe
out=${OUT:-}
ctl=$(command -v nvidia-cuda-mps-control || true)
bin=$work/calibration
plan=$work/plan.txt
mps_up=0
kids=()
# Until the private MPS daemon starts, point every process at an empty pipe
# directory: an MPS daemon already running elsewhere on the machine would turn
# the time-slicing runs into MPS runs.
mkdir -p "$work/nomps"
export CUDA_MPS_PIPE_DIRECTORY=$work/nomps
measured=0 skipped=0 failed=0

# mps_procs: pids of live processes started with our private pipe directory
# (the control daemon and the server it spawns inherit it)
mps_procs() {
  local f p
  for f in $(env -u CUDA_MPS_PIPE_DIRECTORY grep -lsFxz "CUDA_MPS_PIPE_DIRECTORY=$pipe" /proc/[0-9]*/environ); do
    p=${f#/proc/}
    p=${p%/environ}
    [ "$p" != "$$" ] && [ "$p" != "$BASHPID" ] && echo "$p"
  done
}

mps_stop() {
  [ "$mps_up" = 1 ] || return 0
  mps_up=0
  echo quit | CUDA_MPS_PIPE_DIRECTORY=$pipe CUDA_MPS_LOG_DIRECTORY=$work/log timeout 10 "$ctl" >/dev/null 2>&1
  local i left
  for i in $(seq 40); do
    left=$(mps_procs)
    [ -z "$left" ] && { echo "MPS daemon quit"; return 0; }
    sleep 0.25
  done
  echo "calibration: MPS still running after quit (pids ${left//$'\n'/ }); killing them" >&2
  for p in $left; do kill -TERM "$p" 2>/dev/null; done
  sleep 2
  for p in $(mps_procs); do kill -KILL "$p" 2>/dev/null; done
}

# shellcheck disable=SC2317  # called through the EXIT trap
cleanup() {
  local p
  trap - INT TERM HUP
  for p in "${kids[@]}"; do kill -TERM "$p" 2>/dev/null; done # timeout(1) passes TERM on
  for p in "${kids[@]}"; do wait "$p" 2>/dev/null; done
  mps_stop
  if [ -n "$out" ]; then
    mkdir -p "$out" && cp -r "$work/." "$out/" 2>/dev/null && rm -f "$out/calibration"
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'echo "calibration: interrupted" >&2; exit 130' INT TERM HUP

now_ms() { date +%s%3N; }
left() { echo $((deadline - $(date +%s))); }
# field KEY FILE: the value of KEY=VALUE in FILE's first line that has it
field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" "$2" 2>/dev/null | head -1; }
# div A B [FORMAT]: A/B, or n/a
div() { awk -v a="$1" -v b="$2" -v f="${3:-%.2f}" 'BEGIN{ if (a == "" || b == "" || b + 0 == 0) print "n/a"; else printf f "\n", a / b }'; }

# sub SECONDS FILE CMD...: one bounded sub-run in the background (so that a
# signal reaches the trap at once), stdout to FILE, stderr to FILE.err
sub() {
  local t=$1 f=$2 rc p
  shift 2
  (( t > $(left) )) && t=$(left)
  (( t < 1 )) && { echo "calibration: out of time before $*" >"$f.err"; return 124; }
  timeout -k 3 "$t" "$@" >"$f" 2>"$f.err" &
  p=$!
  kids=("$p")
  wait "$p"
  rc=$?
  kids=()
  [ "$rc" -ne 0 ] && { echo "calibration: '$*' exited $rc:"; tail -3 "$f.err"; } >&2
  return "$rc"
}

# published ratios: read from points.go, this table if that fails
declare -A pub=(
  [elvinger_tb_fit]=1.00 [elvinger_tb_full]=2.00 [elvinger_atp_tpc]=40
  [nos_ts_3]=3.33 [nos_ts_5]=5.55 [nos_ts_7]=7.77 [nos_mps_3]=1.86 [nos_mps_5]=2.74 [nos_mps_7]=3.64
  [tally_bert_resnet_mps_p99]=2.20 [tally_bert_resnet_ts_p99]=2.73 [tally_bert_berttrain_ts_p99]=2.72
  [tally_resnet_tput_mps]=0.78 [tally_resnet_tput_ts]=0.56 [tally_llama_resnet_mps]=1.29 [tally_llama_resnet_ts]=2.29
)
if [ -r "$root/gpusim/calibration/points.go" ]; then
  while read -r id v; do
    [ -n "$id" ] && [ -n "$v" ] && pub[$id]=$v
  done < <(awk '
    match($0, /ID: "[^"]+"/) { id = substr($0, RSTART + 5, RLENGTH - 6) }
    id != "" && match($0, /Published: [0-9.]+/) { print id, substr($0, RSTART + 11, RLENGTH - 11); id = "" }
  ' "$root/gpusim/calibration/points.go")
fi

table=$work/table.txt
# row ID MEASURED ALONE SHARED NOTE: one table row (MEASURED may be n/a or skipped)
row() {
  local id=$1 m=$2 p=${pub[$1]:--} err
  err=$(awk -v m="$m" -v p="$p" 'BEGIN{ if (m !~ /^[0-9.]+$/ || p !~ /^[0-9.]+$/ || p + 0 == 0) print "-"; else printf "%+.0f%%\n", 100 * (m - p) / p }')
  case $m in
    skipped*) skipped=$((skipped + 1)) ;;
    n/a*) failed=$((failed + 1)) ;;
    *) measured=$((measured + 1)) ;;
  esac
  [ "$id" = elvinger_atp_tpc ] && [[ "$m" =~ ^[0-9] ]] && err="(other GPU)"
  printf '%-28s %9s %9s %11s | %-22s | %s\n' "$id" "$p" "$m" "$err" "$3 / $4" "$5" | tee -a "$table"
}

echo "== gpusim calibration points on a real GPU (budget ${budget}s)"
command -v nvcc >/dev/null || { echo "calibration: nvcc not found" >&2; exit 2; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,compute_mode --format=csv,noheader 2>&1 | head -2
echo "compiling calibration.cu (nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"
if ! sub 150 "$work/nvcc.log" nvcc -O2 -std=c++17 -arch=native -o "$bin" "$here/calibration.cu"; then
  cat "$work/nvcc.log.err" >&2
  echo "calibration: -arch=native failed; trying nvcc's default architecture (PTX JIT)" >&2
  sub 150 "$work/nvcc.log" nvcc -O2 -std=c++17 -o "$bin" "$here/calibration.cu" || { cat "$work/nvcc.log.err" >&2; exit 2; }
fi

t=$(now_ms)
sub 30 "$work/info" "$bin" info || exit 2
init_ms=$(($(now_ms) - t))
cat "$work/info"
sms=$(field sms "$work/info")
gpu=$(field name "$work/info")
echo "one process starts and exits in ${init_ms} ms"
sub 40 "$work/plan.log" "$bin" plan "$plan" || exit 2
cat "$work/plan.log"

# group NAME WARM_MS MEASURE_MS WORKLOAD...: the workloads as processes that
# start measuring together (each sets up, says it is ready in NAME.sync/, and
# starts at the time this script then writes to NAME.sync/go); each one's
# result line in $work/NAME.I
group() {
  local name=$1 warm=$2 meas=$3 i=0 rc=0 est lim t0 p wl late ready alive polls=0
  shift 3
  local sync=$work/$name.sync pids=()
  est=$(((2 * init_ms + 300 + warm + meas + 300) / 1000 + 3)) # expected seconds
  if ((est > $(left))); then
    echo "  $name: skipped (out of time)"
    return 3
  fi
  lim=$((est + 20))
  ((lim > $(left))) && lim=$(left)
  mkdir -p "$sync"
  for wl in "$@"; do
    timeout -k 3 "$lim" "$bin" run "$plan" "$wl" "$sync" "$warm" "$meas" 300 >"$work/$name.$i" 2>"$work/$name.$i.err" &
    pids+=("$!")
    kids=("${pids[@]}")
    i=$((i + 1))
  done
  # wait (at most 30 s) until all are ready or one has died, then start them
  while ((polls < 1500)); do
    ready=$(find "$sync" -name 'ready.*' | wc -l)
    ((ready >= $#)) && break
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
    ((alive < $#)) && break
    sleep 0.02
    polls=$((polls + 1))
  done
  ((ready < $#)) && echo "  $name: only $ready of $# processes ready; starting them anyway"
  t0=$(($(now_ms) + 200))
  echo "$t0" >"$sync/go.tmp" && mv "$sync/go.tmp" "$sync/go"
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  kids=()
  for ((i = 0; i < $#; i++)); do
    if ! grep -q '^result ' "$work/$name.$i"; then
      echo "  $name: process $i gave no result:"
      tail -3 "$work/$name.$i.err" | sed 's/^/    /'
      rc=1
      continue
    fi
    late=$(field late_ms "$work/$name.$i")
    ((${late:-0} > warm)) && echo "  $name: process $i got the start signal ${late} ms late: its window was short"
  done
  echo "  $name: $(sed 's/^result //' "$work/$name.0")"
  return "$rc"
}

# avg KEY NAME N: mean of KEY over processes 0..N-1 of group NAME; spread KEY NAME N: min-max
avg() { for ((i = 0; i < $3; i++)); do field "$1" "$work/$2.$i"; done | awk 'NF { s += $1; n++ } END { if (n) printf "%.3f\n", s / n }'; }
spread() { for ((i = 0; i < $3; i++)); do field "$1" "$work/$2.$i"; done | awk 'NF { if (n == 0 || $1 < lo) lo = $1; if ($1 > hi) hi = $1; n++ } END { if (n) printf "%.1f-%.1f\n", lo, hi }'; }
f() { field "$1" "$work/$2"; } # f KEY NAME.I
yolos() { for ((i = 0; i < $1; i++)); do echo yolos; done; } # N workload names

# ---------------------------------------------------------------- no MPS
echo "== one context, two streams (Elvinger et al. thread-block scheduler)"
sub 30 "$work/tb" "$bin" tb "$plan" && cat "$work/tb"
echo "== SMs used without MPS"
sub 30 "$work/smids_full" "$bin" smids && cat "$work/smids_full"

echo "== time slicing (no MPS): nos loops"
group ts_nos1 300 2000 yolos
# shellcheck disable=SC2046  # one word a process
for n in 3 5 7; do group "ts_nos$n" 300 2000 $(yolos "$n"); done
echo "== time slicing (no MPS): Tally pairs"
group ts_bert 300 4000 bert
group ts_resnet 300 4000 resnet
group ts_llama 300 4000 llama
group ts_bert_resnet 300 4000 bert resnet
group ts_bert_berttrain 300 4000 bert berttrain
group ts_llama_resnet 300 4000 llama resnet

# ---------------------------------------------------------------- MPS
mps_ok=0
if [ -z "$ctl" ]; then
  echo "calibration: no nvidia-cuda-mps-control; MPS points skipped" >&2
elif (($(left) < 40)); then
  echo "== MPS: skipped (out of time)"
else
  echo "== MPS (private daemon in $pipe)"
  mkdir -p "$pipe" "$work/log"
  export CUDA_MPS_PIPE_DIRECTORY=$pipe CUDA_MPS_LOG_DIRECTORY=$work/log
  if timeout 20 "$ctl" -d; then
    mps_up=1
    mps_ok=1
    for atp in 50 25 10; do
      CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$atp sub 30 "$work/smids_$atp" "$bin" smids && cat "$work/smids_$atp"
    done
    group mps_nos1 300 2000 yolos
    # shellcheck disable=SC2046
    for n in 3 5 7; do group "mps_nos$n" 300 2000 $(yolos "$n"); done
    group mps_bert 300 4000 bert
    group mps_resnet 300 4000 resnet
    group mps_llama 300 4000 llama
    group mps_bert_resnet 300 4000 bert resnet
    group mps_llama_resnet 300 4000 llama resnet
    grep -h -i -E 'error|fault' "$work/log/"*.log 2>/dev/null | tail -5
  else
    echo "calibration: cannot start the MPS control daemon; MPS points skipped" >&2
    failed=$((failed + 1))
  fi
  mps_stop
  export CUDA_MPS_PIPE_DIRECTORY=$work/nomps
  unset CUDA_MPS_LOG_DIRECTORY
fi

# ---------------------------------------------------------------- table
# m NAME: the measured figure of a group, or why there is none
have() { grep -q '^result ' "$work/$1.0" 2>/dev/null; }
why() { if [ -e "$work/$1.0" ]; then echo n/a; else echo skipped; fi; }
# missing ALONE SHARED: why a point has no figure
missing() { if have "$1"; then why "$2"; else why "$1"; fi; }

echo
echo "== calibration table: $gpu, $sms SMs (latency ratios: host clock; GPU-side event ratio in the note)"
printf '%-28s %9s %9s %11s | %-22s | %s\n' point published measured error "alone / shared" note | tee "$table"

if [ -s "$work/tb" ]; then
  for k in fit full; do
    a=$(sed -n "s/^tb_$k .*alone_ms=\([^ ]*\).*/\1/p" "$work/tb")
    s=$(sed -n "s/^tb_$k .*shared_ms=\([^ ]*\).*/\1/p" "$work/tb")
    g=$(sed -n "s/^tb_$k grid=\([^ ]*\).*/\1/p" "$work/tb")
    row "elvinger_tb_$k" "$(div "$s" "$a")" "${a} ms" "${s} ms" "grid $g x 1024 threads, 1 ms blocks"
  done
else
  row elvinger_tb_fit n/a - - "tb run failed"
  row elvinger_tb_full n/a - - "tb run failed"
fi

# rules for an active-thread percentage on this GPU: whole TPCs rounded down, or ceil
rules() { awk -v p="$1" -v n="$sms" 'BEGIN{ x = p / 100 * n; t = 2 * int(x / 2); c = (x == int(x)) ? x : int(x) + 1; printf "TPC rule 2*floor(%g%%*%d/2)=%d, ceil rule %d", p, n, t, c }'; }
for atp in 50 25 10; do
  id=elvinger_atp_tpc
  [ "$atp" != 50 ] && id=atp_${atp}pct_sms
  file=$work/smids_$atp
  if [ "$mps_ok" = 1 ] && [ -s "$file" ]; then
    row "$id" "$(field sms_concurrent "$file")" "$(field sms_concurrent "$work/smids_full") SMs" "$(field sms_concurrent "$file") SMs" \
      "ATP $atp%: $(rules "$atp"); most SMs at one instant; $(field sms_used "$file") SMs in all, client's SM attribute $(field sms_attr "$file")"
  else
    row "$id" "$([ "$mps_ok" = 1 ] && echo n/a || echo skipped)" - - "ATP $atp%: $(rules "$atp")"
  fi
done

for mode in ts mps; do
  for n in 3 5 7; do
    id=nos_${mode}_$n a=${mode}_nos1 s=${mode}_nos$n
    if have "$a" && have "$s"; then
      am=$(f mean_ms "$a.0") sm=$(avg mean_ms "$s" "$n")
      row "$id" "$(div "$sm" "$am")" "$am ms" "$sm ms" \
        "mean over $n processes (each $(spread mean_ms "$s" "$n") ms); GPU-side $(div "$(avg gpu_mean_ms "$s" "$n")" "$(f gpu_mean_ms "$a.0")")"
    else
      row "$id" "$(missing "$a" "$s")" - - "runs $a, $s"
    fi
  done
done

# latency NAME ID ALONE SHARED KEY GPUKEY: a latency point of process 0
latency() {
  local id=$1 a=$2 s=$3 k=$4 gk=$5
  if have "$a" && have "$s"; then
    local extra=""
    [ -n "$(f offered "$s.0")" ] && extra="; served $(f served "$s.0") of $(f offered "$s.0") offered (alone $(f served "$a.0") of $(f offered "$a.0"))"
    row "$id" "$(div "$(f "$k" "$s.0")" "$(f "$k" "$a.0")")" "$(f "$k" "$a.0") ms" "$(f "$k" "$s.0") ms" \
      "GPU-side $(div "$(f "$gk" "$s.0")" "$(f "$gk" "$a.0")")$extra"
  else
    row "$id" "$(missing "$a" "$s")" - - "runs $a, $s"
  fi
}
# tput ID ALONE SHARED: training throughput of process 1 of SHARED
tput() {
  local id=$1 a=$2 s=$3
  if have "$a" && grep -q '^result ' "$work/$s.1" 2>/dev/null; then
    row "$id" "$(div "$(f units_per_s "$s.1")" "$(f units_per_s "$a.0")")" "$(f units_per_s "$a.0")/s" "$(f units_per_s "$s.1")/s" "iterations per second"
  else
    row "$id" "$(missing "$a" "$s")" - - "runs $a, $s"
  fi
}
latency tally_bert_resnet_mps_p99 mps_bert mps_bert_resnet p99_ms gpu_p99_ms
latency tally_bert_resnet_ts_p99 ts_bert ts_bert_resnet p99_ms gpu_p99_ms
latency tally_bert_berttrain_ts_p99 ts_bert ts_bert_berttrain p99_ms gpu_p99_ms
tput tally_resnet_tput_mps mps_resnet mps_bert_resnet
tput tally_resnet_tput_ts ts_resnet ts_bert_resnet
latency tally_llama_resnet_mps mps_llama mps_llama_resnet mean_ms gpu_mean_ms
latency tally_llama_resnet_ts ts_llama ts_llama_resnet mean_ms gpu_mean_ms

echo "calibration: $measured measured, $skipped skipped (time or no MPS), $failed failed, in $(($(date +%s) - start)) s"
((measured == 0)) && exit 2
((failed > 0)) && exit 1
exit 0
