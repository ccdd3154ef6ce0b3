#!/usr/bin/env bash
# C-side smoke check: the library exports what frameworks look up.
set -euo pipefail
out=$1
for s in cuInit cuGetProcAddress cuGetProcAddress_v2 cuLaunchKernel cuLaunchKernelEx cuMemAlloc_v2 cuCtxCreate_v2 cuCtxCreate_v3 cuGraphLaunch cuMemCreate cuStreamBeginCapture_v2 cuDeviceGetDevResource cuDevSmResourceSplitByCount cuDevResourceGenerateDesc cuGreenCtxCreate cuGreenCtxDestroy cuCtxFromGreenCtx cuGreenCtxStreamCreate; do
  nm -D --defined-only "$out/lib/libcuda.so.1" | awk '{print $3}' | grep -qx "$s" || { echo "libcuda.so.1 does not export $s" >&2; exit 1; }
done
echo "gpusim C smoke: ok"
