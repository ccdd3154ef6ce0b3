/* launch.c — the launch entry points. The fast path (not paused, not
 * throttled, not stopping) is a few relaxed loads and a thread-local
 * counter, then a tail call into the driver: no lock, syscall, allocation
 * or getenv. Everything else goes through the gate's slow path. */
#include "xcuda.h"

#define GATED(realfn, stream, call)                                           \
    do {                                                                      \
        __typeof__(xc_real.realfn) real_ = XC_REAL(realfn);                   \
        if (XC_UNLIKELY(real_ == NULL))                                       \
            return CUDA_ERROR_NOT_INITIALIZED;                                \
        xc_count_launch();                                                    \
        if (XC_LIKELY(xc_gate_open()))                                        \
            return call;                                                      \
        struct xc_ticket t_;                                                  \
        CUresult g_ = xc_gate_slow((stream), &t_);                            \
        if (g_ != CUDA_SUCCESS)                                               \
            return g_;                                                        \
        CUresult r_ = call;                                                   \
        xc_gate_done((stream), &t_, r_);                                      \
        return r_;                                                            \
    } while (0)

XC_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                  unsigned int bx, unsigned int by, unsigned int bz,
                                  unsigned int shmem, CUstream s, void **params, void **extra)
{
    GATED(cuLaunchKernel, s, real_(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra));
}

XC_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                       unsigned int gz, unsigned int bx, unsigned int by,
                                       unsigned int bz, unsigned int shmem, CUstream s,
                                       void **params, void **extra)
{
    GATED(cuLaunchKernel_ptsz, s, real_(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra));
}

XC_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                             unsigned int gz, unsigned int bx, unsigned int by,
                                             unsigned int bz, unsigned int shmem, CUstream s,
                                             void **params)
{
    GATED(cuLaunchCooperativeKernel, s, real_(f, gx, gy, gz, bx, by, bz, shmem, s, params));
}

XC_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx,
                                                  unsigned int gy, unsigned int gz,
                                                  unsigned int bx, unsigned int by,
                                                  unsigned int bz, unsigned int shmem, CUstream s,
                                                  void **params)
{
    GATED(cuLaunchCooperativeKernel_ptsz, s,
          real_(f, gx, gy, gz, bx, by, bz, shmem, s, params));
}

XC_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
                                    void **extra)
{
    CUstream s = config ? config->hStream : NULL;
    GATED(cuLaunchKernelEx, s, real_(config, f, params, extra));
}

XC_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                         void **params, void **extra)
{
    CUstream s = config ? config->hStream : NULL;
    GATED(cuLaunchKernelEx_ptsz, s, real_(config, f, params, extra));
}

XC_EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s)
{
    GATED(cuGraphLaunch, s, real_(g, s));
}

XC_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s)
{
    GATED(cuGraphLaunch_ptsz, s, real_(g, s));
}
