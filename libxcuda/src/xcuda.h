/*
 * xcuda.h — libxcuda's internal interface between its parts:
 *   real.c     finding the real driver and its functions
 *   ctl.c      control block, process slot, MPS environment, start-up
 *   mem.c      memory caps (CAS reservations) and the allocation table
 *   gate.c     the launch gate (pause, GPU-time token bucket, in-flight bound)
 *   launch.c   the launch entry points
 *   entry.c    dlsym and cuGetProcAddress
 *   signals.c  SIGINT/SIGTERM drain
 *   signal.c   online-aware gating through the node's GPU signal page
 *   graph.c    CUDA graphs: instantiation, and long graphs launched in chunks
 *   confine.c  an offline process's kernels confined to part of the SMs (green contexts)
 */
#ifndef XCUDA_INTERNAL_H
#define XCUDA_INTERNAL_H

#include <cuda.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "xcuda_ctl.h"

#define XC_EXPORT __attribute__((visibility("default")))
#define XC_LIKELY(x) __builtin_expect(!!(x), 1)
#define XC_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Relaxed atomic access to plain fields of the shared mappings. */
#define XC_LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define XC_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define XC_ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_RELAXED)

/* libxcuda's wrappers, declared by their exported names: NVIDIA's cuda.h
 * declares the per-thread-stream variants only through macros, and CUDA 13
 * changed the context-creation names, so the sources do not rely on the
 * driver header for these. */
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n, unsigned int flags,
                        CUdevice dev);
CUresult cuCtxDestroy_v2(CUcontext ctx);
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                             unsigned int bx, unsigned int by, unsigned int bz,
                             unsigned int shmem, CUstream s, void **params, void **extra);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params,
                               void **extra);
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                        unsigned int gz, unsigned int bx, unsigned int by,
                                        unsigned int bz, unsigned int shmem, CUstream s,
                                        void **params);
CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s);
CUresult cuStreamSynchronize_ptsz(CUstream s);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s);
CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream s);
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n);
CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n);
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n);

/* ---- real.c ---- */

/* The real driver's functions libxcuda calls or wraps. */
typedef CUresult (*xc_launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                 unsigned, unsigned, CUstream, void **, void **);
typedef CUresult (*xc_launch_ex_fn)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*xc_launch_coop_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                      unsigned, unsigned, unsigned, CUstream, void **);
typedef CUresult (*xc_graph_launch_fn)(CUgraphExec, CUstream);
typedef CUresult (*xc_alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*xc_alloc_pool_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef CUresult (*xc_free_async_fn)(CUdeviceptr, CUstream);
typedef CUresult (*xc_gpa2_fn)(const char *, void **, int, cuuint64_t,
                               CUdriverProcAddressQueryResult *);
typedef CUresult (*xc_gpa1_fn)(const char *, void **, int, cuuint64_t);

struct xc_real {
    CUresult (*cuInit)(unsigned);
    CUresult (*cuGetErrorString)(CUresult, const char **);
    CUresult (*cuDeviceGetCount)(int *);
    CUresult (*cuDeviceGet)(CUdevice *, int);
    CUresult (*cuDeviceTotalMem)(size_t *, CUdevice);
    CUresult (*cuCtxGetDevice)(CUdevice *);
    CUresult (*cuDeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*cuCtxGetCurrent)(CUcontext *);
    CUresult (*cuCtxPushCurrent)(CUcontext);
    CUresult (*cuCtxPopCurrent)(CUcontext *);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuCtxCreate_v2)(CUcontext *, unsigned, CUdevice);
    CUresult (*cuCtxCreate_v3)(CUcontext *, CUexecAffinityParam *, int, unsigned, CUdevice);
    /* CUDA 12.5+: the parameters struct is passed through untouched. */
    CUresult (*cuCtxCreate_v4)(CUcontext *, void *, unsigned, CUdevice);
    CUresult (*cuCtxDestroy)(CUcontext);
    CUresult (*cuDevicePrimaryCtxGetState)(CUdevice, unsigned *, int *);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
    CUresult (*cuDevicePrimaryCtxReset)(CUdevice);
    CUresult (*cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus *);
    CUresult (*cuEventCreate)(CUevent *, unsigned);
    CUresult (*cuEventDestroy)(CUevent);
    CUresult (*cuEventRecord)(CUevent, CUstream);
    CUresult (*cuEventQuery)(CUevent);
    CUresult (*cuEventSynchronize)(CUevent);
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuStreamSynchronize_ptsz)(CUstream);
    CUresult (*cuStreamQuery)(CUstream);
    CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
    CUresult (*cuMemGetInfo)(size_t *, size_t *);
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
    CUresult (*cuMemAllocPitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
    CUresult (*cuMemAllocManaged)(CUdeviceptr *, size_t, unsigned);
    CUresult (*cuMemFree)(CUdeviceptr);
    xc_alloc_async_fn cuMemAllocAsync, cuMemAllocAsync_ptsz;
    xc_alloc_pool_fn cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz;
    xc_free_async_fn cuMemFreeAsync, cuMemFreeAsync_ptsz;
    CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                            unsigned long long);
    CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
    CUresult (*cuArrayCreate)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
    CUresult (*cuArray3DCreate)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
    CUresult (*cuArrayDestroy)(CUarray);
    xc_launch_fn cuLaunchKernel, cuLaunchKernel_ptsz;
    xc_launch_ex_fn cuLaunchKernelEx, cuLaunchKernelEx_ptsz;
    xc_launch_coop_fn cuLaunchCooperativeKernel, cuLaunchCooperativeKernel_ptsz;
    xc_graph_launch_fn cuGraphLaunch, cuGraphLaunch_ptsz;
    /* host<->device copies (copy.c) */
    CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*cuMemcpyHtoDAsync_ptsz)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*cuMemcpyDtoHAsync_ptsz)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*cuMemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*cuMemcpyAsync_ptsz)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*cuMemcpyHtoD_ptds)(CUdeviceptr, const void *, size_t);
    CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*cuMemcpyDtoH_ptds)(void *, CUdeviceptr, size_t);
    CUresult (*cuMemcpy)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*cuMemcpy_ptds)(CUdeviceptr, CUdeviceptr, size_t);
    /* graphs: instantiation (every ABI), what changes an instantiated graph, and what
     * splitting one takes (graph.c) */
    CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*cuGraphInstantiate_v1)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);
    CUresult (*cuGraphInstantiate_v2)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);
    CUresult (*cuGraphInstantiateWithParams)(CUgraphExec *, CUgraph,
                                             CUDA_GRAPH_INSTANTIATE_PARAMS *);
    CUresult (*cuGraphInstantiateWithParams_ptsz)(CUgraphExec *, CUgraph,
                                                  CUDA_GRAPH_INSTANTIATE_PARAMS *);
    CUresult (*cuGraphExecDestroy)(CUgraphExec);
    CUresult (*cuGraphExecUpdate_v1)(CUgraphExec, CUgraph, CUgraphNode *, void *);
    CUresult (*cuGraphExecUpdate_v2)(CUgraphExec, CUgraph, void *);
    CUresult (*cuGraphExecKernelNodeSetParams_v1)(CUgraphExec, CUgraphNode, const void *);
    CUresult (*cuGraphExecKernelNodeSetParams_v2)(CUgraphExec, CUgraphNode, const void *);
    CUresult (*cuGraphExecMemcpyNodeSetParams)(CUgraphExec, CUgraphNode, const void *, CUcontext);
    CUresult (*cuGraphExecMemsetNodeSetParams)(CUgraphExec, CUgraphNode, const void *, CUcontext);
    CUresult (*cuGraphExecNodeSetParams)(CUgraphExec, CUgraphNode, void *);
    CUresult (*cuGraphNodeSetEnabled)(CUgraphExec, CUgraphNode, unsigned);
    CUresult (*cuGraphGetNodes)(CUgraph, CUgraphNode *, size_t *);
    CUresult (*cuGraphGetEdges)(CUgraph, CUgraphNode *, CUgraphNode *, size_t *);
    CUresult (*cuGraphNodeGetType)(CUgraphNode, CUgraphNodeType *);
    CUresult (*cuGraphClone)(CUgraph *, CUgraph);
    CUresult (*cuGraphNodeFindInClone)(CUgraphNode *, CUgraphNode, CUgraph);
    CUresult (*cuGraphDestroyNode)(CUgraphNode);
    CUresult (*cuGraphDestroy)(CUgraph);
    CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
    /* green contexts, CUDA 12.4+ (confine.c); NULL on older drivers */
    CUresult (*cuDeviceGetDevResource)(CUdevice, CUdevResource *, CUdevResourceType);
    CUresult (*cuDevSmResourceSplitByCount)(CUdevResource *, unsigned *, const CUdevResource *,
                                            CUdevResource *, unsigned, unsigned);
    CUresult (*cuDevResourceGenerateDesc)(CUdevResourceDesc *, CUdevResource *, unsigned);
    CUresult (*cuGreenCtxCreate)(CUgreenCtx *, CUdevResourceDesc, CUdevice, unsigned);
    CUresult (*cuGreenCtxDestroy)(CUgreenCtx);
    CUresult (*cuCtxFromGreenCtx)(CUcontext *, CUgreenCtx);
    CUresult (*cuGreenCtxStreamCreate)(CUstream *, CUgreenCtx, unsigned, int);
    xc_gpa2_fn cuGetProcAddress_v2;
    xc_gpa1_fn cuGetProcAddress_v1;
};

extern struct xc_real xc_real;
/* 1 once xc_resolve() has run (successfully or not). */
extern _Atomic int xc_resolved;

/* Loads the real driver and fills xc_real; idempotent, thread-safe. */
void xc_resolve(void);
/* The real dlsym (never the one libxcuda exports). */
void *xc_real_dlsym(void *handle, const char *symbol);

/* Make sure the real function pointer is there; returns it or NULL. */
#define XC_REAL(fn)                                                           \
    (XC_LIKELY(atomic_load_explicit(&xc_resolved, memory_order_acquire))      \
         ? xc_real.fn                                                         \
         : (xc_resolve(), xc_real.fn))

/* The exported wrapper of a gated call (launch.c, copy.c, graph.c): once the real
 * functions are resolved and fast (an expression over real_ and the arguments) holds,
 * the real call and nothing else; otherwise slow. */
#define XC_FAST_EXPORT(name, field, params, args, fast, slow)                 \
    XC_EXPORT CUresult name params                                            \
    {                                                                         \
        if (XC_LIKELY(atomic_load_explicit(&xc_resolved, memory_order_acquire))) { \
            __typeof__(xc_real.field) real_ = xc_real.field;                  \
            if (XC_LIKELY(real_ != NULL && (fast)))                           \
                return real_ args;                                            \
        }                                                                     \
        return slow;                                                          \
    }

/* A hooked driver function: its name as cuGetProcAddress and dlsym see it,
 * libxcuda's wrapper, and where the real one lives in xc_real. */
struct xc_hook {
    const char *name;  /* exported symbol name, e.g. "cuMemAlloc_v2" */
    void *wrapper;
    void **real;
};
extern const struct xc_hook xc_hooks[];
extern const size_t xc_nhooks;
/* The hook for an exported symbol name, or NULL. */
const struct xc_hook *xc_hook_by_name(const char *symbol);
/* The hook whose real function is fn, or NULL. */
const struct xc_hook *xc_hook_by_real(void *fn);

/* ---- ctl.c ---- */

struct xc_state {
    const xcuda_limits *lim; /* NULL: no block, pass through */
    xcuda_usage *use;
    xcuda_proc *me;          /* this process's slot, or NULL */
    int fail_closed;         /* no usable block and policy says refuse */
    int pid;
};
extern struct xc_state xc;

/* Process-local stop flag: set by the signal path, checked by the gate. */
extern _Atomic int xc_stopping;

/* The MPS active-thread percentage this process's contexts are created with, as
 * export_mps_env left CUDA_MPS_ACTIVE_THREAD_PERCENTAGE at load (0: unset, all SMs). */
extern uint32_t xc_mps_pct;

uint64_t xc_now_mono_ns(void);
uint64_t xc_now_real_ns(void);
void xc_sleep_ns(uint64_t ns);
/* Claims a process slot. */
void xc_claim_slot(void);
/* Claims this process's slot once, on first CUDA use. */
void xc_ensure_slot(void);
/* Returns reservations of slots whose process is gone; returns bytes freed. */
uint64_t xc_reap_dead_slots(void);
/* The memory-accounting lock of the usage page (see ctl.c): every change of the
 * reserved_bytes counters happens while holding it. Never on the launch path. */
void xc_mem_lock(void);
void xc_mem_unlock(void);
/* Log to stderr when XCUDA_DEBUG was set at load. */
void xc_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Set while this thread is inside the real driver on libxcuda's behalf: a
 * driver that calls its own exported functions (one not linked -Bsymbolic)
 * then reaches the wrappers again, which must pass through instead of
 * counting twice or taking the gate's lock again. */
extern _Thread_local int xc_tls_inside __attribute__((tls_model("initial-exec")));
#define XC_PASS() (xc.use == NULL || xc_tls_inside)

/* ---- sticky.c ---- */
/* Records r in the usage block if it is a context-destroying error. */
CUresult xc_note_sticky(CUresult r);
/* At exit: a program that stopped at its first error (from a launch, say) has not
 * synchronised since; one non-blocking query of its context reports the error. */
void xc_sticky_check_at_exit(void);

/* ---- mem.c ---- */
void xc_mem_atfork_child(void);

/* ---- gate.c ---- */
struct xc_ticket {
    int tracked; /* 1: the launch is measured and must be completed */
    int slot;
    unsigned kernels; /* kernels the launch runs, set before xc_gate_done (0 or 1: one) */
};
/* Slow path of the gate; called only when throttled, paused or stopping. */
CUresult xc_gate_slow(CUstream stream, struct xc_ticket *t);
/* After the real launch: records the end event (or rolls back). */
void xc_gate_done(CUstream stream, struct xc_ticket *t, CUresult launched);
/* Waits for every measured launch of this process. */
void xc_gate_drain(void);
void xc_gate_atfork_child(void);
/* The queue budget (limits queue_ns, default and cap applied). */
uint64_t xc_gate_queue_ns(void);
/* Estimated GPU time until a launch made now would finish: (launches in flight + 1)
 * x the measured GPU time per launch; 0 before anything was measured. Unlocked. */
uint64_t xc_gate_launch_est_ns(void);
/* The measured GPU time per launch (a moving average; 0 before anything was measured). */
uint64_t xc_gate_per_launch_ns(void);
/* Launch counter kept per thread and flushed to the usage block. */
void xc_flush_launches(void);

extern _Thread_local uint32_t xc_tls_launches __attribute__((tls_model("initial-exec")));

/* The fast-path test: no block, or not paused, not throttled, not stopping. */
static inline int xc_gate_open(void)
{
    const xcuda_limits *l = xc.lim;
    if (l == NULL)
        return 1;
    uint32_t paused = XC_LOAD(&l->paused);
    uint32_t share = XC_LOAD(&l->share_bp);
    int stop = atomic_load_explicit(&xc_stopping, memory_order_relaxed);
    return (paused | (uint32_t)stop) == 0 && share >= XCUDA_SHARE_FULL;
}

/* Launch counts reach the usage page every XC_FLUSH_MASK+1 launches of a
 * thread, and at each synchronisation (sticky.c): muxd reads launch rates from
 * it, and a shared atomic add on every launch would cost more than the whole
 * fast path. Without the flush at synchronisation a service of a few launches
 * a request showed muxd lumps of 32 (0, 0, 0, then 320 a second), which its
 * burst test took for bursts. */
#define XC_FLUSH_MASK 31u

/* ---- signal.c ---- */
struct xc_sig {
    /* The word the launch fast path loads: the one slot of a single-GPU
     * container, or, with several slots, a constant that is never "quiet"
     * (those take the slow path, which checks every slot). NULL: no page. */
    const uint64_t *w0;
    uint64_t pub;  /* 1: publish (online), 0: follow (offline) */
    unsigned n;    /* slots mapped */
    uint64_t *w[XCUDA_SIGNAL_SLOTS]; /* &slot[i].online_ns of the container's GPUs */
    xcuda_signal *page;
};
extern struct xc_sig xc_sig;

/* Maps the signal page when the limits give this container a role. At load. */
void xc_signal_init(const char *path);
/* Launch slow path: publish (online), or hold while online work is published,
 * within the hold budget (offline). */
void xc_signal_launch(void);
/* A host<->device copy's part (copy.c): online, publish as a launch does, and leave the
 * next launch its slow path (where the kernels' width is noted); offline, hold as a
 * launch does. */
void xc_signal_copy(void);
/* Offline: online work was published within XCUDA_SHRINK_NS of now; a throttled
 * offline process then keeps at most the queue budget of measured work in flight, so
 * that little of it is queued ahead of the next online request (online_seen), and one
 * that does not leave the online kernels room bounds its work even when unthrottled
 * (online_recent: seen, and its MPS percentage does not leave the online kernels room). */
#define XCUDA_SHRINK_NS 100000000ull
int xc_signal_online_seen(uint64_t now);
/* Offline: online work is in flight on one of this process's GPUs, ended there within
 * window ns (the slot's idle_ns, whether or not this process was looking), or was seen
 * by this process within window. */
int xc_signal_online_within(uint64_t window);
int xc_signal_online_recent(uint64_t now);

/* Offline: online work that ended since this process last looked (a slot's idle_ns
 * within XCUDA_SHRINK_NS) counts as seen. A process whose launches are far apart (a long
 * graph) would otherwise see only the requests in flight at its launches. */
void xc_signal_note_ended(void);

/* Online, before a synchronisation: marks its set slots as having one under way
 * (sync_ns), so that followers keep holding past the hold window until it returns. */
void xc_signal_sync_enter(void);

/* Online: a synchronisation returned, or the process exits: nothing pending. */
void xc_signal_idle(void);

/* The fast-path test of the signal: nothing to do for this launch. Online:
 * its slot already set; offline: its slot idle (0). One load of a line that
 * nobody writes in that state. */
static inline int xc_signal_quiet(void)
{
    const uint64_t *w = XC_LOAD(&xc_sig.w0);
    if (XC_LIKELY(w == NULL))
        return 1;
    return (uint64_t)(XC_LOAD(w) != 0) == xc_sig.pub;
}

/* What w0 points at when the fast path must not be taken (see signal.c). */
extern const uint64_t xc_never_quiet[2];
int xc_signal_bounds_slow(void);
/* A confined follower takes the slow path on every launch (confine.c). */
void xc_signal_confined(int on);
/* Offline, online work seen within XCUDA_SHRINK_NS: launches are measured and their
 * outstanding GPU time bounded (the queue budget) even when the gate is open. A
 * follower with one slot has w0 switched to xc_never_quiet exactly then. */
static inline int xc_signal_bounds(void)
{
    if (xc_sig.pub || xc_sig.n == 0)
        return 0;
    if (xc_sig.n == 1)
        return XC_LOAD(&xc_sig.w0) == &xc_never_quiet[0];
    return xc_signal_bounds_slow();
}

/* ---- confine.c ---- */
struct green;
/* A launch on its way into a green context (xc_confine_enter .. xc_confine_leave). */
struct xc_confined {
    int active, graph;
    CUstream from, to; /* the stream it was meant for, the one it goes to */
    struct green *gr;
};
/* Re-reads limits confine_pct (offline processes; every slow-path launch). */
void xc_confine_refresh(void);
/* limits confine_pct as the last refresh read it (0: not confined). */
extern _Atomic uint32_t xc_confine_pct;
/* Whether this process's kernels are to be confined. */
static inline int xc_confine_wanted(void)
{
    return atomic_load_explicit(&xc_confine_pct, memory_order_relaxed) != 0;
}
/* Before a launch meant for s (graph: a cuGraphLaunch): c->to is the stream to launch
 * into, a green context's when confined (then 1, and the confinement lock is held). */
int xc_confine_enter(CUstream s, int graph, struct xc_confined *c);
/* After the launch into c->to returned r: orders s after it, or, where the driver
 * refused it in the green context, returns 1: launch it again into c->from. */
int xc_confine_leave(struct xc_confined *c, CUresult r);
void xc_confine_atfork_child(void);

/* ---- graph.c ---- */
/* Wrappers whose exported names NVIDIA's header maps to other ones, does not declare, or
 * declares with its parameter types (void * here, so both headers compile). */
CUresult xc_graph_instantiate_v1(CUgraphExec *pe, CUgraph g, CUgraphNode *err, char *log,
                                 size_t logsz) __asm__("cuGraphInstantiate");
CUresult cuGraphInstantiate_v2(CUgraphExec *pe, CUgraph g, CUgraphNode *err, char *log,
                               size_t logsz);
CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *pe, CUgraph g,
                                           CUDA_GRAPH_INSTANTIATE_PARAMS *p);
CUresult xc_graph_exec_update_v1(CUgraphExec e, CUgraph g, CUgraphNode *err, void *res)
    __asm__("cuGraphExecUpdate");
CUresult xc_graph_exec_update_v2(CUgraphExec e, CUgraph g, void *info)
    __asm__("cuGraphExecUpdate_v2");
CUresult xc_graph_kernel_params_v1(CUgraphExec e, CUgraphNode n, const void *p)
    __asm__("cuGraphExecKernelNodeSetParams");
CUresult xc_graph_kernel_params_v2(CUgraphExec e, CUgraphNode n, const void *p)
    __asm__("cuGraphExecKernelNodeSetParams_v2");
CUresult xc_graph_memcpy_params(CUgraphExec e, CUgraphNode n, const void *p, CUcontext c)
    __asm__("cuGraphExecMemcpyNodeSetParams");
CUresult xc_graph_memset_params(CUgraphExec e, CUgraphNode n, const void *p, CUcontext c)
    __asm__("cuGraphExecMemsetNodeSetParams");
CUresult xc_graph_node_params(CUgraphExec e, CUgraphNode n, void *p)
    __asm__("cuGraphExecNodeSetParams");
CUresult cuGraphNodeSetEnabled(CUgraphExec e, CUgraphNode n, unsigned int on);
/* Execs an offline process instantiated in chunks (see graph.c); 0 keeps the graph
 * launch's fast path as it was. */
extern _Atomic unsigned xc_graph_splits;
void xc_graph_atfork_child(void);

/* ---- width.c ---- */
/* Online: notes the shape of a launch that took the slow path (see width.c). */
void xc_width_note(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz);

/* ---- signals.c ---- */
void xc_signals_install(void);
/* Returns this process's reservations (exit, drain before death). */
void xc_release_slot(void);
void xc_track_context(CUcontext ctx, int add);

#endif
