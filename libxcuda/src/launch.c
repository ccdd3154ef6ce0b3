/* launch.c — the launch entry points. The fast path (not paused, not
 * throttled, not stopping, nothing to do for the GPU signal page) is a few
 * relaxed loads and a thread-local counter, then a tail call into the driver: no lock, syscall, allocation
 * or getenv. Everything else goes through the gate's slow path, kept in a
 * separate non-inlined function so the fast path saves no registers. */
#include "xcuda.h"

/* GATED(name, field, stream, width, (params...), (args...)) defines the exported
 * wrapper `name` over xc_real.field; width is a statement that notes the launch's shape
 * for online processes (width.c), on the slow path only. */
#define GATED(name, field, stream, width, params, args)                       \
    __attribute__((noinline)) static CUresult slow_##name params              \
    {                                                                         \
        __typeof__(xc_real.field) real_ = XC_REAL(field);                     \
        if (real_ == NULL)                                                    \
            return CUDA_ERROR_NOT_INITIALIZED;                                \
        if ((xc_tls_launches & XC_FLUSH_MASK) == 0)                           \
            xc_flush_launches();                                              \
        if (!xc_tls_inside) {                                                 \
            xc_signal_launch();                                               \
            width;                                                            \
        }                                                                     \
        if ((xc_gate_open() && !xc_signal_bounds()) || xc_tls_inside)         \
            return xc_note_sticky(real_ args);                                \
        struct xc_ticket t_;                                                  \
        CUresult g_ = xc_gate_slow((stream), &t_);                            \
        if (g_ != CUDA_SUCCESS)                                               \
            return g_;                                                        \
        xc_tls_inside = 1;                                                    \
        CUresult r_ = real_ args;                                             \
        xc_tls_inside = 0;                                                    \
        xc_gate_done((stream), &t_, r_);                                      \
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
GATED(cuLaunchKernel, cuLaunchKernel, s, GRID_WIDTH, LAUNCH_PARAMS, LAUNCH_ARGS)
GATED(cuLaunchKernel_ptsz, cuLaunchKernel_ptsz, s, GRID_WIDTH, LAUNCH_PARAMS, LAUNCH_ARGS)
GATED(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, s, GRID_WIDTH, COOP_PARAMS, COOP_ARGS)
GATED(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel_ptsz, s, GRID_WIDTH, COOP_PARAMS,
      COOP_ARGS)
GATED(cuLaunchKernelEx, cuLaunchKernelEx, EX_STREAM, EX_WIDTH, EX_PARAMS, EX_ARGS)
GATED(cuLaunchKernelEx_ptsz, cuLaunchKernelEx_ptsz, EX_STREAM, EX_WIDTH, EX_PARAMS, EX_ARGS)
/* cuGraphLaunch and cuGraphLaunch_ptsz are in graph.c. */
