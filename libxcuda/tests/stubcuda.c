/* stubcuda.c — a tiny stand-in for libcuda.so.1 used by libxcuda's own unit
 * tests and benchmarks (the acceptance tests use gpusim). It models one GPU
 * as a single timeline: a kernel launched with gridDimX = n runs n µs after
 * whatever is queued, a graph exec handle h runs h µs; events take the
 * timeline's time, so event timing and sync behave like a real device.
 * A NULL function is a no-op launch (for measuring call overhead). */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t mem_total(void)
{
    const char *v = getenv("STUB_MEM");
    return v ? strtoull(v, NULL, 0) : (1ull << 30);
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t tail_ns;                  /* when the GPU becomes idle */
static _Atomic uint64_t busy_ns;          /* total kernel time queued */
static _Atomic uint64_t launches, frees_seen, mem_used, records;
static _Atomic uint64_t next_ptr = 0x7f0000000000ull;
static int initialised;
static struct CUctx_st { int dev; } the_ctx;
static _Thread_local CUcontext current;

struct CUevent_st {
    uint64_t t;
    int recorded;
};

/* The most work queued (the new launch's included) that a launch found since the last
 * stub_take_max_queued_ns. */
static uint64_t max_queued_ns;

/* Test hooks, not part of the CUDA API. */
EXPORT uint64_t stub_busy_ns(void) { return busy_ns; }
EXPORT uint64_t stub_take_max_queued_ns(void)
{
    pthread_mutex_lock(&mu);
    uint64_t m = max_queued_ns;
    max_queued_ns = 0;
    pthread_mutex_unlock(&mu);
    return m;
}
EXPORT uint64_t stub_launches(void) { return launches; }
EXPORT uint64_t stub_records(void) { return records; }
EXPORT uint64_t stub_frees_seen(void) { return frees_seen; }

/* Like a real driver's push buffer, the queue is bounded: a launch blocks
 * while more than 50 ms of work is queued. */
#define QUEUE_NS 50000000ull

static uint64_t enqueue(uint64_t dur)
{
    pthread_mutex_lock(&mu);
    uint64_t now = now_ns();
    if (tail_ns < now)
        tail_ns = now;
    if (tail_ns - now > QUEUE_NS) {
        uint64_t d = tail_ns - now - QUEUE_NS;
        struct timespec ts = {(time_t)(d / 1000000000ull), (long)(d % 1000000000ull)};
        nanosleep(&ts, NULL);
    }
    tail_ns += dur;
    uint64_t t = tail_ns;
    if (dur > 0 && t - now > max_queued_ns)
        max_queued_ns = t - now;
    pthread_mutex_unlock(&mu);
    busy_ns += dur;
    launches++;
    return t;
}

EXPORT CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    initialised = 1;
    current = &the_ctx;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDriverGetVersion(int *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = 12060;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetCount(int *n)
{
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    *n = 1;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGet(CUdevice *d, int i)
{
    if (!d || i != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = 0;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
    if (!name || len < 1 || d != 0)
        return CUDA_ERROR_INVALID_VALUE;
    strncpy(name, "stub GPU", (size_t)len - 1);
    name[len - 1] = 0;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t *b, CUdevice d)
{
    if (!b || d != 0)
        return CUDA_ERROR_INVALID_VALUE;
    *b = mem_total();
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxGetCurrent(CUcontext *c)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    *c = initialised ? (current ? current : &the_ctx) : NULL;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxGetDevice(CUdevice *d)
{
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    *d = 0;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxPushCurrent_v2(CUcontext c) { current = c; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *c)
{
    if (c)
        *c = current;
    current = &the_ctx;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxSetCurrent(CUcontext c)
{
    current = c;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxSynchronize(void)
{
    pthread_mutex_lock(&mu);
    uint64_t t = tail_ns;
    pthread_mutex_unlock(&mu);
    uint64_t n = now_ns();
    if (t > n) {
        struct timespec ts = {(time_t)((t - n) / 1000000000ull), (long)((t - n) % 1000000000ull)};
        nanosleep(&ts, NULL);
    }
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxCreate_v2(CUcontext *c, unsigned f, CUdevice d)
{
    (void)f;
    if (!c || d != 0)
        return CUDA_ERROR_INVALID_VALUE;
    *c = &the_ctx;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxDestroy_v2(CUcontext c) { return c ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }
EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned *f, int *a)
{
    if (d != 0 || !f || !a)
        return CUDA_ERROR_INVALID_VALUE;
    *f = 0;
    *a = initialised;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    if (!c || d != 0)
        return CUDA_ERROR_INVALID_VALUE;
    *c = &the_ctx;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { return d == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE; }
EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) { return d == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE; }
EXPORT CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st)
{
    (void)s;
    if (!st)
        return CUDA_ERROR_INVALID_VALUE;
    *st = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventCreate(CUevent *e, unsigned f)
{
    (void)f;
    if (!e)
        return CUDA_ERROR_INVALID_VALUE;
    *e = calloc(1, sizeof(struct CUevent_st));
    return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
EXPORT CUresult cuEventDestroy_v2(CUevent e)
{
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    free(e);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventRecord(CUevent e, CUstream s)
{
    (void)s;
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    e->t = enqueue(0);
    launches--;
    records++;
    e->recorded = 1;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventQuery(CUevent e)
{
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    return now_ns() >= e->t ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
EXPORT CUresult cuEventSynchronize(CUevent e)
{
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t n = now_ns();
    if (e->t > n) {
        uint64_t d = e->t - n;
        struct timespec ts = {(time_t)(d / 1000000000ull), (long)(d % 1000000000ull)};
        nanosleep(&ts, NULL);
    }
    return CUDA_SUCCESS;
}
EXPORT CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    if (!ms || !a || !b)
        return CUDA_ERROR_INVALID_VALUE;
    if (!a->recorded || !b->recorded)
        return CUDA_ERROR_INVALID_HANDLE;
    *ms = (float)((double)(b->t - a->t) / 1e6);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemGetInfo_v2(size_t *f, size_t *t)
{
    if (!f || !t)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t tot = mem_total(), used = mem_used;
    *t = tot;
    *f = used > tot ? 0 : tot - used;
    return CUDA_SUCCESS;
}
/* STUB_ALLOC_US makes allocations take that long, as real ones do (tests
 * that race processes need the calls to overlap). Read once. */
static long alloc_us = -1;

static CUresult do_alloc(CUdeviceptr *p, size_t n)
{
    if (!p || n == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (alloc_us < 0) {
        const char *v = getenv("STUB_ALLOC_US");
        alloc_us = v ? strtol(v, NULL, 10) : 0;
    }
    if (alloc_us > 0) {
        struct timespec ts = {0, alloc_us * 1000};
        nanosleep(&ts, NULL);
    }
    if (!initialised)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (mem_used + n > mem_total())
        return CUDA_ERROR_OUT_OF_MEMORY;
    mem_used += n;
    *p = atomic_fetch_add(&next_ptr, (n + 0xfffu) & ~(uint64_t)0xfff);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) { return do_alloc(p, n); }
EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t n, unsigned f) { (void)f; return do_alloc(p, n); }
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) { (void)s; return do_alloc(p, n); }
EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned e)
{
    (void)e;
    if (!pitch || !w || !h)
        return CUDA_ERROR_INVALID_VALUE;
    *pitch = (w + 511) & ~(size_t)511;
    return do_alloc(p, *pitch * h);
}
/* The stub does not remember sizes; frees only count (tests check them). */
EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
    frees_seen++;
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
    (void)s;
    return cuMemFree_v2(p);
}
EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n,
                            const CUmemAllocationProp *prop, unsigned long long f)
{
    (void)f;
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr p;
    CUresult r = do_alloc(&p, n);
    if (r == CUDA_SUCCESS)
        *h = p;
    return r;
}
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) { frees_seen++; return h ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t n, CUmemoryPool pool, CUstream s)
{
    (void)pool;
    (void)s;
    return do_alloc(p, n);
}
struct CUarray_st {
    int unused;
};
EXPORT CUresult cuArrayCreate_v2(CUarray *a, const CUDA_ARRAY_DESCRIPTOR *d)
{
    if (!a || !d || d->Width == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr p;
    CUresult r = do_alloc(&p, d->Width * (d->Height ? d->Height : 1) * 4 * d->NumChannels);
    if (r == CUDA_SUCCESS)
        *a = calloc(1, sizeof(struct CUarray_st));
    return r;
}
EXPORT CUresult cuArrayDestroy(CUarray a)
{
    if (!a)
        return CUDA_ERROR_INVALID_HANDLE;
    free(a);
    frees_seen++;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned sh, CUstream s, void **p,
                               void **x)
{
    (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)sh; (void)s; (void)p; (void)x;
    if (f == NULL)
        return CUDA_SUCCESS;
    enqueue((uint64_t)gx * 1000);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                    unsigned bx, unsigned by, unsigned bz, unsigned sh,
                                    CUstream s, void **p, void **x)
{
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, sh, s, p, x);
}
EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **p, void **x)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    return cuLaunchKernel(f, c->gridDimX, 1, 1, 1, 1, 1, 0, c->hStream, p, x);
}
/* Goes through the dynamic linker on purpose, as a driver that is not
 * linked -Bsymbolic would: with libxcuda preloaded this reaches libxcuda's
 * cuLaunchKernel from inside libxcuda's cuLaunchCooperativeKernel. */
EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                          unsigned bx, unsigned by, unsigned bz, unsigned sh,
                                          CUstream s, void **p)
{
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, CUstream, void **, void **) =
        (CUresult(*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, CUstream, void **, void **))dlsym(RTLD_DEFAULT, "cuLaunchKernel");
    if (launch == NULL)
        return CUDA_ERROR_NOT_FOUND;
    return launch(f, gx, gy, gz, bx, by, bz, sh, s, p, NULL);
}
EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s)
{
    (void)s;
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    enqueue((uint64_t)(uintptr_t)g * 1000);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGetErrorString(CUresult e, const char **s)
{
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    *s = e == CUDA_SUCCESS ? "no error" : "stub error";
    return CUDA_SUCCESS;
}
EXPORT CUresult cuGetExportTable(const void **t, const CUuuid *id)
{
    static const int table[4];
    (void)id;
    if (!t)
        return CUDA_ERROR_INVALID_VALUE;
    *t = table;
    return CUDA_SUCCESS;
}

/* Linked -Bsymbolic, like the real driver: the table holds the stub's own
 * functions even when an interposer is preloaded. Resolves names from an internal table, choosing the
 * variant from cudaVersion and flags. */
/* The CUDA 11.3 ABI, still exported by drivers under the plain name. */
EXPORT CUresult stub_gpa_v1(const char *sym, void **pfn, int ver, cuuint64_t flags)
    __asm__("cuGetProcAddress");
struct fn {
    const char *name;
    void *p;
};
#define F(n) {#n, (void *)n}
static const struct fn fns[] = {
    F(cuInit), F(cuDriverGetVersion), F(cuDeviceGetCount), F(cuDeviceGet), F(cuDeviceGetName),
    F(cuDeviceTotalMem_v2), F(cuCtxGetCurrent), F(cuCtxGetDevice), F(cuMemGetInfo_v2),
    F(cuMemAlloc_v2), F(cuMemAllocManaged), F(cuMemAllocAsync), F(cuMemAllocPitch_v2),
    F(cuMemFree_v2), F(cuMemFreeAsync), F(cuMemCreate), F(cuMemRelease), F(cuLaunchKernel),
    F(cuLaunchKernel_ptsz), F(cuLaunchKernelEx), F(cuLaunchCooperativeKernel), F(cuGraphLaunch),
    F(cuGetErrorString), F(cuGetExportTable), F(cuEventCreate), F(cuEventRecord),
    F(cuEventSynchronize), F(cuEventQuery), F(cuEventElapsedTime), F(cuEventDestroy_v2),
    F(cuGetProcAddress_v2), {"cuGetProcAddress", (void *)stub_gpa_v1},
    F(cuMemAllocFromPoolAsync), F(cuArrayCreate_v2), F(cuArrayDestroy),
    F(cuDevicePrimaryCtxRetain), F(cuCtxSetCurrent), F(cuCtxSynchronize),
};

static void *find(const char *name)
{
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        if (strcmp(fns[i].name, name) == 0)
            return fns[i].p;
    return NULL;
}

/* Test hook: the stub's own function, bypassing any interposer (the
 * baseline of the benchmarks). */
EXPORT void *stub_fn(const char *name) { return name ? find(name) : NULL; }

EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *st);

EXPORT CUresult stub_gpa_v1(const char *sym, void **pfn, int ver, cuuint64_t flags)
{
    return cuGetProcAddress_v2(sym, pfn, ver, flags, NULL);
}

EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *st)
{
    if (!sym || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    char buf[128];
    void *p = NULL;
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
        snprintf(buf, sizeof buf, "%s_ptsz", sym);
        p = find(buf);
    }
    if (strcmp(sym, "cuGetProcAddress") == 0)
        p = find(ver >= 12000 ? "cuGetProcAddress_v2" : "cuGetProcAddress");
    if (!p && ver >= 3020) {
        snprintf(buf, sizeof buf, "%s_v2", sym);
        p = find(buf);
    }
    if (!p)
        p = find(sym);
    *pfn = p;
    if (st)
        *st = p ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return p ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
