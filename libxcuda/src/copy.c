/* copy.c — host<->device copies follow the GPU signal page as kernel launches do.
 *
 * A training step copies its batch in; an inference request copies its input in and
 * its output out. Both go over the same PCIe link, which the device shares evenly
 * between the copies in flight, so an offline batch copied while a request's input is
 * on the way slows the request (tests/scenarios/probes/t4-copies.toml). So an online
 * process's copy publishes that it has work on its GPU, as a launch does, and an
 * offline process's copy is held while online work is in flight, within the same hold
 * budget as its launches (signal.c). A copy on the link cannot be stopped, and a batch
 * of tens of MiB takes milliseconds, so while online work ran on its GPU within
 * XC_COPY_RECENT_NS (xc_signal_online_within) an offline copy larger than XC_COPY_CHUNK
 * goes in chunks, each held and each started once the one before has finished
 * (wait_chunk): a request that arrives meets at most one chunk on the link. Copies are
 * not launches: they are neither counted (muxd's launch rates) nor measured by the gate.
 * The fast path is the launch fast path's signal test, one load of the slot, for copies
 * of up to XC_COPY_CHUNK; a larger one always takes the slow path, whose cost is nothing
 * beside its own, as the slot may be idle between requests while online work is recent. */
#include "xcuda.h"

/* An offline copy's chunk while online work is recent: about 350 us on a T4's PCIe
 * link (12 GB/s), 75 us on an H100's. */
#define XC_COPY_CHUNK ((size_t)4 << 20)

/* How recently online work must have run on the GPU for a large copy to go in chunks: a
 * second, as a service at 10 requests/s leaves 100 ms between its requests, and chunks
 * cost offline little (tests/scenarios/probes/t4-copies.toml: the same throughput). */
#define XC_COPY_RECENT_NS 1000000000ull

/* The longest a chunk waits for the one before (and, for the first, for the step's work
 * queued before it on the stream): past it the rest of the copy goes without waiting. A
 * stream can wait on something only this thread would do next (a value it writes, a
 * semaphore it signals), so the wait must not block for good. */
#define XC_COPY_WAIT_MAX_NS 50000000ull

/* wait_chunk waits, polling, until stream s has nothing left to do, for at most
 * XC_COPY_WAIT_MAX_NS; an error of the stream's work is returned. */
static CUresult wait_chunk(CUstream s)
{
    if (xc_real.cuStreamQuery == NULL)
        return CUDA_SUCCESS;
    uint64_t t0 = xc_now_mono_ns();
    for (;;) {
        CUresult r = xc_real.cuStreamQuery(s);
        if (r != CUDA_ERROR_NOT_READY)
            return r;
        if (xc_now_mono_ns() - t0 >= XC_COPY_WAIT_MAX_NS)
            return CUDA_SUCCESS;
        xc_sleep_ns(20000);
    }
}

/* split: copy of n bytes on stream s (or a synchronous one: sync) goes in chunks. A
 * stream being captured only records graph nodes, and may not be synchronised. */
static int split(size_t n, CUstream s, int sync)
{
    if (n <= XC_COPY_CHUNK || !xc_signal_online_within(XC_COPY_RECENT_NS))
        return 0;
    if (sync)
        return 1;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return xc_real.cuStreamIsCapturing != NULL && xc_real.cuStreamQuery != NULL &&
           xc_real.cuStreamIsCapturing(s, &st) == CUDA_SUCCESS &&
           st == CU_STREAM_CAPTURE_STATUS_NONE;
}

/* COPY(name, field, (params...), (args...), (chunk args...), stream, sync, wait) defines
 * the exported wrapper `name` over xc_real.field; the chunk arguments copy
 * [off, off+len), and wait is what the next chunk of an asynchronous copy on stream waits
 * for (a synchronous copy, sync 1, returns once it is done: wait 0). */
#define COPY(name, field, params, args, chunk_args, stream, sync, wait)      \
    __attribute__((noinline)) static CUresult slow_##name params             \
    {                                                                        \
        __typeof__(xc_real.field) real_ = XC_REAL(field);                    \
        if (real_ == NULL)                                                   \
            return CUDA_ERROR_NOT_INITIALIZED;                               \
        if (xc_tls_inside)                                                   \
            return xc_note_sticky(real_ args);                               \
        xc_signal_copy();                                                    \
        if (!split(n, (stream), (sync)))                                     \
            return xc_note_sticky(real_ args);                               \
        CUresult r_ = CUDA_SUCCESS;                                          \
        for (size_t off = 0, len = 0; off < n && r_ == CUDA_SUCCESS; off += len) { \
            len = n - off < XC_COPY_CHUNK ? n - off : XC_COPY_CHUNK;         \
            if (off > 0) {                                                   \
                if ((r_ = (wait)) != CUDA_SUCCESS)                           \
                    break;                                                   \
                xc_signal_copy();                                            \
            }                                                                \
            r_ = real_ chunk_args;                                           \
        }                                                                    \
        return xc_note_sticky(r_);                                           \
    }                                                                        \
    XC_FAST_EXPORT(name, field, params, args, n <= XC_COPY_CHUNK && xc_signal_quiet(), \
                   slow_##name args)

#define HTOD_ASYNC (CUdeviceptr dst, const void *src, size_t n, CUstream s)
#define DTOH_ASYNC (void *dst, CUdeviceptr src, size_t n, CUstream s)
#define ANY_ASYNC (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
#define ASYNC_ARGS (dst, src, n, s)
#define HTOD_ASYNC_CHUNK (dst + off, (const char *)src + off, len, s)
#define DTOH_ASYNC_CHUNK ((char *)dst + off, src + off, len, s)
#define ANY_ASYNC_CHUNK (dst + off, src + off, len, s)
#define HTOD (CUdeviceptr dst, const void *src, size_t n)
#define DTOH (void *dst, CUdeviceptr src, size_t n)
#define ANY (CUdeviceptr dst, CUdeviceptr src, size_t n)
#define ARGS (dst, src, n)
#define HTOD_CHUNK (dst + off, (const char *)src + off, len)
#define DTOH_CHUNK ((char *)dst + off, src + off, len)
#define ANY_CHUNK (dst + off, src + off, len)
#define WAIT wait_chunk(s)
/* The per-thread default stream, when a _ptsz call names the default one. */
#define PTSZ (s != NULL ? s : CU_STREAM_PER_THREAD)
#define WAIT_PTSZ wait_chunk(PTSZ)

COPY(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync, HTOD_ASYNC, ASYNC_ARGS, HTOD_ASYNC_CHUNK, s, 0, WAIT)
COPY(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync_ptsz, HTOD_ASYNC, ASYNC_ARGS, HTOD_ASYNC_CHUNK,
     PTSZ, 0, WAIT_PTSZ)
COPY(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync, DTOH_ASYNC, ASYNC_ARGS, DTOH_ASYNC_CHUNK, s, 0, WAIT)
COPY(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync_ptsz, DTOH_ASYNC, ASYNC_ARGS, DTOH_ASYNC_CHUNK,
     PTSZ, 0, WAIT_PTSZ)
/* Unified addressing: either side may be the host's. */
COPY(cuMemcpyAsync, cuMemcpyAsync, ANY_ASYNC, ASYNC_ARGS, ANY_ASYNC_CHUNK, s, 0, WAIT)
COPY(cuMemcpyAsync_ptsz, cuMemcpyAsync_ptsz, ANY_ASYNC, ASYNC_ARGS, ANY_ASYNC_CHUNK, PTSZ, 0, WAIT_PTSZ)
COPY(cuMemcpyHtoD_v2, cuMemcpyHtoD, HTOD, ARGS, HTOD_CHUNK, NULL, 1, 0)
COPY(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD_ptds, HTOD, ARGS, HTOD_CHUNK, NULL, 1, 0)
COPY(cuMemcpyDtoH_v2, cuMemcpyDtoH, DTOH, ARGS, DTOH_CHUNK, NULL, 1, 0)
COPY(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH_ptds, DTOH, ARGS, DTOH_CHUNK, NULL, 1, 0)
COPY(cuMemcpy, cuMemcpy, ANY, ARGS, ANY_CHUNK, NULL, 1, 0)
COPY(cuMemcpy_ptds, cuMemcpy_ptds, ANY, ARGS, ANY_CHUNK, NULL, 1, 0)
