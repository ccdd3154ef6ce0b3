/* confine.c — an offline process's kernels confined to part of the SMs (limits
 * confine_pct, version 10).
 *
 * MPS fixes a process's active-thread percentage when it creates its context, before
 * anyone has seen how long its kernels are. A job whose kernels outlast the online
 * requests beside it, on every SM, delays each request that meets one, whatever its
 * share of the time; confined to part of the SMs, its kernels leave the rest to the
 * online ones. muxd measures both lengths and asks for that here, while the job runs.
 *
 * A green context (CUDA 12.4) is a partition of the device's SMs that shares the
 * primary context's memory and modules. While confine_pct is set, each kernel or graph
 * launch of this process goes into a stream of a green context of that share of the
 * SMs, ordered with the stream it was meant for by two events:
 *
 *     s ──record before──┐                     ┌──wait after──▶ s continues
 *                        └▶ green: wait, launch, record after ─┘
 *
 * so that the launch still runs after everything queued on s and before whatever is
 * queued there next. That is five more driver calls on the launch, never on the fast
 * path: a confined process takes the slow path (signal.c points its w0 at
 * xc_never_quiet), and only a job whose kernels last hundreds of microseconds or more is
 * confined. Launches go one at a time through one green stream per device, so a
 * process's confined kernels on several streams no longer run beside each other.
 *
 * Where it cannot be done — a driver without green contexts, an MPS active-thread
 * percentage below 100 (which overrides the partition), a stream being captured (the
 * graph is confined when it is launched), or a launch the driver refuses in the green
 * context (a kernel or graph of another context) — the launch goes where it was meant
 * to, and the usage page says why (confine_state). */
#include <pthread.h>
#include <string.h>

#include "xcuda.h"

/* CUDA 13 appends fields to a CUdevResource: leave the driver room after ours. */
union xc_res {
    CUdevResource r;
    unsigned char room[1024];
};

struct green {
    uint32_t pct;     /* the share it was made for; 0: none */
    uint32_t sms;     /* SMs it has */
    int failed;       /* the driver refused it or a kernel launch in it: not again */
    int graph_failed; /* a graph launch in it was refused: graphs go whole */
    CUgreenCtx g;
    CUstream s;
    CUevent before, after;
};

static pthread_mutex_t confine_mu = PTHREAD_MUTEX_INITIALIZER;
static struct green greens[XCUDA_MAX_DEVICES];
/* limits confine_pct as the last refresh read it (0: not confined). */
_Atomic uint32_t xc_confine_pct;

/* Stores what became of the confinement in the usage page, when it changed (the page's
 * line is shared with every process of the container). */
static void report(uint32_t state, uint32_t sms)
{
    if (xc.use == NULL)
        return;
    if (XC_LOAD(&xc.use->confine_state) != state)
        XC_STORE(&xc.use->confine_state, state);
    if (XC_LOAD(&xc.use->confined_sms) != sms)
        XC_STORE(&xc.use->confined_sms, sms);
}

void xc_confine_refresh(void)
{
    const xcuda_limits *l = xc.lim;
    if (l == NULL || xc_sig.pub)
        return;
    uint32_t pct = XC_LOAD(&l->confine_pct);
    if (pct >= 100)
        pct = 0; /* the whole device: nothing to confine to */
    if (pct == atomic_load_explicit(&xc_confine_pct, memory_order_relaxed))
        return;
    atomic_store_explicit(&xc_confine_pct, pct, memory_order_relaxed);
    xc_log("kernels %s", pct ? "confined to part of the SMs" : "no longer confined");
    xc_signal_confined(pct != 0);
    if (pct == 0)
        report(XCUDA_CONFINE_NONE, 0);
}

static int have_green_api(void)
{
    return xc_real.cuDeviceGetDevResource != NULL && xc_real.cuDevSmResourceSplitByCount != NULL &&
           xc_real.cuDevResourceGenerateDesc != NULL && xc_real.cuGreenCtxCreate != NULL &&
           xc_real.cuGreenCtxDestroy != NULL && xc_real.cuCtxFromGreenCtx != NULL &&
           xc_real.cuGreenCtxStreamCreate != NULL && xc_real.cuStreamWaitEvent != NULL &&
           xc_real.cuCtxPushCurrent != NULL && xc_real.cuCtxPopCurrent != NULL &&
           xc_real.cuStreamSynchronize != NULL;
}

/* Drops gr's green context (its work done first: streams of the process may wait for
 * its events). Lock held. */
static void green_drop(struct green *gr)
{
    if (gr->s != NULL)
        xc_real.cuStreamSynchronize(gr->s);
    if (gr->before != NULL)
        xc_real.cuEventDestroy(gr->before);
    if (gr->after != NULL)
        xc_real.cuEventDestroy(gr->after);
    if (gr->g != NULL)
        xc_real.cuGreenCtxDestroy(gr->g);
    gr->g = NULL;
    gr->s = NULL;
    gr->before = gr->after = NULL;
    gr->pct = gr->sms = 0;
}

/* Makes gr a green context of pct% of dev's SMs, with its stream and the two events.
 * Returns 0, or the XCUDA_CONFINE_* state that says why not. Lock held. */
static uint32_t green_make(struct green *gr, CUdevice dev, uint32_t pct)
{
    union xc_res all, part, rest;
    memset(&all, 0, sizeof all);
    memset(&part, 0, sizeof part);
    memset(&rest, 0, sizeof rest);
    if (xc_real.cuDeviceGetDevResource(dev, &all.r, CU_DEV_RESOURCE_TYPE_SM) != CUDA_SUCCESS)
        return XCUDA_CONFINE_FAILED;
    unsigned total = all.r.sm.smCount, want = total * pct / 100, n = 1;
    if (want == 0)
        want = 1;
    if (want >= total)
        return XCUDA_CONFINE_FAILED;
    CUdevResourceDesc desc = NULL;
    CUcontext gctx = NULL, popped = NULL;
    if (xc_real.cuDevSmResourceSplitByCount(&part.r, &n, &all.r, &rest.r, 0, want) != CUDA_SUCCESS ||
        n != 1 || part.r.sm.smCount == 0 || part.r.sm.smCount >= total ||
        xc_real.cuDevResourceGenerateDesc(&desc, &part.r, 1) != CUDA_SUCCESS ||
        xc_real.cuGreenCtxCreate(&gr->g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM) != CUDA_SUCCESS) {
        gr->g = NULL;
        return XCUDA_CONFINE_FAILED;
    }
    gr->sms = part.r.sm.smCount;
    /* "before" belongs to the caller's context, recorded on its streams; "after" to the
     * green one, recorded on its stream. */
    int ok = xc_real.cuEventCreate(&gr->before, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
    if (!ok)
        gr->before = NULL;
    if (ok && xc_real.cuCtxFromGreenCtx(&gctx, gr->g) == CUDA_SUCCESS &&
        xc_real.cuCtxPushCurrent(gctx) == CUDA_SUCCESS) {
        ok = xc_real.cuEventCreate(&gr->after, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS &&
             xc_real.cuGreenCtxStreamCreate(&gr->s, gr->g, CU_STREAM_NON_BLOCKING, 0) ==
                 CUDA_SUCCESS;
        if (!ok)
            gr->after = NULL, gr->s = NULL;
        xc_real.cuCtxPopCurrent(&popped);
    } else {
        ok = 0;
    }
    if (!ok) {
        green_drop(gr);
        return XCUDA_CONFINE_FAILED;
    }
    gr->pct = pct;
    xc_log("kernels confined to a green context of %u of %u SMs (%u%%)", gr->sms, total, pct);
    return 0;
}

static int capturing(CUstream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return xc_real.cuStreamIsCapturing == NULL ||
           xc_real.cuStreamIsCapturing(s, &st) != CUDA_SUCCESS ||
           st != CU_STREAM_CAPTURE_STATUS_NONE;
}

int xc_confine_enter(CUstream s, int graph, struct xc_confined *c)
{
    c->active = 0;
    c->to = s;
    uint32_t pct = atomic_load_explicit(&xc_confine_pct, memory_order_relaxed);
    if (pct == 0)
        return 0;
    if (!have_green_api()) {
        report(XCUDA_CONFINE_NO_DRIVER, 0);
        return 0;
    }
    if (xc_mps_pct != 0 && xc_mps_pct < 100) {
        report(XCUDA_CONFINE_MPS_PCT, 0);
        return 0;
    }
    CUdevice dev = 0;
    if (xc_real.cuCtxGetDevice == NULL || xc_real.cuCtxGetDevice(&dev) != CUDA_SUCCESS ||
        dev < 0 || dev >= XCUDA_MAX_DEVICES || capturing(s))
        return 0;
    pthread_mutex_lock(&confine_mu);
    struct green *gr = &greens[dev];
    if (gr->failed || (graph && gr->graph_failed)) {
        pthread_mutex_unlock(&confine_mu);
        return 0;
    }
    if (gr->pct != pct) {
        if (gr->pct != 0)
            green_drop(gr);
        uint32_t why = green_make(gr, dev, pct);
        if (why != 0) {
            gr->failed = 1;
            report(why, 0);
            pthread_mutex_unlock(&confine_mu);
            xc_log("cannot confine kernels to %u%% of device %d's SMs: they keep every SM",
                   pct, (int)dev);
            return 0;
        }
    }
    if (xc_real.cuEventRecord(gr->before, s) != CUDA_SUCCESS ||
        xc_real.cuStreamWaitEvent(gr->s, gr->before, 0) != CUDA_SUCCESS) {
        pthread_mutex_unlock(&confine_mu);
        return 0;
    }
    report(XCUDA_CONFINE_ON, gr->sms);
    c->active = 1;
    c->graph = graph;
    c->from = s;
    c->to = gr->s;
    c->gr = gr;
    return 1; /* confine_mu stays held until xc_confine_leave */
}

int xc_confine_leave(struct xc_confined *c, CUresult r)
{
    if (!c->active)
        return 0;
    struct green *gr = c->gr;
    int again = 0;
    if (r == CUDA_SUCCESS) {
        if (xc_real.cuEventRecord(gr->after, gr->s) != CUDA_SUCCESS ||
            xc_real.cuStreamWaitEvent(c->from, gr->after, 0) != CUDA_SUCCESS)
            xc_real.cuStreamSynchronize(gr->s); /* the order must hold, if slowly */
    } else if (r == CUDA_ERROR_INVALID_HANDLE || r == CUDA_ERROR_INVALID_CONTEXT ||
               r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_NOT_SUPPORTED) {
        /* What the green context does not take goes where it was meant to, now and
         * from now on. */
        if (c->graph) {
            gr->graph_failed = 1;
        } else {
            gr->failed = 1;
            report(XCUDA_CONFINE_FAILED, 0);
        }
        xc_log("the driver refused a %s launch in the green context (CUDA error %d): %s",
               c->graph ? "graph" : "kernel", (int)r,
               c->graph ? "graphs keep every SM" : "kernels keep every SM");
        again = 1;
    }
    c->active = 0;
    pthread_mutex_unlock(&confine_mu);
    return again;
}

void xc_confine_atfork_child(void)
{
    /* The green contexts and events belong to the parent. */
    pthread_mutex_init(&confine_mu, NULL);
    memset(greens, 0, sizeof greens);
}
