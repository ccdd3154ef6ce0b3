/* gate.c — the launch gate's slow path. Reached only when the container is
 * paused, throttled (share below 100%) or stopping; the fast path is the
 * inline test in xcuda.h.
 *
 * Throttling is a token bucket of GPU time shared by all processes of the
 * container (in the usage block): it refills at share × wall time up to a
 * burst, and every measured launch is charged its real GPU time when it
 * completes: between an event recorded after it and one before it — the previous
 * measured launch's end where that one was still outstanding on the same stream
 * (the stream was busy until then), else a start event of its own; a launch behind
 * another costs one event record, not two. Because the unit is GPU time,
 * not SMs or blocks, the gain does not depend on the GPU's SM count. At most
 * max_inflight measured launches are outstanding per process, so a cut or a
 * pause bites within max_inflight launches. */
#include <pthread.h>
#include <string.h>

#include "xcuda.h"

struct slot {
    CUevent start, end;
    CUstream stream;
    pthread_t thread; /* a stream handle of 0 or CU_STREAM_PER_THREAD is per thread */
    int chained;      /* timed from the previous slot's end, not from start */
    CUcontext ctx;
    uint64_t launch_ns;
    unsigned kernels; /* kernels the launch ran (a graph's; 1 otherwise) */
};

static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
/* One entry more than can be outstanding: the one before the oldest outstanding
 * keeps the end event the oldest may be timed from. */
#define RING_N (XCUDA_MAX_INFLIGHT_CAP + 1)
static struct slot ring[RING_N];
static unsigned ring_head, ring_count; /* FIFO of launched, unreaped slots */
static int was_open = 1;               /* last launch went through unmeasured */
/* Measured GPU time per launch of this process (moving average, ns; 0 = none yet):
 * what the queue budget and hold-ahead estimate a launch at. */
static uint64_t per_launch_ns;

_Thread_local uint32_t xc_tls_launches __attribute__((tls_model("initial-exec")));
static _Thread_local uint32_t tls_flushed __attribute__((tls_model("initial-exec")));

void xc_flush_launches(void)
{
    uint32_t n = xc_tls_launches - tls_flushed;
    tls_flushed = xc_tls_launches;
    if (xc.use == NULL)
        return;
    uint64_t now = xc_now_real_ns();
    XC_ADD(&xc.use->launches, n);
    XC_STORE(&xc.use->heartbeat_ns, now);
    if (xc.me) {
        XC_ADD(&xc.me->launches, n);
        XC_STORE(&xc.me->heartbeat_ns, now);
    }
}

static void add_throttled(uint64_t ns)
{
    if (ns == 0 || xc.use == NULL)
        return;
    XC_ADD(&xc.use->throttled_ns, ns);
    if (xc.me)
        XC_ADD(&xc.me->throttled_ns, ns);
}

static void wait_ns(uint64_t ns)
{
    uint64_t t0 = xc_now_mono_ns();
    xc_sleep_ns(ns);
    add_throttled(xc_now_mono_ns() - t0);
}

static uint64_t burst_ns(void)
{
    uint64_t b = XC_LOAD(&xc.lim->burst_ns);
    if (b == 0)
        return XCUDA_DEFAULT_BURST_NS;
    return b > 1000000000ull ? 1000000000ull : b;
}

/* The driver functions measuring needs; without them only pause works. */
static int can_measure(void)
{
    return xc_real.cuEventCreate && xc_real.cuEventDestroy && xc_real.cuEventRecord &&
           xc_real.cuEventQuery && xc_real.cuEventSynchronize && xc_real.cuCtxGetCurrent;
}

static void refill(uint32_t share)
{
    xcuda_usage *u = xc.use;
    uint64_t now = xc_now_mono_ns();
    int64_t burst = (int64_t)burst_ns();
    uint64_t last = XC_LOAD(&u->bucket_refill_ns);
    /* Another process refilled between our clock read and this load: its
     * refill already covers our time. (Treating this as "idle for long" once
     * handed out a full burst and set the refill time backwards.) */
    if (last != 0 && now <= last)
        return;
    if (last == 0 || now - last > 10000000000ull) {
        /* First use starts from an empty bucket (no burst above the share
         * in the first window); after a long idle period, from a full one. */
        if (__atomic_compare_exchange_n(&u->bucket_refill_ns, &last, now, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            int64_t t = XC_LOAD(&u->bucket_tokens_ns);
            int64_t start = last == 0 ? 0 : burst;
            if (t < start)
                XC_STORE(&u->bucket_tokens_ns, t < 0 ? t + start : start);
        }
        return;
    }
    if (!__atomic_compare_exchange_n(&u->bucket_refill_ns, &last, now, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_RELAXED))
        return;
    int64_t add = (int64_t)((now - last) * share / XCUDA_SHARE_FULL);
    int64_t t = __atomic_add_fetch(&u->bucket_tokens_ns, add, __ATOMIC_ACQ_REL);
    while (t > burst && !__atomic_compare_exchange_n(&u->bucket_tokens_ns, &t, burst, 1,
                                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

/* charge takes a measured launch of gpu_ns that ran `kernels` kernels. Its square goes
 * to gpu_time_sq_us2 split among them as equal parts (k parts of gpu/k: gpu²/k): what a
 * request arriving during a graph meets is the kernel in flight, not the graph, whose
 * next kernels leave the SMs to the online ones as the last blocks retire. */
static void charge(uint64_t gpu_ns, unsigned kernels)
{
    __atomic_sub_fetch(&xc.use->bucket_tokens_ns, (int64_t)gpu_ns, __ATOMIC_ACQ_REL);
    XC_ADD(&xc.use->gpu_time_ns, gpu_ns);
    XC_ADD(&xc.use->measured_launches, 1);
    uint64_t us = gpu_ns / 1000;
    XC_ADD(&xc.use->gpu_time_sq_us2, us * us / (kernels > 1 ? kernels : 1));
}

/* Completes the oldest slot; with block=0 only if it is done. Locked. */
static int reap_one(int block)
{
    if (ring_count == 0)
        return 0;
    struct slot *s = &ring[ring_head];
    CUresult r = block ? xc_real.cuEventSynchronize(s->end) : xc_real.cuEventQuery(s->end);
    if (r == CUDA_ERROR_NOT_READY)
        return 0;
    /* A chained slot's previous one was reaped before it; its entry is not reused
     * while this one is outstanding (RING_N). */
    CUevent from = s->chained ? ring[(ring_head + RING_N - 1) % RING_N].end : s->start;
    uint64_t gpu;
    float ms = 0;
    if (r == CUDA_SUCCESS && xc_real.cuEventElapsedTime != NULL &&
        xc_real.cuEventElapsedTime(&ms, from, s->end) == CUDA_SUCCESS &&
        ms >= 0) {
        gpu = (uint64_t)((double)ms * 1e6);
    } else {
        /* No timing (or a failed launch): charge what wall time says. */
        uint64_t now = xc_now_mono_ns();
        gpu = now > s->launch_ns ? now - s->launch_ns : 0;
    }
    charge(gpu, s->kernels);
    uint64_t per = XC_LOAD(&per_launch_ns);
    XC_STORE(&per_launch_ns, per == 0 ? gpu : (3 * per + gpu) / 4);
    ring_head = (ring_head + 1) % RING_N;
    XC_STORE(&ring_count, ring_count - 1);
    __atomic_sub_fetch(&xc.use->inflight, 1, __ATOMIC_RELAXED);
    return 1;
}

uint64_t xc_gate_queue_ns(void)
{
    uint64_t q = XC_LOAD(&xc.lim->queue_ns);
    if (q == 0)
        q = XCUDA_DEFAULT_QUEUE_NS;
    return q > XCUDA_QUEUE_MAX_NS ? XCUDA_QUEUE_MAX_NS : q;
}

uint64_t xc_gate_launch_est_ns(void)
{
    return (uint64_t)(XC_LOAD(&ring_count) + 1) * XC_LOAD(&per_launch_ns);
}

uint64_t xc_gate_per_launch_ns(void) { return XC_LOAD(&per_launch_ns); }

static unsigned max_inflight(void)
{
    unsigned m = XC_LOAD(&xc.lim->max_inflight);
    if (m == 0) {
        /* Four launches, or the queue budget of GPU time at this process's measured
         * time per launch if that is more: four 20 us kernels would leave the GPU idle
         * whenever the host takes longer than 80 us to come back. */
        m = XCUDA_DEFAULT_MAX_INFLIGHT;
        uint64_t per = XC_LOAD(&per_launch_ns);
        uint64_t n = per == 0 ? 0 : xc_gate_queue_ns() / per;
        if (n > m)
            m = n < XCUDA_MAX_INFLIGHT_CAP ? (unsigned)n : XCUDA_MAX_INFLIGHT_CAP;
    }
    if (m > XCUDA_MAX_INFLIGHT_CAP)
        m = XCUDA_MAX_INFLIGHT_CAP;
    if (m > 1 && xc_signal_online_seen(xc_now_mono_ns())) {
        /* Online is active on this GPU: what is queued here runs before (or beside) its
         * next request, and held launches cannot take back SMs (nor, where this
         * process leaves the online kernels their SMs, the memory traffic and the
         * blocks beside theirs). Keep at most the queue budget of GPU time
         * outstanding, at this process's measured time per launch; one launch always
         * goes, so offline progresses, and many tiny kernels still overlap. */
        uint64_t per = XC_LOAD(&per_launch_ns);
        uint64_t q = xc_gate_queue_ns();
        uint64_t n = per == 0 ? 1 : q / per;
        if (n < 1)
            n = 1;
        if (n < m)
            m = (unsigned)n;
    }
    return m;
}

/* Makes the slot's events belong to the current context. Locked. */
static int prepare_slot(struct slot *s)
{
    CUcontext ctx = NULL;
    if (xc_real.cuCtxGetCurrent == NULL || xc_real.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS ||
        ctx == NULL)
        return -1;
    if (s->ctx != ctx || s->start == NULL || s->end == NULL) {
        if (s->start)
            xc_real.cuEventDestroy(s->start);
        if (s->end)
            xc_real.cuEventDestroy(s->end);
        s->start = s->end = NULL;
        s->ctx = NULL;
        if (xc_real.cuEventCreate(&s->start, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
            return -1;
        if (xc_real.cuEventCreate(&s->end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
            xc_real.cuEventDestroy(s->start);
            s->start = NULL;
            return -1;
        }
        s->ctx = ctx;
    }
    return 0;
}

static int capturing(CUstream stream)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (xc_real.cuStreamIsCapturing == NULL ||
        xc_real.cuStreamIsCapturing(stream, &st) != CUDA_SUCCESS)
        return 0;
    return st != CU_STREAM_CAPTURE_STATUS_NONE;
}

CUresult xc_gate_slow(CUstream stream, struct xc_ticket *t)
{
    t->tracked = 0;
    int checked_capture = 0;
    for (int iter = 0;; iter++) {
        /* After a wait here, online work may have started on the GPU: hold for it
         * again (the launch wrapper checked once before coming here). */
        if (iter > 0 && !xc_sig.pub)
            xc_signal_launch();
        if (atomic_load_explicit(&xc_stopping, memory_order_acquire)) {
            /* Draining after SIGINT/SIGTERM: nothing new starts. */
            wait_ns(1000000);
            continue;
        }
        const xcuda_limits *l = xc.lim;
        if (l == NULL)
            return CUDA_SUCCESS;
        if (XC_LOAD(&l->paused)) {
            wait_ns(1000000);
            continue;
        }
        uint32_t share = XC_LOAD(&l->share_bp);
        /* Unthrottled, but online work is active on the GPU: measured and bounded by
         * the queue budget all the same, without the token bucket. */
        int bound_only = share >= XCUDA_SHARE_FULL && xc_signal_bounds();
        if (share >= XCUDA_SHARE_FULL && !bound_only) {
            pthread_mutex_lock(&gate_mu);
            while (reap_one(0)) {
            }
            was_open = 1;
            pthread_mutex_unlock(&gate_mu);
            return CUDA_SUCCESS;
        }
        if (!can_measure())
            return CUDA_SUCCESS;
        /* A launch into a capturing stream only records a graph node; the
         * graph is gated when it is launched. */
        if (!checked_capture) {
            if (capturing(stream))
                return CUDA_SUCCESS;
            checked_capture = 1;
        }
        pthread_mutex_lock(&gate_mu);
        if (was_open) {
            /* Work queued while unthrottled is unmeasured; let it finish so
             * the cut takes effect from here on. */
            was_open = 0;
            CUevent ev = NULL;
            uint64_t t0 = xc_now_mono_ns();
            if (xc_real.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
                if (xc_real.cuEventRecord(ev, stream) == CUDA_SUCCESS)
                    xc_real.cuEventSynchronize(ev);
                xc_real.cuEventDestroy(ev);
            }
            add_throttled(xc_now_mono_ns() - t0);
        }
        while (reap_one(0)) {
        }
        if (ring_count >= max_inflight()) {
            uint64_t t0 = xc_now_mono_ns();
            reap_one(1);
            add_throttled(xc_now_mono_ns() - t0);
            pthread_mutex_unlock(&gate_mu);
            continue;
        }
        if (!bound_only)
            refill(share);
        int64_t tokens = bound_only ? 0 : XC_LOAD(&xc.use->bucket_tokens_ns);
        if (tokens < 0) {
            pthread_mutex_unlock(&gate_mu);
            uint64_t w = share ? (uint64_t)(-tokens) * XCUDA_SHARE_FULL / share : 1000000;
            if (w < 20000)
                w = 20000;
            if (w > 2000000)
                w = 2000000; /* re-read the limits at least every 2 ms */
            wait_ns(w);
            continue;
        }
        unsigned idx = (ring_head + ring_count) % RING_N;
        struct slot *s = &ring[idx];
        if (prepare_slot(s) != 0) {
            pthread_mutex_unlock(&gate_mu);
            return CUDA_SUCCESS; /* cannot measure: let it through unmeasured */
        }
        /* The previous launch is still outstanding after the reaping above, on this
         * stream: the stream is busy until its end, so this one's time starts there. */
        const struct slot *prev = ring_count ? &ring[(idx + RING_N - 1) % RING_N] : NULL;
        pthread_t self = pthread_self();
        s->chained = prev != NULL && prev->stream == stream && prev->ctx == s->ctx &&
                     pthread_equal(prev->thread, self);
        s->stream = stream;
        s->thread = self;
        if (!s->chained && xc_real.cuEventRecord(s->start, stream) != CUDA_SUCCESS) {
            pthread_mutex_unlock(&gate_mu);
            return CUDA_SUCCESS;
        }
        s->launch_ns = xc_now_mono_ns();
        t->tracked = 1;
        t->slot = (int)idx;
        return CUDA_SUCCESS; /* gate_mu stays held until xc_gate_done */
    }
}

void xc_gate_done(CUstream stream, struct xc_ticket *t, CUresult launched)
{
    if (!t->tracked)
        return;
    struct slot *s = &ring[t->slot];
    s->kernels = t->kernels;
    if (launched == CUDA_SUCCESS && xc_real.cuEventRecord(s->end, stream) == CUDA_SUCCESS) {
        XC_STORE(&ring_count, ring_count + 1);
        __atomic_add_fetch(&xc.use->inflight, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&gate_mu);
}

void xc_gate_drain(void)
{
    if (xc.use == NULL)
        return;
    pthread_mutex_lock(&gate_mu);
    while (reap_one(1)) {
    }
    pthread_mutex_unlock(&gate_mu);
}

void xc_gate_atfork_child(void)
{
    /* Events and in-flight launches belong to the parent. */
    pthread_mutex_init(&gate_mu, NULL);
    memset(ring, 0, sizeof ring);
    ring_head = ring_count = 0;
    was_open = 1;
    per_launch_ns = 0;
    xc_tls_launches = tls_flushed = 0;
}
