/* procaddr.c — cuGetProcAddress (both ABIs) and cuGraphInstantiate_v2, the
 * way the CUDA runtime >= 11.3 finds driver functions. */
#include <string.h>

#include "internal.h"

CUresult gs_cuGraphInstantiate_v2(CUgraphExec *pe, CUgraph g, CUgraphNode *err, char *log, size_t logsz);
GS_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *pe, CUgraph g, CUgraphNode *err, char *log, size_t logsz)
	__attribute__((alias("gs_cuGraphInstantiate_v2")));
CUresult gs_cuGraphInstantiate_v2(CUgraphExec *pe, CUgraph g, CUgraphNode *err, char *log, size_t logsz)
{
	if (err != NULL)
		*err = NULL;
	if (log != NULL && logsz > 0)
		log[0] = '\0';
	return cuGraphInstantiate(pe, g, 0);
}

#undef cuGetProcAddress
GS_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);

struct entry {
	const char *name;
	void *fn;
	void *ptsz;
};

/* #x is the plain name the runtime asks for; x expands to the versioned
 * symbol cuda.h maps it to */
#define E(x) {#x, (void *)x, NULL}
#define P(x, y) {#x, (void *)x, (void *)y}

static const struct entry table[] = {
	E(cuInit), E(cuDriverGetVersion), E(cuGetErrorString), E(cuGetErrorName), E(cuGetExportTable),
	E(cuDeviceGetCount), E(cuDeviceGet), E(cuDeviceGetName), E(cuDeviceGetUuid), E(cuDeviceGetUuid_v2),
	E(cuDeviceTotalMem), E(cuDeviceGetAttribute), E(cuDeviceGetDefaultMemPool),
	E(cuDevicePrimaryCtxRetain), E(cuDevicePrimaryCtxRelease), E(cuDevicePrimaryCtxReset),
	E(cuDevicePrimaryCtxSetFlags), E(cuDevicePrimaryCtxGetState), E(cuCtxCreate), E(cuCtxCreate_v3),
	E(cuCtxDestroy), E(cuCtxPushCurrent), E(cuCtxPopCurrent), E(cuCtxSetCurrent), E(cuCtxGetCurrent),
	E(cuCtxGetDevice), E(cuCtxSynchronize),
	E(cuDeviceGetDevResource), E(cuDevSmResourceSplitByCount), E(cuDevResourceGenerateDesc),
	E(cuGreenCtxCreate), E(cuGreenCtxDestroy), E(cuCtxFromGreenCtx), E(cuGreenCtxStreamCreate),
	E(cuStreamCreate), E(cuStreamCreateWithPriority), E(cuStreamDestroy),
	P(cuStreamSynchronize, cuStreamSynchronize_ptsz), E(cuStreamQuery), E(cuStreamWaitEvent),
	E(cuStreamBeginCapture), E(cuStreamEndCapture), E(cuStreamIsCapturing),
	E(cuEventCreate), E(cuEventRecord), E(cuEventQuery), E(cuEventSynchronize), E(cuEventDestroy),
	E(cuEventElapsedTime),
	E(cuMemGetInfo), E(cuMemAlloc), E(cuMemAllocPitch), E(cuMemAllocManaged), E(cuMemFree),
	E(cuMemGetAddressRange), E(cuMemAllocHost), E(cuMemHostAlloc), E(cuMemFreeHost),
	P(cuMemAllocAsync, cuMemAllocAsync_ptsz), P(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz),
	P(cuMemFreeAsync, cuMemFreeAsync_ptsz), E(cuMemPoolCreate), E(cuMemPoolDestroy), E(cuMemPoolTrimTo),
	E(cuMemCreate), E(cuMemRelease), E(cuMemAddressReserve), E(cuMemAddressFree), E(cuMemMap),
	E(cuMemUnmap), E(cuMemSetAccess), E(cuMemGetAllocationGranularity),
	E(cuMemcpy), E(cuMemcpyAsync), P(cuMemcpyHtoD, cuMemcpyHtoD_v2_ptds),
	P(cuMemcpyDtoH, cuMemcpyDtoH_v2_ptds), E(cuMemcpyDtoD), E(cuMemcpyHtoDAsync), E(cuMemcpyDtoHAsync),
	E(cuMemcpyDtoDAsync), E(cuMemsetD8), E(cuMemsetD16), E(cuMemsetD32), E(cuMemsetD8Async),
	E(cuMemsetD32Async), E(cuArrayCreate), E(cuArray3DCreate), E(cuArrayDestroy),
	E(cuModuleLoad), E(cuModuleLoadData), E(cuModuleUnload), E(cuModuleGetFunction), E(cuModuleGetGlobal),
	P(cuLaunchKernel, cuLaunchKernel_ptsz), P(cuLaunchKernelEx, cuLaunchKernelEx_ptsz),
	P(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz),
	E(cuGraphCreate), E(cuGraphDestroy), E(cuGraphExecDestroy), E(cuGraphGetNodes), E(cuGraphGetEdges),
	E(cuGraphNodeGetType), E(cuGraphClone), E(cuGraphNodeFindInClone), E(cuGraphDestroyNode), P(cuGraphLaunch, cuGraphLaunch_ptsz),
	E(cuGraphExecMemsetNodeSetParams),
};

static CUresult lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
		       CUdriverProcAddressQueryResult *status)
{
	if (symbol == NULL || pfn == NULL || flags > 3)
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;
	if (status != NULL)
		*status = CU_GET_PROC_ADDRESS_SUCCESS;
	if (strcmp(symbol, "cuGetProcAddress") == 0) {
		*pfn = cudaVersion >= 12000 ? (void *)cuGetProcAddress_v2 : (void *)cuGetProcAddress;
		return CUDA_SUCCESS;
	}
	if (strcmp(symbol, "cuGraphInstantiate") == 0) {
		*pfn = cudaVersion >= 12000 ? (void *)cuGraphInstantiateWithFlags : (void *)gs_cuGraphInstantiate_v2;
		return CUDA_SUCCESS;
	}
	if (strcmp(symbol, "cuGraphInstantiateWithFlags") == 0) {
		*pfn = (void *)cuGraphInstantiateWithFlags;
		return CUDA_SUCCESS;
	}
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
		if (strcmp(table[i].name, symbol) == 0) {
			*pfn = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && table[i].ptsz != NULL
				       ? table[i].ptsz
				       : table[i].fn;
			return CUDA_SUCCESS;
		}
	}
	if (status != NULL)
		*status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return CUDA_ERROR_NOT_FOUND;
}

GS_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
				       CUdriverProcAddressQueryResult *status)
{
	return lookup(symbol, pfn, cudaVersion, flags, status);
}

GS_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	return lookup(symbol, pfn, cudaVersion, flags, NULL);
}
