/* width.c — how much of its GPU an online kernel needs at once.
 *
 * muxd sizes the offline contexts' MPS active-thread percentage so that the online
 * kernels fit in the SMs the offline ones leave: then an online kernel starts on all
 * the SMs it needs at once instead of waiting for offline blocks to retire (MPS
 * preempts nothing). For that it needs the online kernels' width, which only the
 * launch sees. An online process measures the launches that take the slow path anyway
 * (the first after its GPU went idle, and every 32nd of a thread): the SMs its blocks
 * need when resident, whole blocks per SM by threads and by blocks (the register and
 * shared-memory limits are not counted, so this is a lower bound), in basis points of
 * the device's SMs; and raises its container's online_width for the device with a CAS,
 * tagged with the current 8-second epoch so that a service whose kernels got narrower
 * is seen as narrower within two epochs. Nothing here runs on the fast path. */
#include "xcuda.h"

/* A device's shape, queried once (0 sms: not yet, or unavailable). */
struct shape {
    _Atomic uint32_t state; /* 0 unknown, 1 querying, 2 known, 3 unavailable */
    uint32_t sms, threads, blocks;
};
static struct shape shapes[XCUDA_MAX_DEVICES];

/* The widest launch this process published, per device, and its epoch: most samples
 * change nothing and need not touch the shared line. */
static _Atomic uint32_t mine[XCUDA_MAX_DEVICES];

static const struct shape *shape_of(int dev)
{
    struct shape *s = &shapes[dev];
    uint32_t st = atomic_load_explicit(&s->state, memory_order_acquire);
    if (st == 2)
        return s;
    if (st != 0)
        return NULL;
    uint32_t want = 0;
    if (!atomic_compare_exchange_strong(&s->state, &want, 1))
        return NULL; /* another thread is asking; this sample is skipped */
    CUresult (*attr)(int *, CUdevice_attribute, CUdevice) = XC_REAL(cuDeviceGetAttribute);
    int sms = 0, threads = 0, blocks = 0;
    int ok = attr != NULL && attr(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) == CUDA_SUCCESS &&
             attr(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev) == CUDA_SUCCESS &&
             sms > 0 && threads > 0;
    if (ok && (attr(&blocks, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, dev) != CUDA_SUCCESS ||
               blocks <= 0))
        blocks = 0; /* drivers before CUDA 11: count threads only */
    s->sms = (uint32_t)sms;
    s->threads = (uint32_t)threads;
    s->blocks = (uint32_t)blocks;
    atomic_store_explicit(&s->state, ok ? 2 : 3, memory_order_release);
    return ok ? s : NULL;
}

/* The basis points of a device's SMs a grid needs resident. A block does not split
 * across SMs, so an SM holds whole blocks: 768-thread blocks fill a 2,048-thread SM two
 * at a time (1,536 threads), not 2.67. */
static uint32_t width_bp(const struct shape *s, uint64_t blocks, uint64_t threads)
{
    uint64_t per_sm = s->threads / threads;
    if (s->blocks > 0 && s->blocks < per_sm)
        per_sm = s->blocks;
    if (per_sm == 0)
        return XCUDA_SHARE_FULL;
    uint64_t need = (blocks + per_sm - 1) / per_sm;
    if (need >= s->sms)
        return XCUDA_SHARE_FULL;
    return (uint32_t)(need * XCUDA_SHARE_FULL / s->sms);
}

void xc_width_note(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz)
{
    if (!xc_sig.pub || xc.use == NULL)
        return;
    uint64_t blocks = (uint64_t)gx * gy * gz, threads = (uint64_t)bx * by * bz;
    if (blocks == 0 || threads == 0 || threads > 4096)
        return; /* the driver refuses it anyway */
    int dev = 0;
    if (xc_sig.n != 1) {
        /* Several GPUs: which one this launch goes to is the current context's. */
        CUdevice d = -1;
        CUresult (*f)(CUdevice *) = XC_REAL(cuCtxGetDevice);
        if (f == NULL || f(&d) != CUDA_SUCCESS || d < 0 || d >= XCUDA_MAX_DEVICES)
            return;
        dev = (int)d;
    }
    const struct shape *s = shape_of(dev);
    if (s == NULL)
        return;
    uint32_t bp = width_bp(s, blocks, threads);
    uint32_t epoch = (uint32_t)(xc_now_mono_ns() / XCUDA_WIDTH_EPOCH_NS) & XCUDA_WIDTH_BP_MASK;
    uint32_t tagged = epoch << XCUDA_WIDTH_EPOCH_SHIFT | bp;
    uint32_t m = atomic_load_explicit(&mine[dev], memory_order_relaxed);
    if (m >> XCUDA_WIDTH_EPOCH_SHIFT == epoch && (m & XCUDA_WIDTH_BP_MASK) >= bp)
        return;
    /* Raise the container's value: other processes of the container share it. */
    uint32_t *w = &xc.use->online_width[dev];
    uint32_t cur = XC_LOAD(w);
    while ((cur >> XCUDA_WIDTH_EPOCH_SHIFT != epoch || (cur & XCUDA_WIDTH_BP_MASK) < bp) &&
           !__atomic_compare_exchange_n(w, &cur, tagged, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    atomic_store_explicit(&mine[dev], tagged, memory_order_relaxed);
}
