/* entry.c — the ways into the driver that libxcuda covers besides the
 * exported symbols themselves: dlsym (exported under both glibc symbol
 * versions) and cuGetProcAddress/_v2. Both ask the real resolver first and
 * swap in a wrapper only for functions libxcuda hooks; everything else (and
 * cuGetExportTable, always) passes through untouched. Also cuInit (fail
 * closed, signal set-up) and context creation (for the drain). */
#include <dlfcn.h>
#include <string.h>

#include "xcuda.h"

extern const char *xc_libcuda_path;

CUresult xc_gpa_v1(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
    __asm__("cuGetProcAddress");
/* Named through asm so that NVIDIA's CUDA 13 header, which declares
 * cuCtxCreate_v4 with its CUctxCreateParams type, does not conflict. */
CUresult xc_ctx_create_v4(CUcontext *pctx, void *params, unsigned int flags, CUdevice dev)
    __asm__("cuCtxCreate_v4");

#define HOOK(sym, wrapper, field) {sym, (void *)(wrapper), (void **)&xc_real.field}

const struct xc_hook xc_hooks[] = {
    HOOK("cuInit", cuInit, cuInit),
    HOOK("cuGetProcAddress", xc_gpa_v1, cuGetProcAddress_v1),
    HOOK("cuGetProcAddress_v2", cuGetProcAddress_v2, cuGetProcAddress_v2),
    HOOK("cuCtxCreate_v2", cuCtxCreate_v2, cuCtxCreate_v2),
    HOOK("cuCtxCreate_v3", cuCtxCreate_v3, cuCtxCreate_v3),
    HOOK("cuCtxCreate_v4", xc_ctx_create_v4, cuCtxCreate_v4),
    HOOK("cuCtxDestroy_v2", cuCtxDestroy_v2, cuCtxDestroy),
    HOOK("cuMemGetInfo_v2", cuMemGetInfo_v2, cuMemGetInfo),
    HOOK("cuMemAlloc_v2", cuMemAlloc_v2, cuMemAlloc),
    HOOK("cuMemAllocPitch_v2", cuMemAllocPitch_v2, cuMemAllocPitch),
    HOOK("cuMemAllocManaged", cuMemAllocManaged, cuMemAllocManaged),
    HOOK("cuMemFree_v2", cuMemFree_v2, cuMemFree),
    HOOK("cuMemAllocAsync", cuMemAllocAsync, cuMemAllocAsync),
    HOOK("cuMemAllocAsync_ptsz", cuMemAllocAsync_ptsz, cuMemAllocAsync_ptsz),
    HOOK("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync),
    HOOK("cuMemAllocFromPoolAsync_ptsz", cuMemAllocFromPoolAsync_ptsz,
         cuMemAllocFromPoolAsync_ptsz),
    HOOK("cuMemFreeAsync", cuMemFreeAsync, cuMemFreeAsync),
    HOOK("cuMemFreeAsync_ptsz", cuMemFreeAsync_ptsz, cuMemFreeAsync_ptsz),
    HOOK("cuMemCreate", cuMemCreate, cuMemCreate),
    HOOK("cuMemRelease", cuMemRelease, cuMemRelease),
    HOOK("cuArrayCreate_v2", cuArrayCreate_v2, cuArrayCreate),
    HOOK("cuArray3DCreate_v2", cuArray3DCreate_v2, cuArray3DCreate),
    HOOK("cuArrayDestroy", cuArrayDestroy, cuArrayDestroy),
    HOOK("cuLaunchKernel", cuLaunchKernel, cuLaunchKernel),
    HOOK("cuLaunchKernel_ptsz", cuLaunchKernel_ptsz, cuLaunchKernel_ptsz),
    HOOK("cuLaunchKernelEx", cuLaunchKernelEx, cuLaunchKernelEx),
    HOOK("cuLaunchKernelEx_ptsz", cuLaunchKernelEx_ptsz, cuLaunchKernelEx_ptsz),
    HOOK("cuLaunchCooperativeKernel", cuLaunchCooperativeKernel, cuLaunchCooperativeKernel),
    HOOK("cuLaunchCooperativeKernel_ptsz", cuLaunchCooperativeKernel_ptsz,
         cuLaunchCooperativeKernel_ptsz),
    HOOK("cuGraphLaunch", cuGraphLaunch, cuGraphLaunch),
    HOOK("cuGraphLaunch_ptsz", cuGraphLaunch_ptsz, cuGraphLaunch_ptsz),
    HOOK("cuMemcpyHtoDAsync_v2", cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync),
    HOOK("cuMemcpyHtoDAsync_v2_ptsz", cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync_ptsz),
    HOOK("cuMemcpyDtoHAsync_v2", cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync),
    HOOK("cuMemcpyDtoHAsync_v2_ptsz", cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync_ptsz),
    HOOK("cuMemcpyAsync", cuMemcpyAsync, cuMemcpyAsync),
    HOOK("cuMemcpyAsync_ptsz", cuMemcpyAsync_ptsz, cuMemcpyAsync_ptsz),
    HOOK("cuMemcpyHtoD_v2", cuMemcpyHtoD_v2, cuMemcpyHtoD),
    HOOK("cuMemcpyHtoD_v2_ptds", cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD_ptds),
    HOOK("cuMemcpyDtoH_v2", cuMemcpyDtoH_v2, cuMemcpyDtoH),
    HOOK("cuMemcpyDtoH_v2_ptds", cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH_ptds),
    HOOK("cuMemcpy", cuMemcpy, cuMemcpy),
    HOOK("cuMemcpy_ptds", cuMemcpy_ptds, cuMemcpy_ptds),
    HOOK("cuGraphInstantiate", xc_graph_instantiate_v1, cuGraphInstantiate_v1),
    HOOK("cuGraphInstantiate_v2", cuGraphInstantiate_v2, cuGraphInstantiate_v2),
    HOOK("cuGraphInstantiateWithFlags", cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags),
    HOOK("cuGraphInstantiateWithParams", cuGraphInstantiateWithParams,
         cuGraphInstantiateWithParams),
    HOOK("cuGraphInstantiateWithParams_ptsz", cuGraphInstantiateWithParams_ptsz,
         cuGraphInstantiateWithParams_ptsz),
    HOOK("cuGraphExecDestroy", cuGraphExecDestroy, cuGraphExecDestroy),
    HOOK("cuGraphExecUpdate", xc_graph_exec_update_v1, cuGraphExecUpdate_v1),
    HOOK("cuGraphExecUpdate_v2", xc_graph_exec_update_v2, cuGraphExecUpdate_v2),
    HOOK("cuGraphExecKernelNodeSetParams", xc_graph_kernel_params_v1,
         cuGraphExecKernelNodeSetParams_v1),
    HOOK("cuGraphExecKernelNodeSetParams_v2", xc_graph_kernel_params_v2,
         cuGraphExecKernelNodeSetParams_v2),
    HOOK("cuGraphExecMemcpyNodeSetParams", xc_graph_memcpy_params,
         cuGraphExecMemcpyNodeSetParams),
    HOOK("cuGraphExecMemsetNodeSetParams", xc_graph_memset_params,
         cuGraphExecMemsetNodeSetParams),
    HOOK("cuGraphExecNodeSetParams", xc_graph_node_params, cuGraphExecNodeSetParams),
    HOOK("cuGraphNodeSetEnabled", cuGraphNodeSetEnabled, cuGraphNodeSetEnabled),
    HOOK("cuCtxSynchronize", cuCtxSynchronize, cuCtxSynchronize),
    HOOK("cuStreamSynchronize", cuStreamSynchronize, cuStreamSynchronize),
    HOOK("cuStreamSynchronize_ptsz", cuStreamSynchronize_ptsz, cuStreamSynchronize_ptsz),
    HOOK("cuEventSynchronize", cuEventSynchronize, cuEventSynchronize),
};
const size_t xc_nhooks = sizeof xc_hooks / sizeof xc_hooks[0];

/* ---- cuGetProcAddress ---- */

/* When the driver hands back a pointer that is not one of its exported
 * functions, the symbol name, cudaVersion and flags say which exported
 * variant it stands for (NVIDIA's versioning: _v2 memory functions since
 * CUDA 3.2, per-thread-stream variants on request). */
struct gpa_name {
    const char *base;
    int min_version; /* the variant below applies from this cudaVersion */
    const char *legacy, *ptsz;
};
static const struct gpa_name gpa_names[] = {
    {"cuInit", 0, "cuInit", NULL},
    {"cuGetProcAddress", 12000, "cuGetProcAddress_v2", NULL},
    {"cuGetProcAddress", 0, "cuGetProcAddress", NULL},
    {"cuCtxDestroy", 4000, "cuCtxDestroy_v2", NULL},
    {"cuMemGetInfo", 3020, "cuMemGetInfo_v2", NULL},
    {"cuMemAlloc", 3020, "cuMemAlloc_v2", NULL},
    {"cuMemAllocPitch", 3020, "cuMemAllocPitch_v2", NULL},
    {"cuMemFree", 3020, "cuMemFree_v2", NULL},
    {"cuMemAllocManaged", 0, "cuMemAllocManaged", NULL},
    {"cuMemAllocAsync", 0, "cuMemAllocAsync", "cuMemAllocAsync_ptsz"},
    {"cuMemAllocFromPoolAsync", 0, "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz"},
    {"cuMemFreeAsync", 0, "cuMemFreeAsync", "cuMemFreeAsync_ptsz"},
    {"cuMemCreate", 0, "cuMemCreate", NULL},
    {"cuMemRelease", 0, "cuMemRelease", NULL},
    {"cuArrayCreate", 3020, "cuArrayCreate_v2", NULL},
    {"cuArray3DCreate", 3020, "cuArray3DCreate_v2", NULL},
    {"cuArrayDestroy", 0, "cuArrayDestroy", NULL},
    {"cuLaunchKernel", 0, "cuLaunchKernel", "cuLaunchKernel_ptsz"},
    {"cuLaunchKernelEx", 0, "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz"},
    {"cuLaunchCooperativeKernel", 0, "cuLaunchCooperativeKernel",
     "cuLaunchCooperativeKernel_ptsz"},
    {"cuGraphLaunch", 0, "cuGraphLaunch", "cuGraphLaunch_ptsz"},
    {"cuMemcpyHtoDAsync", 3020, "cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync_v2_ptsz"},
    {"cuMemcpyDtoHAsync", 3020, "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoHAsync_v2_ptsz"},
    {"cuMemcpyAsync", 0, "cuMemcpyAsync", "cuMemcpyAsync_ptsz"},
    {"cuMemcpyHtoD", 3020, "cuMemcpyHtoD_v2", "cuMemcpyHtoD_v2_ptds"},
    {"cuMemcpyDtoH", 3020, "cuMemcpyDtoH_v2", "cuMemcpyDtoH_v2_ptds"},
    {"cuMemcpy", 0, "cuMemcpy", "cuMemcpy_ptds"},
    {"cuGraphInstantiate", 12000, "cuGraphInstantiateWithFlags", NULL},
    {"cuGraphInstantiate", 11000, "cuGraphInstantiate_v2", NULL},
    {"cuGraphInstantiate", 0, "cuGraphInstantiate", NULL},
    {"cuGraphInstantiateWithFlags", 0, "cuGraphInstantiateWithFlags", NULL},
    {"cuGraphInstantiateWithParams", 0, "cuGraphInstantiateWithParams",
     "cuGraphInstantiateWithParams_ptsz"},
    {"cuGraphExecDestroy", 0, "cuGraphExecDestroy", NULL},
    {"cuGraphExecUpdate", 12000, "cuGraphExecUpdate_v2", NULL},
    {"cuGraphExecUpdate", 0, "cuGraphExecUpdate", NULL},
    {"cuGraphExecKernelNodeSetParams", 12000, "cuGraphExecKernelNodeSetParams_v2", NULL},
    {"cuGraphExecKernelNodeSetParams", 0, "cuGraphExecKernelNodeSetParams", NULL},
    {"cuGraphExecMemcpyNodeSetParams", 0, "cuGraphExecMemcpyNodeSetParams", NULL},
    {"cuGraphExecMemsetNodeSetParams", 0, "cuGraphExecMemsetNodeSetParams", NULL},
    {"cuGraphExecNodeSetParams", 0, "cuGraphExecNodeSetParams", NULL},
    {"cuGraphNodeSetEnabled", 0, "cuGraphNodeSetEnabled", NULL},
    {"cuCtxSynchronize", 0, "cuCtxSynchronize", NULL},
    {"cuStreamSynchronize", 0, "cuStreamSynchronize", "cuStreamSynchronize_ptsz"},
    {"cuEventSynchronize", 0, "cuEventSynchronize", NULL},
};

static void *wrap_proc(const char *symbol, void *fn, int cudaVersion, cuuint64_t flags)
{
    if (fn == NULL || symbol == NULL || strcmp(symbol, "cuGetExportTable") == 0)
        return fn;
    const struct xc_hook *h = xc_hook_by_real(fn);
    if (h != NULL)
        return h->wrapper;
    for (size_t i = 0; i < sizeof gpa_names / sizeof gpa_names[0]; i++) {
        const struct gpa_name *g = &gpa_names[i];
        if (strcmp(g->base, symbol) != 0 || cudaVersion < g->min_version)
            continue;
        const char *name =
            (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && g->ptsz ? g->ptsz
                                                                                : g->legacy;
        h = xc_hook_by_name(name);
        if (h != NULL && *h->real != NULL) {
            xc_log("cuGetProcAddress(%s, %d): wrapping by name as %s", symbol, cudaVersion,
                   name);
            return h->wrapper;
        }
        break;
    }
    return fn;
}

XC_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                       cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    xc_gpa2_fn real = XC_REAL(cuGetProcAddress_v2);
    if (real == NULL)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = real(symbol, pfn, cudaVersion, flags, status);
    if (r == CUDA_SUCCESS && pfn != NULL)
        *pfn = wrap_proc(symbol, *pfn, cudaVersion, flags);
    return r;
}

XC_EXPORT CUresult xc_gpa_v1(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    xc_gpa1_fn real = XC_REAL(cuGetProcAddress_v1);
    if (real == NULL)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = real(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn != NULL)
        *pfn = wrap_proc(symbol, *pfn, cudaVersion, flags);
    return r;
}

/* ---- dlsym ---- */

typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn dlsym_new, dlsym_old;

static int from_driver(void *p)
{
    Dl_info info;
    if (dladdr(p, &info) == 0 || info.dli_fname == NULL)
        return 0;
    const char *base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    const char *want = strrchr(xc_libcuda_path, '/');
    want = want ? want + 1 : xc_libcuda_path;
    return strncmp(base, "libcuda.so", 10) == 0 || strcmp(base, want) == 0;
}

/* The answer the real dlsym gave, or libxcuda's wrapper when that answer
 * is a hooked driver function (or the wrapper itself). */
static void *filter(const char *symbol, void *p)
{
    if (p == NULL)
        return p;
    const struct xc_hook *h = xc_hook_by_name(symbol);
    if (h == NULL || (p != h->wrapper && !from_driver(p)))
        return p;
    return h->wrapper;
}

/* glibc's own dlsym under the version a caller was linked against, else the other
 * one; looked up once (dlvsym is not interposed, and RTLD_NEXT here is relative
 * to libxcuda, whichever of its functions asks). */
static dlsym_fn glibc_dlsym(dlsym_fn *cache, const char *want, const char *other)
{
    dlsym_fn f = *cache;
    if (XC_LIKELY(f != NULL))
        return f;
    f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", want);
    if (f == NULL)
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", other);
    *cache = f;
    return f;
}

/* RTLD_NEXT is relative to the caller, which glibc finds from the return
 * address: those lookups are tail calls so the caller's address is kept. */
XC_EXPORT void *xc_dlsym_2_34(void *handle, const char *symbol)
{
    dlsym_fn real = glibc_dlsym(&dlsym_new, "GLIBC_2.34", "GLIBC_2.2.5");
    if (real == NULL)
        return NULL;
    if (handle == RTLD_NEXT)
        return real(handle, symbol);
    return filter(symbol, real(handle, symbol));
}

XC_EXPORT void *xc_dlsym_2_2_5(void *handle, const char *symbol)
{
    dlsym_fn real = glibc_dlsym(&dlsym_old, "GLIBC_2.2.5", "GLIBC_2.34");
    if (real == NULL)
        return NULL;
    if (handle == RTLD_NEXT)
        return real(handle, symbol);
    return filter(symbol, real(handle, symbol));
}

#if defined(__x86_64__)
__asm__(".symver xc_dlsym_2_2_5, dlsym@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver xc_dlsym_2_2_5, dlsym@GLIBC_2.17");
#else
#error "libxcuda: add this architecture's base glibc version for dlsym"
#endif
__asm__(".symver xc_dlsym_2_34, dlsym@@GLIBC_2.34");

/* ---- cuInit and contexts ---- */

XC_EXPORT CUresult cuInit(unsigned int flags)
{
    xc_ensure_slot();
    if (xc.fail_closed) {
        xc_log("refusing cuInit: no usable control block and the policy fails closed");
        return CUDA_ERROR_NOT_PERMITTED;
    }
    CUresult (*real)(unsigned) = XC_REAL(cuInit);
    if (real == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(flags);
    /* Without a block the process is not managed: pass through entirely. */
    if (r == CUDA_SUCCESS && xc.lim != NULL)
        xc_signals_install();
    return r;
}

XC_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    __typeof__(xc_real.cuCtxCreate_v2) real = XC_REAL(cuCtxCreate_v2);
    if (real == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(pctx, flags, dev);
    if (r == CUDA_SUCCESS && pctx != NULL)
        xc_track_context(*pctx, 1);
    return r;
}

XC_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n,
                                  unsigned int flags, CUdevice dev)
{
    __typeof__(xc_real.cuCtxCreate_v3) real = XC_REAL(cuCtxCreate_v3);
    if (real == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(pctx, params, n, flags, dev);
    if (r == CUDA_SUCCESS && pctx != NULL)
        xc_track_context(*pctx, 1);
    return r;
}

XC_EXPORT CUresult xc_ctx_create_v4(CUcontext *pctx, void *params, unsigned int flags,
                                    CUdevice dev)
{
    __typeof__(xc_real.cuCtxCreate_v4) real = XC_REAL(cuCtxCreate_v4);
    if (real == NULL)
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult r = real(pctx, params, flags, dev);
    if (r == CUDA_SUCCESS && pctx != NULL)
        xc_track_context(*pctx, 1);
    return r;
}

XC_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    __typeof__(xc_real.cuCtxDestroy) real = XC_REAL(cuCtxDestroy);
    if (real == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(ctx);
    if (r == CUDA_SUCCESS)
        xc_track_context(ctx, 0);
    return r;
}
