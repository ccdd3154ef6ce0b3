/* real.c — finds the real driver (libcuda.so.1) and the functions libxcuda
 * wraps or calls, through the real dlsym so the exported dlsym hook never
 * sees libxcuda's own lookups (no recursion). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "xcuda.h"

struct xc_real xc_real;
_Atomic int xc_resolved;

typedef void *(*dlsym_fn)(void *, const char *);
static _Atomic(dlsym_fn) real_dlsym_p;
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;
static void *libcuda;

/* Set by the constructor from XCUDA_REAL_LIBCUDA (tests point it at a stub). */
const char *xc_libcuda_path = "libcuda.so.1";

void *xc_real_dlsym(void *handle, const char *symbol)
{
    dlsym_fn f = atomic_load_explicit(&real_dlsym_p, memory_order_acquire);
    if (XC_UNLIKELY(f == NULL)) {
        /* dlvsym is not interposed, so this finds glibc's dlsym itself. */
        static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
        for (size_t i = 0; i < sizeof versions / sizeof versions[0] && f == NULL; i++)
            f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
        if (f == NULL)
            return NULL;
        atomic_store_explicit(&real_dlsym_p, f, memory_order_release);
    }
    return f(handle, symbol);
}

#define GET(field, name) xc_real.field = (__typeof__(xc_real.field))xc_real_dlsym(libcuda, name)

static void do_resolve(void)
{
    libcuda = dlopen(xc_libcuda_path, RTLD_LAZY | RTLD_LOCAL);
    if (libcuda == NULL) {
        xc_log("cannot load the CUDA driver %s: %s", xc_libcuda_path, dlerror());
        atomic_store_explicit(&xc_resolved, 1, memory_order_release);
        return;
    }
    GET(cuInit, "cuInit");
    GET(cuGetErrorString, "cuGetErrorString");
    GET(cuDeviceGetCount, "cuDeviceGetCount");
    GET(cuDeviceGet, "cuDeviceGet");
    GET(cuDeviceTotalMem, "cuDeviceTotalMem_v2");
    GET(cuCtxGetDevice, "cuCtxGetDevice");
    GET(cuDeviceGetAttribute, "cuDeviceGetAttribute");
    GET(cuCtxGetCurrent, "cuCtxGetCurrent");
    GET(cuCtxPushCurrent, "cuCtxPushCurrent_v2");
    GET(cuCtxPopCurrent, "cuCtxPopCurrent_v2");
    GET(cuCtxSynchronize, "cuCtxSynchronize");
    GET(cuCtxCreate_v2, "cuCtxCreate_v2");
    GET(cuCtxCreate_v3, "cuCtxCreate_v3");
    GET(cuCtxCreate_v4, "cuCtxCreate_v4");
    GET(cuCtxDestroy, "cuCtxDestroy_v2");
    GET(cuDevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState");
    GET(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    GET(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
    GET(cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset_v2");
    GET(cuStreamIsCapturing, "cuStreamIsCapturing");
    GET(cuEventCreate, "cuEventCreate");
    GET(cuEventDestroy, "cuEventDestroy_v2");
    GET(cuEventRecord, "cuEventRecord");
    GET(cuEventQuery, "cuEventQuery");
    GET(cuEventSynchronize, "cuEventSynchronize");
    GET(cuStreamSynchronize, "cuStreamSynchronize");
    GET(cuStreamSynchronize_ptsz, "cuStreamSynchronize_ptsz");
    GET(cuStreamQuery, "cuStreamQuery");
    GET(cuEventElapsedTime, "cuEventElapsedTime");
    GET(cuMemGetInfo, "cuMemGetInfo_v2");
    GET(cuMemAlloc, "cuMemAlloc_v2");
    GET(cuMemAllocPitch, "cuMemAllocPitch_v2");
    GET(cuMemAllocManaged, "cuMemAllocManaged");
    GET(cuMemFree, "cuMemFree_v2");
    GET(cuMemAllocAsync, "cuMemAllocAsync");
    GET(cuMemAllocAsync_ptsz, "cuMemAllocAsync_ptsz");
    GET(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync");
    GET(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync_ptsz");
    GET(cuMemFreeAsync, "cuMemFreeAsync");
    GET(cuMemFreeAsync_ptsz, "cuMemFreeAsync_ptsz");
    GET(cuMemCreate, "cuMemCreate");
    GET(cuMemRelease, "cuMemRelease");
    GET(cuArrayCreate, "cuArrayCreate_v2");
    GET(cuArray3DCreate, "cuArray3DCreate_v2");
    GET(cuArrayDestroy, "cuArrayDestroy");
    GET(cuLaunchKernel, "cuLaunchKernel");
    GET(cuLaunchKernel_ptsz, "cuLaunchKernel_ptsz");
    GET(cuLaunchKernelEx, "cuLaunchKernelEx");
    GET(cuLaunchKernelEx_ptsz, "cuLaunchKernelEx_ptsz");
    GET(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel");
    GET(cuLaunchCooperativeKernel_ptsz, "cuLaunchCooperativeKernel_ptsz");
    GET(cuGraphLaunch, "cuGraphLaunch");
    GET(cuGraphLaunch_ptsz, "cuGraphLaunch_ptsz");
    GET(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
    GET(cuMemcpyHtoDAsync_ptsz, "cuMemcpyHtoDAsync_v2_ptsz");
    GET(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
    GET(cuMemcpyDtoHAsync_ptsz, "cuMemcpyDtoHAsync_v2_ptsz");
    GET(cuMemcpyAsync, "cuMemcpyAsync");
    GET(cuMemcpyAsync_ptsz, "cuMemcpyAsync_ptsz");
    GET(cuMemcpyHtoD, "cuMemcpyHtoD_v2");
    GET(cuMemcpyHtoD_ptds, "cuMemcpyHtoD_v2_ptds");
    GET(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
    GET(cuMemcpyDtoH_ptds, "cuMemcpyDtoH_v2_ptds");
    GET(cuMemcpy, "cuMemcpy");
    GET(cuMemcpy_ptds, "cuMemcpy_ptds");
    GET(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
    GET(cuGraphInstantiate_v1, "cuGraphInstantiate");
    GET(cuGraphInstantiate_v2, "cuGraphInstantiate_v2");
    GET(cuGraphInstantiateWithParams, "cuGraphInstantiateWithParams");
    GET(cuGraphInstantiateWithParams_ptsz, "cuGraphInstantiateWithParams_ptsz");
    GET(cuGraphExecDestroy, "cuGraphExecDestroy");
    GET(cuGraphExecUpdate_v1, "cuGraphExecUpdate");
    GET(cuGraphExecUpdate_v2, "cuGraphExecUpdate_v2");
    GET(cuGraphExecKernelNodeSetParams_v1, "cuGraphExecKernelNodeSetParams");
    GET(cuGraphExecKernelNodeSetParams_v2, "cuGraphExecKernelNodeSetParams_v2");
    GET(cuGraphExecMemcpyNodeSetParams, "cuGraphExecMemcpyNodeSetParams");
    GET(cuGraphExecMemsetNodeSetParams, "cuGraphExecMemsetNodeSetParams");
    GET(cuGraphExecNodeSetParams, "cuGraphExecNodeSetParams");
    GET(cuGraphNodeSetEnabled, "cuGraphNodeSetEnabled");
    GET(cuGraphGetNodes, "cuGraphGetNodes");
    GET(cuGraphGetEdges, "cuGraphGetEdges");
    GET(cuGraphNodeGetType, "cuGraphNodeGetType");
    GET(cuGraphClone, "cuGraphClone");
    GET(cuGraphNodeFindInClone, "cuGraphNodeFindInClone");
    GET(cuGraphDestroyNode, "cuGraphDestroyNode");
    GET(cuGraphDestroy, "cuGraphDestroy");
    GET(cuStreamWaitEvent, "cuStreamWaitEvent");
    GET(cuDeviceGetDevResource, "cuDeviceGetDevResource");
    GET(cuDevSmResourceSplitByCount, "cuDevSmResourceSplitByCount");
    GET(cuDevResourceGenerateDesc, "cuDevResourceGenerateDesc");
    GET(cuGreenCtxCreate, "cuGreenCtxCreate");
    GET(cuGreenCtxDestroy, "cuGreenCtxDestroy");
    GET(cuCtxFromGreenCtx, "cuCtxFromGreenCtx");
    GET(cuGreenCtxStreamCreate, "cuGreenCtxStreamCreate");
    GET(cuGetProcAddress_v2, "cuGetProcAddress_v2");
    GET(cuGetProcAddress_v1, "cuGetProcAddress");
    atomic_store_explicit(&xc_resolved, 1, memory_order_release);
}

void xc_resolve(void)
{
    pthread_once(&resolve_once, do_resolve);
}

const struct xc_hook *xc_hook_by_name(const char *symbol)
{
    if (symbol == NULL || symbol[0] != 'c' || symbol[1] != 'u')
        return NULL;
    for (size_t i = 0; i < xc_nhooks; i++)
        if (strcmp(xc_hooks[i].name, symbol) == 0)
            return &xc_hooks[i];
    return NULL;
}

const struct xc_hook *xc_hook_by_real(void *fn)
{
    if (fn == NULL)
        return NULL;
    (void)XC_REAL(cuInit);
    for (size_t i = 0; i < xc_nhooks; i++)
        if (*xc_hooks[i].real == fn)
            return &xc_hooks[i];
    return NULL;
}
