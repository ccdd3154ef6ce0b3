/* launch.c — the launch entry points. The fast path (not paused, not
 * throttled, not stopping, nothing to do for the GPU signal page) is a few
 * relaxed loads and a thread-local counter, then a tail call into the driver: no lock, syscall, allocation
 * or getenv. Everything else goes through the gate's slow path, kept in a
 * separate non-inlined function so the fast path saves no registers. */
#include "xcuda.h"

/* GATED(name, field, stream, ptsz, width, redirect, (params...), (args...)) defines the
 * exported wrapper `name` over xc_real.field; width is a statement that notes the
 * launch's shape for online processes (width.c), on the slow path only; redirect is a
 * statement that makes the launch go to the stream to_ (confine.c); ptsz: a null stream
 * is the calling thread's. */
#define GATED(name, field, stream, ptsz, width, redirect, params, args)      \
    __attribute__((noinline)) static CUresult slow_##name params              \
    {                                                                         \
        __typeof__(xc_real.field) real_ = XC_REAL(field);                     \
        if (real_ == NULL)                                                    \
            return CUDA_ERROR_NOT_INITIALIZED;                                \
        if ((xc_tls_launches & XC_FLUSH_MASK) == 0)                           \
            xc_flush_launches();                                              \
        if (xc_tls_inside)                                                    \
            return xc_note_sticky(real_ args);                                \
        xc_signal_launch();                                                   \
        width;                                                                \
        xc_confine_refresh();                                                 \
        int open_ = xc_gate_open() && !xc_signal_bounds();                    \
        if (open_ && !xc_confine_wanted())                                    \
            return xc_note_sticky(real_ args);                                \
        CUstream orig_ = (stream);                                            \
        struct xc_ticket t_ = {0, 0, 1};                                      \
        if (!open_) {                                                         \
            CUresult g_ = xc_gate_slow(orig_, &t_);                           \
            if (g_ != CUDA_SUCCESS)                                           \
                return g_;                                                    \
        }                                                                     \
        struct xc_confined c_;                                                \
        xc_tls_inside = 1;                                                    \
        CUresult r_;                                                          \
        if (xc_confine_enter(orig_ == NULL && (ptsz) ? CU_STREAM_PER_THREAD : orig_, 0, &c_)) { \
            CUstream to_ = c_.to;                                             \
            redirect;                                                         \
            r_ = real_ args;                                                  \
            if (xc_confine_leave(&c_, r_)) {                                  \
                to_ = orig_;                                                  \
                redirect;                                                     \
                r_ = real_ args;                                              \
            }                                                                 \
        } else {                                                              \
            r_ = real_ args;                                                  \
        }                                                                     \
        xc_tls_inside = 0;                                                    \
        xc_gate_done(orig_, &t_, r_);                                         \
        return xc_note_sticky(r_);                                            \
    }                                                                         \
    XC_FAST_EXPORT(name, field, params, args,                                 \
                   (++xc_tls_launches & XC_FLUSH_MASK) != 0 && xc_gate_open() && \
                       xc_signal_quiet(),                                     \
                   slow_##name args)

#define LAUNCH_PARAMS                                                         \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, \
     unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params, \
     void **extra)
#define LAUNCH_ARGS (f, gx, gy, gz, bx, by, bz, shmem, s, params, extra)
#define COOP_PARAMS                                                           \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, \
     unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params)
#define COOP_ARGS (f, gx, gy, gz, bx, by, bz, shmem, s, params)
#define EX_PARAMS (const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
#define EX_ARGS (config, f, params, extra)
#define EX_STREAM (config ? config->hStream : NULL)

#define GRID_WIDTH xc_width_note(gx, gy, gz, bx, by, bz)
#define EX_WIDTH                                                              \
    if (config)                                                               \
    xc_width_note(config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, \
                  config->blockDimY, config->blockDimZ)
#define TO_S s = to_
/* The configuration is the caller's (const): the confined launch takes a copy. */
#define EX_TO                                                                 \
    CUlaunchConfig cfg_;                                                      \
    if (config) {                                                             \
        cfg_ = *config;                                                       \
        cfg_.hStream = to_;                                                   \
        config = &cfg_;                                                       \
    }
GATED(cuLaunchKernel, cuLaunchKernel, s, 0, GRID_WIDTH, TO_S, LAUNCH_PARAMS, LAUNCH_ARGS)
GATED(cuLaunchKernel_ptsz, cuLaunchKernel_ptsz, s, 1, GRID_WIDTH, TO_S, LAUNCH_PARAMS,
      LAUNCH_ARGS)
GATED(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, s, 0, GRID_WIDTH, TO_S, COOP_PARAMS,
      COOP_ARGS)
GATED(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel_ptsz, s, 1, GRID_WIDTH, TO_S,
      COOP_PARAMS, COOP_ARGS)
GATED(cuLaunchKernelEx, cuLaunchKernelEx, EX_STREAM, 0, EX_WIDTH, EX_TO, EX_PARAMS, EX_ARGS)
GATED(cuLaunchKernelEx_ptsz, cuLaunchKernelEx_ptsz, EX_STREAM, 1, EX_WIDTH, EX_TO, EX_PARAMS,
      EX_ARGS)
/* cuGraphLaunch and cuGraphLaunch_ptsz are in graph.c. */
