/* mem.c — device-memory caps. A reservation is a compare-and-swap on the
 * container's shared per-device counter made *before* the real allocation
 * and rolled back if the driver fails, so processes racing to allocate can
 * never jointly pass the cap. A process-local table remembers what each
 * pointer/handle/array reserved so its free returns exactly that; frees of
 * pointers libxcuda never saw go straight to the driver. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "xcuda.h"

enum { K_EMPTY = 0, K_PTR = 1, K_HANDLE = 2, K_ARRAY = 3, K_TOMB = 0xff };

struct ent {
    uint64_t key;
    uint64_t size;
    int32_t dev;
    uint32_t kind;
};

_Thread_local int xc_tls_inside __attribute__((tls_model("initial-exec")));

static pthread_mutex_t tab_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ent *tab;
static size_t tab_cap, tab_used; /* used counts live entries and tombstones */

static size_t hash(uint64_t key, uint32_t kind)
{
    uint64_t h = (key ^ ((uint64_t)kind << 56)) * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 17);
}

static int tab_grow(void)
{
    size_t ncap = tab_cap ? tab_cap * 2 : 1024;
    struct ent *n = calloc(ncap, sizeof *n);
    if (n == NULL)
        return -1;
    size_t live = 0;
    for (size_t i = 0; i < tab_cap; i++) {
        struct ent *e = &tab[i];
        if (e->kind == K_EMPTY || e->kind == K_TOMB)
            continue;
        size_t j = hash(e->key, e->kind) & (ncap - 1);
        while (n[j].kind != K_EMPTY)
            j = (j + 1) & (ncap - 1);
        n[j] = *e;
        live++;
    }
    free(tab);
    tab = n;
    tab_cap = ncap;
    tab_used = live;
    return 0;
}

static int track(uint32_t kind, uint64_t key, int dev, uint64_t size)
{
    pthread_mutex_lock(&tab_mu);
    int rc = 0;
    if ((tab_used + 1) * 4 >= tab_cap * 3 && tab_grow() != 0) {
        rc = -1;
    } else {
        size_t j = hash(key, kind) & (tab_cap - 1);
        while (tab[j].kind != K_EMPTY && tab[j].kind != K_TOMB)
            j = (j + 1) & (tab_cap - 1);
        if (tab[j].kind == K_EMPTY)
            tab_used++;
        tab[j] = (struct ent){.key = key, .size = size, .dev = dev, .kind = kind};
    }
    pthread_mutex_unlock(&tab_mu);
    return rc;
}

/* Removes and returns an entry; 0 if libxcuda never saw that key. */
static int untrack(uint32_t kind, uint64_t key, int *dev, uint64_t *size)
{
    int found = 0;
    pthread_mutex_lock(&tab_mu);
    if (tab_cap > 0) {
        size_t j = hash(key, kind) & (tab_cap - 1);
        for (size_t probes = 0; probes < tab_cap && tab[j].kind != K_EMPTY; probes++) {
            if (tab[j].kind == kind && tab[j].key == key) {
                *dev = tab[j].dev;
                *size = tab[j].size;
                tab[j].kind = K_TOMB;
                found = 1;
                break;
            }
            j = (j + 1) & (tab_cap - 1);
        }
    }
    pthread_mutex_unlock(&tab_mu);
    return found;
}

void xc_mem_atfork_child(void)
{
    /* The child has no CUDA state of its own; the parent's entries would
     * otherwise be "freed" against the parent's reservations. */
    pthread_mutex_init(&tab_mu, NULL);
    free(tab);
    tab = NULL;
    tab_cap = tab_used = 0;
}

static int accounting(int dev)
{
    return xc.use != NULL && dev >= 0 && dev < XCUDA_MAX_DEVICES;
}

/* 0: reserved; 1: not counted (no process slot and no cap); -1: refused. A process
 * without a slot (all XCUDA_MAX_PROCS taken by live processes) has nowhere to record
 * what it holds, so nothing could return it if it died: under a cap it is refused. */
static int reserve(int dev, uint64_t bytes)
{
    if (!accounting(dev))
        return 1;
    xc_ensure_slot();
    uint64_t *ctr = &xc.use->reserved_bytes[dev];
    for (int attempt = 0; attempt < 2; attempt++) {
        uint64_t limit = XC_LOAD(&xc.lim->mem_limit[dev]);
        if (xc.me == NULL)
            return limit == 0 ? 1 : -1;
        xc_mem_lock();
        uint64_t cur = XC_LOAD(ctr);
        if (limit == 0 || (bytes <= limit && cur <= limit - bytes)) {
            uint64_t now = cur + bytes < cur ? UINT64_MAX : cur + bytes;
            XC_STORE(ctr, now);
            uint64_t mine = XC_LOAD(&xc.me->reserved_bytes[dev]);
            XC_STORE(&xc.me->reserved_bytes[dev], mine + bytes < mine ? UINT64_MAX : mine + bytes);
            if (now > XC_LOAD(&xc.use->peak_bytes[dev]))
                XC_STORE(&xc.use->peak_bytes[dev], now);
            xc_mem_unlock();
            return 0;
        }
        xc_mem_unlock();
        /* Over the cap: memory of processes that died without exiting may
         * still be counted; reclaim it once and retry. */
        if (attempt == 0 && xc_reap_dead_slots() == 0)
            break;
    }
    XC_ADD(&xc.use->oom_denials, 1);
    xc_log("device %d: %llu bytes refused at the cap", dev, (unsigned long long)bytes);
    return -1;
}

/* Returns a reservation: both counters change in one critical section, so a death
 * in the middle is repaired by the next holder's recount (see xc_mem_lock). */
static void unreserve(int dev, uint64_t bytes)
{
    if (!accounting(dev) || bytes == 0 || xc.me == NULL)
        return;
    xc_mem_lock();
    uint64_t *mine = &xc.me->reserved_bytes[dev];
    uint64_t have = XC_LOAD(mine);
    /* Never return more than this process holds: the rest is not its to return. */
    uint64_t b = bytes < have ? bytes : have;
    XC_STORE(mine, have - b);
    uint64_t *ctr = &xc.use->reserved_bytes[dev];
    uint64_t cur = XC_LOAD(ctr);
    XC_STORE(ctr, cur > b ? cur - b : 0);
    xc_mem_unlock();
}

static int current_device(void)
{
    CUdevice d = -1;
    CUresult (*f)(CUdevice *) = XC_REAL(cuCtxGetDevice);
    if (f == NULL || f(&d) != CUDA_SUCCESS)
        return -1;
    return (int)d;
}

/* Common path of every counted allocation: reserve, allocate, track. */
#define COUNTED_ALLOC(kind, dev, bytes, keyexpr, call)                        \
    do {                                                                      \
        if (XC_PASS())                                                        \
            return (call);                                                    \
        int rv_ = reserve((dev), (bytes));                                    \
        if (rv_ < 0)                                                          \
            return CUDA_ERROR_OUT_OF_MEMORY;                                  \
        xc_tls_inside = 1;                                                    \
        CUresult r_ = (call);                                                 \
        xc_tls_inside = 0;                                                    \
        if (rv_ != 0)                                                         \
            return r_;                                                        \
        if (r_ != CUDA_SUCCESS) {                                             \
            unreserve((dev), (bytes));                                        \
            return r_;                                                        \
        }                                                                     \
        if (track((kind), (uint64_t)(keyexpr), (dev), (bytes)) != 0)          \
            unreserve((dev), (bytes));                                        \
        return r_;                                                            \
    } while (0)

/* Common path of every counted free: untrack, free, then drop the reservation,
 * or track the object again when the driver refused to free it. The driver
 * may call a free re-entrantly from inside another hooked call, so only the
 * outermost call clears the guard. */
#define COUNTED_FREE(kind, key, counted, call)                                \
    do {                                                                      \
        int dev_;                                                             \
        uint64_t size_;                                                       \
        int known_ = (counted) && !XC_PASS() && untrack((kind), (key), &dev_, &size_); \
        int outer_ = !xc_tls_inside;                                          \
        xc_tls_inside = 1;                                                    \
        CUresult r_ = (call);                                                 \
        if (outer_)                                                           \
            xc_tls_inside = 0;                                                \
        if (known_) {                                                         \
            if (r_ == CUDA_SUCCESS)                                           \
                unreserve(dev_, size_);                                       \
            else                                                              \
                track((kind), (key), dev_, size_);                            \
        }                                                                     \
        return r_;                                                            \
    } while (0)

#define NEED(fn)                                                              \
    __typeof__(xc_real.fn) real_ = XC_REAL(fn);                               \
    if (real_ == NULL)                                                        \
        return CUDA_ERROR_NOT_INITIALIZED

XC_EXPORT CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
    NEED(cuMemAlloc);
    if (dptr == NULL || bytesize == 0 || XC_PASS())
        return real_(dptr, bytesize);
    int dev = current_device();
    COUNTED_ALLOC(K_PTR, dev, bytesize, *dptr, real_(dptr, bytesize));
}

XC_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    NEED(cuMemAllocManaged);
    if (dptr == NULL || bytesize == 0 || XC_PASS())
        return real_(dptr, bytesize, flags);
    int dev = current_device();
    COUNTED_ALLOC(K_PTR, dev, bytesize, *dptr, real_(dptr, bytesize, flags));
}

XC_EXPORT CUresult cuMemAllocPitch(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                   size_t Height, unsigned int ElementSizeBytes)
{
    NEED(cuMemAllocPitch);
    if (dptr == NULL || pPitch == NULL || WidthInBytes == 0 || Height == 0 || XC_PASS())
        return real_(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    /* The pitch is known only afterwards: reserve a 512-byte-aligned
     * estimate, then settle the difference. */
    size_t wpad = (WidthInBytes + 511u) & ~(size_t)511u;
    if (wpad < WidthInBytes || Height > SIZE_MAX / wpad)
        return CUDA_ERROR_OUT_OF_MEMORY;
    int dev = current_device();
    uint64_t est = (uint64_t)wpad * Height;
    int rv = reserve(dev, est);
    if (rv < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    xc_tls_inside = 1;
    CUresult r = real_(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    xc_tls_inside = 0;
    if (rv != 0)
        return r;
    if (r != CUDA_SUCCESS) {
        unreserve(dev, est);
        return r;
    }
    uint64_t actual = (uint64_t)*pPitch * Height;
    if (actual > est) {
        if (reserve(dev, actual - est) != 0) {
            __typeof__(xc_real.cuMemFree) fr = XC_REAL(cuMemFree);
            if (fr)
                fr(*dptr);
            unreserve(dev, est);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    } else {
        unreserve(dev, est - actual);
    }
    if (track(K_PTR, *dptr, dev, actual) != 0)
        unreserve(dev, actual);
    return r;
}

static CUresult free_ptr(CUdeviceptr dptr, CUresult (*real)(CUdeviceptr, CUstream),
                         CUstream s, CUresult (*real_sync)(CUdeviceptr))
{
    COUNTED_FREE(K_PTR, dptr, dptr != 0, real ? real(dptr, s) : real_sync(dptr));
}

XC_EXPORT CUresult cuMemFree(CUdeviceptr dptr)
{
    NEED(cuMemFree);
    return free_ptr(dptr, NULL, NULL, real_);
}

static CUresult alloc_async(xc_alloc_async_fn real, CUdeviceptr *dptr, size_t bytesize,
                            CUstream s)
{
    if (real == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dptr == NULL || bytesize == 0 || XC_PASS())
        return real(dptr, bytesize, s);
    int dev = current_device();
    COUNTED_ALLOC(K_PTR, dev, bytesize, *dptr, real(dptr, bytesize, s));
}

XC_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(XC_REAL(cuMemAllocAsync), dptr, bytesize, hStream);
}

XC_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(XC_REAL(cuMemAllocAsync_ptsz), dptr, bytesize, hStream);
}

static CUresult alloc_pool(xc_alloc_pool_fn real, CUdeviceptr *dptr, size_t bytesize,
                           CUmemoryPool pool, CUstream s)
{
    if (real == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dptr == NULL || bytesize == 0 || XC_PASS())
        return real(dptr, bytesize, pool, s);
    int dev = current_device();
    COUNTED_ALLOC(K_PTR, dev, bytesize, *dptr, real(dptr, bytesize, pool, s));
}

XC_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                           CUstream hStream)
{
    return alloc_pool(XC_REAL(cuMemAllocFromPoolAsync), dptr, bytesize, pool, hStream);
}

XC_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                CUmemoryPool pool, CUstream hStream)
{
    return alloc_pool(XC_REAL(cuMemAllocFromPoolAsync_ptsz), dptr, bytesize, pool, hStream);
}

XC_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    xc_free_async_fn f = XC_REAL(cuMemFreeAsync);
    if (f == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    return free_ptr(dptr, f, hStream, NULL);
}

XC_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    xc_free_async_fn f = XC_REAL(cuMemFreeAsync_ptsz);
    if (f == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    return free_ptr(dptr, f, hStream, NULL);
}

XC_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                               const CUmemAllocationProp *prop, unsigned long long flags)
{
    NEED(cuMemCreate);
    if (handle == NULL || prop == NULL || size == 0 || XC_PASS() ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return real_(handle, size, prop, flags);
    int dev = prop->location.id;
    COUNTED_ALLOC(K_HANDLE, dev, size, *handle, real_(handle, size, prop, flags));
}

XC_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    NEED(cuMemRelease);
    COUNTED_FREE(K_HANDLE, handle, 1, real_(handle));
}

static uint64_t format_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        return 2;
    default:
        return 4;
    }
}

/* Arrays are laid out by the driver; count the payload (a lower bound). */
static int array_bytes(uint64_t w, uint64_t h, uint64_t d, unsigned ch, CUarray_format f,
                       uint64_t *out)
{
    uint64_t b = format_bytes(f) * (ch ? ch : 1);
    uint64_t dims[3] = {w, h ? h : 1, d ? d : 1};
    for (int i = 0; i < 3; i++) {
        if (dims[i] != 0 && b > UINT64_MAX / dims[i])
            return -1;
        b *= dims[i];
    }
    *out = b;
    return 0;
}

XC_EXPORT CUresult cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    NEED(cuArrayCreate);
    uint64_t bytes;
    if (pHandle == NULL || desc == NULL || XC_PASS())
        return real_(pHandle, desc);
    if (array_bytes(desc->Width, desc->Height, 1, desc->NumChannels, desc->Format, &bytes) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    int dev = current_device();
    COUNTED_ALLOC(K_ARRAY, dev, bytes, (uintptr_t)*pHandle, real_(pHandle, desc));
}

XC_EXPORT CUresult cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    NEED(cuArray3DCreate);
    uint64_t bytes;
    if (pHandle == NULL || desc == NULL || XC_PASS())
        return real_(pHandle, desc);
    if (array_bytes(desc->Width, desc->Height, desc->Depth, desc->NumChannels, desc->Format,
                    &bytes) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    int dev = current_device();
    COUNTED_ALLOC(K_ARRAY, dev, bytes, (uintptr_t)*pHandle, real_(pHandle, desc));
}

XC_EXPORT CUresult cuArrayDestroy(CUarray hArray)
{
    NEED(cuArrayDestroy);
    COUNTED_FREE(K_ARRAY, (uintptr_t)hArray, hArray != NULL, real_(hArray));
}

XC_EXPORT CUresult cuMemGetInfo(size_t *free_b, size_t *total_b)
{
    NEED(cuMemGetInfo);
    CUresult r = real_(free_b, total_b);
    if (r != CUDA_SUCCESS || XC_PASS() || free_b == NULL || total_b == NULL)
        return r;
    int dev = current_device();
    if (!accounting(dev))
        return r;
    uint64_t limit = XC_LOAD(&xc.lim->mem_limit[dev]);
    if (limit == 0)
        return r;
    /* The container's view: total is the cap, free is what the cap leaves,
     * never more than the device really has free, never below zero. */
    uint64_t used = XC_LOAD(&xc.use->reserved_bytes[dev]);
    uint64_t total = limit < *total_b ? limit : *total_b;
    uint64_t left = used >= total ? 0 : total - used;
    *total_b = (size_t)total;
    if (left < *free_b)
        *free_b = (size_t)left;
    return r;
}
