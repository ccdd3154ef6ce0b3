#!/usr/bin/env bash
# Checks what libxcuda.so exports (make -C libxcuda test): dlsym under both
# glibc versions, every hooked driver function under its real versioned
# name, sigaction/signal, and nothing else (no internal xc_* symbols).
set -euo pipefail
lib=${1:?usage: symbols.sh LIB}
syms=$(objdump -T "$lib" | awk '$4 == ".text" || $3 == ".text" {print $NF " " $(NF-1)}')
fail=0
need() { grep -qx -- "$1" <<<"$syms" || { echo "symbols.sh: $lib does not export '$1'"; fail=1; }; }
case "$(uname -m)" in
  aarch64) base=GLIBC_2.17 ;;
  *) base=GLIBC_2.2.5 ;;
esac
need "dlsym GLIBC_2.34"
need "dlsym ($base)"
for s in cuInit cuGetProcAddress cuGetProcAddress_v2 cuCtxCreate_v2 cuCtxCreate_v3 cuCtxCreate_v4 cuCtxDestroy_v2 \
         cuMemGetInfo_v2 cuMemAlloc_v2 cuMemAllocPitch_v2 cuMemAllocManaged cuMemFree_v2 \
         cuMemAllocAsync cuMemAllocAsync_ptsz cuMemAllocFromPoolAsync cuMemAllocFromPoolAsync_ptsz \
         cuMemFreeAsync cuMemFreeAsync_ptsz cuMemCreate cuMemRelease cuArrayCreate_v2 \
         cuArray3DCreate_v2 cuArrayDestroy cuLaunchKernel cuLaunchKernel_ptsz cuLaunchKernelEx \
         cuLaunchKernelEx_ptsz cuLaunchCooperativeKernel cuLaunchCooperativeKernel_ptsz \
         cuGraphLaunch cuGraphLaunch_ptsz cuCtxSynchronize cuStreamSynchronize \
         cuStreamSynchronize_ptsz cuEventSynchronize cuGraphInstantiate cuGraphInstantiate_v2 \
         cuGraphInstantiateWithFlags cuGraphInstantiateWithParams cuGraphInstantiateWithParams_ptsz \
         cuGraphExecDestroy cuGraphExecUpdate cuGraphExecUpdate_v2 cuGraphExecKernelNodeSetParams \
         cuGraphExecKernelNodeSetParams_v2 cuGraphExecMemcpyNodeSetParams \
         cuGraphExecMemsetNodeSetParams cuGraphExecNodeSetParams cuGraphNodeSetEnabled \
         cuMemcpyHtoDAsync_v2 cuMemcpyHtoDAsync_v2_ptsz cuMemcpyDtoHAsync_v2 cuMemcpyDtoHAsync_v2_ptsz \
         cuMemcpyAsync cuMemcpyAsync_ptsz cuMemcpyHtoD_v2 cuMemcpyHtoD_v2_ptds cuMemcpyDtoH_v2 \
         cuMemcpyDtoH_v2_ptds cuMemcpy cuMemcpy_ptds \
         sigaction signal; do
  need "$s XCUDA_1"
done
if grep -q "cuGetExportTable" <<<"$syms"; then echo "symbols.sh: cuGetExportTable must not be exported"; fail=1; fi
extra=$(grep -vE '^(cu[A-Za-z0-9_]+|sigaction|signal) XCUDA_1$|^dlsym ' <<<"$syms" || true)
if [ -n "$extra" ]; then echo "symbols.sh: unexpected exports:"; echo "$extra"; fail=1; fi
n=$(wc -l <<<"$syms")
[ "$fail" -eq 0 ] && echo "symbols.sh: $n exports as expected"
exit "$fail"
