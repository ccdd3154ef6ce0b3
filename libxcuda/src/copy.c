/* copy.c — host<->device copies follow the GPU signal page as kernel launches do.
 *
 * A training step copies its batch in; an inference request copies its input in and
 * its output out. Both go over the same PCIe link, which the device shares evenly
 * between the copies in flight, so an offline batch copied while a request's input is
 * on the way slows the request (tests/scenarios/probes/t4-copies.toml). So an online
 * process's copy publishes that it has work on its GPU, as its first launch would, and
 * an offline process's copy is held while online work is in flight, within the same
 * hold budget as its launches (signal.c). Copies are not launches: they are neither
 * counted (muxd's launch rates) nor measured by the gate (its GPU time per launch).
 * The fast path is the launch fast path's signal test: one load of the slot. */
#include "xcuda.h"

/* COPY(name, field, (params...), (args...)) defines the exported wrapper `name` over
 * xc_real.field. */
#define COPY(name, field, params, args)                                      \
    __attribute__((noinline)) static CUresult slow_##name params             \
    {                                                                        \
        __typeof__(xc_real.field) real_ = XC_REAL(field);                    \
        if (real_ == NULL)                                                   \
            return CUDA_ERROR_NOT_INITIALIZED;                               \
        if (!xc_tls_inside)                                                  \
            xc_signal_copy();                                                \
        return xc_note_sticky(real_ args);                                   \
    }                                                                        \
    XC_EXPORT CUresult name params                                           \
    {                                                                        \
        if (XC_LIKELY(atomic_load_explicit(&xc_resolved, memory_order_acquire))) { \
            __typeof__(xc_real.field) real_ = xc_real.field;                 \
            if (XC_LIKELY(real_ != NULL && xc_signal_quiet()))               \
                return real_ args;                                           \
        }                                                                    \
        return slow_##name args;                                             \
    }

#define HTOD_ASYNC (CUdeviceptr dst, const void *src, size_t n, CUstream s)
#define DTOH_ASYNC (void *dst, CUdeviceptr src, size_t n, CUstream s)
#define ANY_ASYNC (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
#define ASYNC_ARGS (dst, src, n, s)
#define HTOD (CUdeviceptr dst, const void *src, size_t n)
#define DTOH (void *dst, CUdeviceptr src, size_t n)
#define ANY (CUdeviceptr dst, CUdeviceptr src, size_t n)
#define ARGS (dst, src, n)

COPY(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync, HTOD_ASYNC, ASYNC_ARGS)
COPY(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync_ptsz, HTOD_ASYNC, ASYNC_ARGS)
COPY(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync, DTOH_ASYNC, ASYNC_ARGS)
COPY(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync_ptsz, DTOH_ASYNC, ASYNC_ARGS)
/* Unified addressing: either side may be the host's. */
COPY(cuMemcpyAsync, cuMemcpyAsync, ANY_ASYNC, ASYNC_ARGS)
COPY(cuMemcpyAsync_ptsz, cuMemcpyAsync_ptsz, ANY_ASYNC, ASYNC_ARGS)
COPY(cuMemcpyHtoD_v2, cuMemcpyHtoD, HTOD, ARGS)
COPY(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD_ptds, HTOD, ARGS)
COPY(cuMemcpyDtoH_v2, cuMemcpyDtoH, DTOH, ARGS)
COPY(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH_ptds, DTOH, ARGS)
COPY(cuMemcpy, cuMemcpy, ANY, ARGS)
COPY(cuMemcpy_ptds, cuMemcpy_ptds, ANY, ARGS)
