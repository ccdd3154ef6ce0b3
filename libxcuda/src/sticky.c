/* sticky.c — reports context-destroying ("sticky") errors to muxd. The
 * synchronisation calls are where a program learns that its context died: a
 * kernel fault of its own, or, under MPS, a fault of another client of the
 * same server. They are also where an online process's work is known to be
 * done, so they clear its "online work pending" in the GPU signal page. Recording the error in the usage block lets muxd attribute it
 * to the GPU and run the node side of the error handling. These wrappers sit
 * on blocking calls only, never on the launch fast path. */
#include "xcuda.h"

/* The CUresults after which a context is unusable (NVIDIA's driver API
 * documentation: "the context cannot be used ... must be terminated"). */
static int is_sticky(CUresult r)
{
    switch ((int)r) {
    case 214: /* ECC_UNCORRECTABLE */
    case 700: /* ILLEGAL_ADDRESS */
    case 702: /* LAUNCH_TIMEOUT */
    case 714: /* HARDWARE_STACK_ERROR */
    case 715: /* ILLEGAL_INSTRUCTION */
    case 716: /* MISALIGNED_ADDRESS */
    case 717: /* INVALID_ADDRESS_SPACE */
    case 718: /* INVALID_PC */
    case 719: /* LAUNCH_FAILED */
    case 805: /* MPS_CONNECTION_FAILED */
    case 806: /* MPS_RPC_FAILURE */
    case 807: /* MPS_SERVER_NOT_READY */
    case 810: /* MPS_CLIENT_TERMINATED */
        return 1;
    }
    return 0;
}

CUresult xc_note_sticky(CUresult r)
{
    if (XC_UNLIKELY(r != CUDA_SUCCESS) && xc.use != NULL && is_sticky(r)) {
        XC_STORE(&xc.use->last_sticky, (uint32_t)r);
        XC_STORE(&xc.use->last_sticky_ns, xc_now_real_ns());
        XC_ADD(&xc.use->sticky_errors, 1);
    }
    return r;
}

#define SYNC(name, field, params, args)                                       \
    XC_EXPORT CUresult name params                                            \
    {                                                                         \
        __typeof__(xc_real.field) real_ = XC_REAL(field);                     \
        if (real_ == NULL)                                                    \
            return CUDA_ERROR_NOT_INITIALIZED;                                \
        xc_signal_sync_enter();                                               \
        CUresult r_ = real_ args;                                             \
        xc_signal_idle();                                                     \
        xc_flush_launches();                                                  \
        return xc_note_sticky(r_);                                            \
    }

SYNC(cuCtxSynchronize, cuCtxSynchronize, (void), ())
SYNC(cuStreamSynchronize, cuStreamSynchronize, (CUstream s), (s))
SYNC(cuStreamSynchronize_ptsz, cuStreamSynchronize_ptsz, (CUstream s), (s))
SYNC(cuEventSynchronize, cuEventSynchronize, (CUevent e), (e))

void xc_sticky_check_at_exit(void)
{
    if (xc.use == NULL || !atomic_load_explicit(&xc_resolved, memory_order_acquire) ||
        xc_real.cuStreamQuery == NULL || xc_real.cuCtxGetCurrent == NULL)
        return;
    CUcontext ctx = NULL;
    if (xc_real.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == NULL)
        return;
    xc_note_sticky(xc_real.cuStreamQuery(NULL));
}
