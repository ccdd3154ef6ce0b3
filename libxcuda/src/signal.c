/* signal.c — online-aware gating through the node's GPU signal page
 * (xcuda_signal in xcuda_ctl.h; one 64-byte slot per GPU).
 *
 * Online processes (role PUBLISH) store "launched at T" (CLOCK_MONOTONIC ns)
 * in their GPUs' slots: on a launch that finds a slot at 0, and again at most
 * every XCUDA_SIGNAL_REFRESH_NS from the launch slow path that every 32nd
 * launch of a thread takes anyway; they store 0 when a synchronisation
 * returns and at exit. The launch fast path only loads the slot (a line no
 * one writes while it is already set), so the online side's cost is one load
 * and a compare per launch.
 *
 * Offline processes (role FOLLOW) load the slots on every launch: all zero
 * (no online work pending) is the fast path, unchanged. Otherwise a launch
 * waits while some slot says online launched within the hold window, bounded
 * by a budget: at most hold_max_bp of every hold period is spent holding,
 * whatever the page says, so offline always progresses. It waits on the
 * slot's idle_seq futex, which the online side bumps and wakes when it clears
 * the slot (the one system call this adds there, once per synchronisation
 * that ends online work, never per launch, and only while muxd counts
 * followers of the GPU): the hold ends as soon as the online work does,
 * without waking every 50 us to look.
 * The page is writable by every online container, so every value read from
 * it is untrusted: a timestamp in the future or the far past is stale, a
 * page that says "busy" forever costs offline its budget and no more. The
 * policy comes from the container's own limits page (read-only to it). */
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "xcuda.h"

struct xc_sig xc_sig;

/* Process-wide hold budget: start of the current hold period and the time
 * held in it (all threads; two threads holding together use it up twice as
 * fast, which only errs towards offline progress). */
static uint64_t hold_period_start, hold_used;
/* When this process last saw online work published (CLOCK_MONOTONIC ns). */
static uint64_t online_seen;

/* What xc_sig.w0 points at when the fast path must not be taken: follow: 1 (busy),
 * publish: 0 (unset). A follower with one slot points w0 here while online work was seen
 * within XCUDA_SHRINK_NS, so that even an unthrottled process takes the slow path, where
 * its outstanding work is bounded (xc_signal_bounds), and back at its slot after. */
const uint64_t xc_never_quiet[2] = {1, 0};
#define never_quiet xc_never_quiet

static void follow_slow(int on)
{
    if (xc_sig.pub || xc_sig.n != 1)
        return; /* several slots: w0 is never_quiet for good */
    const uint64_t *want = on || xc_confine_wanted() ? &never_quiet[0] : xc_sig.w[0];
    if (XC_LOAD(&xc_sig.w0) != want)
        XC_STORE(&xc_sig.w0, want);
}

/* Set while this offline process leaves the online kernels room (follow_fitted). */
static _Atomic int fitted;

/* The longest one wait of a hold lasts before the page is read again: a publisher that
 * never wakes (an older libxcuda, a killed process; the window ends those slots) or a
 * second busy slot is noticed within this, and so is a SIGTERM drain. */
#define HOLD_WAIT_MAX_NS 1000000ull
/* Holding ahead of a predicted request (no slot busy yet): re-read every 50 us, as the
 * request's start wakes nobody. */
#define HOLD_AHEAD_POLL_NS 50000ull

void xc_signal_init(const char *path)
{
    const xcuda_limits *l = xc.lim;
    memset(&xc_sig, 0, sizeof xc_sig);
    if (l == NULL)
        return;
    uint32_t role = XC_LOAD(&l->signal_role);
    uint64_t mask = XC_LOAD(&l->signal_mask);
    if ((role != XCUDA_SIGNAL_PUBLISH && role != XCUDA_SIGNAL_FOLLOW) || mask == 0)
        return;
    int pub = role == XCUDA_SIGNAL_PUBLISH;
    int fd = open(path, (pub ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) {
        xc_log("no GPU signal page at %s: online-aware gating off", path);
        return;
    }
    struct stat st;
    void *p = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size >= sizeof(xcuda_signal)) {
        p = mmap(NULL, sizeof(xcuda_signal), pub ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED,
                 fd, 0);
        if (p == MAP_FAILED)
            p = NULL;
    }
    close(fd);
    if (p == NULL) {
        xc_log("GPU signal page %s is unusable: online-aware gating off", path);
        return;
    }
    xcuda_signal *s = p;
    if (XC_LOAD(&s->hdr.magic) != XCUDA_SIGNAL_MAGIC) {
        munmap(p, sizeof(xcuda_signal));
        xc_log("GPU signal page %s has a bad header: online-aware gating off", path);
        return;
    }
    unsigned n = 0;
    for (unsigned i = 0; i < XCUDA_SIGNAL_SLOTS; i++)
        if (mask & (1ull << i))
            xc_sig.w[n++] = &s->slot[i].online_ns;
    xc_sig.pub = (uint64_t)pub;
    xc_sig.page = s;
    xc_sig.n = n;
    /* Last: the fast path looks at w0 first. */
    XC_STORE(&xc_sig.w0, n == 1 ? (const uint64_t *)xc_sig.w[0] : &never_quiet[pub]);
    xc_log("GPU signal page %s: %s %u slot(s)", path, pub ? "publishing to" : "following", n);
}

/* Whether a slot's value says online work was launched within window of now.
 * 0 is idle; a value further than window from now, either side, is stale or
 * corrupt. */
static int slot_busy(uint64_t v, uint64_t now, uint64_t window)
{
    if (v == 0)
        return 0;
    return v <= now ? now - v < window : v - now < window;
}

/* When slot i, whose value v is set, goes stale: the hold window after v, or later while
 * an online synchronisation that began within XCUDA_SIGNAL_SYNC_MAX_NS is under way
 * (sync_ns, version 8); at most now when it is stale already. A sync_ns from the future
 * counts as corrupt, as online_ns's do beyond the window. */
static uint64_t slot_stale_at(unsigned i, uint64_t v, uint64_t now, uint64_t window)
{
    uint64_t until = slot_busy(v, now, window) ? (v <= now ? v : now) + window : 0;
    uint64_t s = XC_LOAD(&((xcuda_signal_slot *)xc_sig.w[i])->sync_ns);
    if (s != 0 && s <= now && now - s < XCUDA_SIGNAL_SYNC_MAX_NS &&
        s + XCUDA_SIGNAL_SYNC_MAX_NS > until)
        until = s + XCUDA_SIGNAL_SYNC_MAX_NS;
    return until;
}

/* Every slot quiet (see xc_signal_quiet). */
static int all_quiet(void)
{
    for (unsigned i = 0; i < xc_sig.n; i++)
        if ((uint64_t)(XC_LOAD(xc_sig.w[i]) != 0) != xc_sig.pub)
            return 0;
    return 1;
}

/* When this process last set each slot from 0: the start of a busy period it may end
 * (xc_signal_idle adds it to the slot's busy_ns); 0 = none. */
static _Atomic uint64_t busy_from[XCUDA_SIGNAL_SLOTS];

static void publish(void)
{
    uint64_t now = xc_now_mono_ns();
    for (unsigned i = 0; i < xc_sig.n; i++) {
        uint64_t v = XC_LOAD(xc_sig.w[i]);
        if (v == 0)
            atomic_store_explicit(&busy_from[i], now, memory_order_relaxed);
        if (v == 0 || v > now || now - v >= XCUDA_SIGNAL_REFRESH_NS)
            XC_STORE(xc_sig.w[i], now);
    }
}

/* The slot whose online_ns xc_sig.w[i] points at (its first field). */
_Static_assert(offsetof(xcuda_signal_slot, online_ns) == 0, "online_ns leads its slot");
static xcuda_signal_slot *slot_at(unsigned i)
{
    return (xcuda_signal_slot *)xc_sig.w[i];
}

void xc_signal_sync_enter(void)
{
    if (!xc_sig.pub)
        return;
    uint64_t now = 0;
    for (unsigned i = 0; i < xc_sig.n; i++)
        if (XC_LOAD(xc_sig.w[i]) != 0 && XC_LOAD(&slot_at(i)->followers) != 0) {
            if (now == 0)
                now = xc_now_mono_ns();
            XC_STORE(&slot_at(i)->sync_ns, now);
        }
}

void xc_signal_idle(void)
{
    if (!xc_sig.pub)
        return;
    uint64_t now = 0;
    for (unsigned i = 0; i < xc_sig.n; i++)
        if (XC_LOAD(xc_sig.w[i]) != 0) {
            /* Before the clear: a follower that still sees the slot set sees no
             * synchronisation under way, and falls back to the hold window. */
            if (XC_LOAD(&slot_at(i)->sync_ns) != 0)
                XC_STORE(&slot_at(i)->sync_ns, 0);
            if (XC_LOAD(&slot_at(i)->followers) == 0) {
                XC_STORE(xc_sig.w[i], 0);
                continue; /* no offline container follows this GPU: nobody waits */
            }
            /* The time of the clear before the clear: a follower that sees the 0 sees
             * when it came (linger). */
            if (now == 0)
                now = xc_now_mono_ns();
            uint64_t from = atomic_exchange_explicit(&busy_from[i], 0, memory_order_relaxed);
            if (from != 0 && now > from) {
                XC_ADD(&slot_at(i)->busy_ns, now - from);
                XC_ADD(&slot_at(i)->busy_spans, 1);
            }
            XC_STORE(&slot_at(i)->idle_ns, now);
            __atomic_store_n(xc_sig.w[i], 0, __ATOMIC_RELEASE);
            /* After the clear: a follower that sees the new sequence sees the 0. */
            __atomic_add_fetch(&slot_at(i)->idle_seq, 1, __ATOMIC_SEQ_CST);
            syscall(SYS_futex, &slot_at(i)->idle_seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
        }
}

/* Waits up to ns, or until slot i's idle_seq moves on from seq (the online work
 * published there is done), whichever is first. */
static void wait_idle(unsigned i, uint32_t seq, uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    /* EAGAIN (moved on already), a wake-up, a timeout and EINTR all mean: look again. */
    syscall(SYS_futex, &slot_at(i)->idle_seq, FUTEX_WAIT, seq, &ts, NULL, 0);
}

static uint64_t clamp_u64(uint64_t v, uint64_t def, uint64_t lo, uint64_t hi)
{
    if (v == 0)
        v = def;
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---- hold-ahead: predicting the next request of a regular online service ----
 *
 * An offline process sees each online request start as its slot going from idle to a
 * timestamp (the online launch time, CLOCK_MONOTONIC). It keeps the last AHEAD_N
 * starts it saw. When their gaps are (multiples of) one period P within a tolerance —
 * a service driven at a steady rate — the next request is due at last + k·P, give or
 * take the largest deviation seen (J). A launch that would still be running then (now
 * + this process's estimated outstanding GPU time, see xc_gate_launch_est_ns) waits
 * until the request has started (and then while it runs, as any hold) or until it is
 * J late, within the same hold budget. Irregular arrivals (Poisson, bursts) fail the
 * test and change nothing. A thread that finds the state busy skips it (trylock). */
#define AHEAD_N 17u                /* starts kept: 16 gaps */
#define AHEAD_MIN_GAPS 8u
#define AHEAD_MIN_PERIOD_NS 2000000ull  /* faster services leave no room to predict */
#define AHEAD_MAX_PERIOD_NS 1000000000ull
#define AHEAD_MIN_JITTER_NS 200000ull

static pthread_mutex_t ahead_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t ahead_starts[AHEAD_N];
static unsigned ahead_n;      /* starts recorded, all time */
static uint64_t ahead_prev;   /* the slot value last seen (0: idle) */
/* The prediction, refreshed when a start is recorded: period, jitter, last start
 * (0: no regular pace). */
static uint64_t ahead_period, ahead_jitter, ahead_last, ahead_phase;
/* The mean time between the recorded starts (0: fewer than two seen), for the linger. */
static uint64_t ahead_gap;

static void u64_sort(uint64_t *a, unsigned n)
{
    for (unsigned i = 1; i < n; i++)
        for (unsigned j = i; j > 0 && a[j - 1] > a[j]; j--) {
            uint64_t t = a[j];
            a[j] = a[j - 1];
            a[j - 1] = t;
        }
}

/* Recomputes the pace from the recorded starts. ahead_mu held.
 *
 * A service driven at a steady rate starts request k at T0 + k·P + d_k, d_k >= 0 being
 * how late its host got to it (scheduling, the driver's round trips: on a loaded host,
 * milliseconds). So: P from the median gap, refined over the whole window (each start's
 * index counted in periods, which also absorbs requests this process did not see);
 * T0 from the earliest-aligned start; the pace is regular when 3 in 4 starts lie within
 * P/8 after their slot, and J, how long to wait past a slot for a late request, is the
 * latest of those. */
static void ahead_fit(void)
{
    ahead_period = ahead_jitter = ahead_phase = 0;
    unsigned n = ahead_n < AHEAD_N ? ahead_n : AHEAD_N;
    if (n < AHEAD_MIN_GAPS + 1)
        return;
    uint64_t st[AHEAD_N], gaps[AHEAD_N];
    for (unsigned i = 0; i < n; i++)
        st[i] = ahead_starts[(ahead_n - n + i) % AHEAD_N];
    for (unsigned i = 1; i < n; i++) {
        if (st[i] <= st[i - 1])
            return;
        gaps[i - 1] = st[i] - st[i - 1];
    }
    u64_sort(gaps, n - 1);
    uint64_t p = gaps[(n - 1) / 2];
    if (p < AHEAD_MIN_PERIOD_NS || p > AHEAD_MAX_PERIOD_NS)
        return;
    uint64_t kl = (st[n - 1] - st[0] + p / 2) / p;
    if (kl == 0 || kl > 4 * n)
        return;
    p = (st[n - 1] - st[0]) / kl;
    /* phase: the start furthest ahead of its slot (the least late) */
    int64_t lead = 0;
    for (unsigned i = 1; i < n; i++) {
        uint64_t k = (st[i] - st[0] + p / 2) / p;
        int64_t off = (int64_t)(st[i] - st[0]) - (int64_t)(k * p);
        if (off < lead)
            lead = off;
    }
    uint64_t phase = st[0] - (uint64_t)(-lead);
    uint64_t tol = p / 8, worst = 0;
    unsigned ok = 0;
    for (unsigned i = 0; i < n; i++) {
        uint64_t late = (st[i] - phase) % p; /* after its slot: phase is the earliest */
        if (late <= tol) {
            ok++;
            if (late > worst)
                worst = late;
        }
    }
    if (ok * 4 < n * 3) /* fewer than 3 in 4 starts on the pace: not regular */
        return;
    uint64_t j = worst + 100000;
    if (j < AHEAD_MIN_JITTER_NS)
        j = AHEAD_MIN_JITTER_NS;
    ahead_period = p;
    ahead_phase = phase;
    ahead_jitter = j > tol ? tol : j;
    xc_log("online requests at a regular pace: period %llu us, %u of %u starts within %llu us",
           (unsigned long long)p / 1000, ok, n, (unsigned long long)ahead_jitter / 1000);
}

/* Notes the slot value v (0: idle) seen now. */
static void ahead_observe(uint64_t v, uint64_t now)
{
    if (pthread_mutex_trylock(&ahead_mu) != 0)
        return;
    if (v != 0 && ahead_prev == 0 && v <= now && v > ahead_last) {
        ahead_starts[ahead_n % AHEAD_N] = v;
        ahead_n++;
        ahead_last = v;
        unsigned n = ahead_n < AHEAD_N ? ahead_n : AHEAD_N;
        uint64_t first = ahead_starts[(ahead_n - n) % AHEAD_N];
        if (n >= 2 && v > first)
            XC_STORE(&ahead_gap, (v - first) / (n - 1));
        ahead_fit();
    }
    ahead_prev = v;
    pthread_mutex_unlock(&ahead_mu);
}

/* Whether a launch now, running for est ns, should wait for the next predicted online
 * request; if so, until when at most. 0: go. */
static uint64_t ahead_until(uint64_t now, uint64_t est)
{
    uint64_t p = XC_LOAD(&ahead_period), j = XC_LOAD(&ahead_jitter), last = XC_LOAD(&ahead_last);
    uint64_t phase = XC_LOAD(&ahead_phase);
    if (p == 0 || last == 0 || now < last || now - last > 4 * p || phase > last)
        return 0; /* no pace, or the service has paused: nothing to predict */
    if (est > p / 2)
        return 0; /* a launch this long overlaps a request whenever it goes: holding
                   * for it would only spend the budget */
    /* the first slot after the last request seen that is not yet over */
    uint64_t next = phase + ((last - phase) / p + 1) * p;
    while (next + j <= now)
        next += p;
    if (now + est + AHEAD_MIN_JITTER_NS <= next)
        return 0; /* done before the next request is due */
    return next + j;
}

static int ahead_on(void)
{
    return XC_LOAD(&xc.lim->hold_ahead) != XCUDA_AHEAD_OFF;
}

/* ---- linger: the gap between two online requests ----
 *
 * An online service with more requests queued starts the next one as soon as its
 * synchronisation returns, some microseconds later. A held offline launch woken by that
 * synchronisation would go first, and the next request would wait for its blocks (MPS
 * preempts nothing): on every request of a busy period. So a follower that does not
 * leave the online kernels room keeps holding for the linger after the last clear of
 * its slots (idle_ns), within the same budget: a queued request starts in that time and
 * is held for as any other; a service that has nothing queued costs the follower one
 * linger per request, so the linger is at most 1/LINGER_GAP_DIV of the mean time between
 * the requests seen to start (a fast service's requests are short, and so is the gap
 * its host leaves between two). A clear time in the future is stale (the page is
 * untrusted). */
#define LINGER_GAP_DIV 20u

static uint64_t linger_ns(void)
{
    uint64_t v = XC_LOAD(&xc.lim->hold_linger_ns);
    if (v == 0)
        v = XCUDA_DEFAULT_LINGER_NS;
    else if (v < 1000)
        return 0;
    else if (v > XCUDA_LINGER_MAX_NS)
        v = XCUDA_LINGER_MAX_NS;
    uint64_t gap = XC_LOAD(&ahead_gap);
    if (gap != 0 && v > gap / LINGER_GAP_DIV)
        v = gap / LINGER_GAP_DIV;
    return v;
}

/* Until when a launch now lingers after the latest clear of a slot (0: it need not). */
static uint64_t linger_until(uint64_t now, uint64_t linger)
{
    uint64_t until = 0;
    for (unsigned i = 0; linger != 0 && i < xc_sig.n; i++) {
        uint64_t t = XC_LOAD(&slot_at(i)->idle_ns);
        if (t != 0 && t <= now && now - t < linger && t + linger > until)
            until = t + linger;
    }
    return until;
}

/* The largest busy slot value (0: all idle or stale); *slot says whose. */
/* The latest busy slot's value (0: none) and that slot; *until: when the last busy slot
 * goes stale. */
static uint64_t busy_value(uint64_t now, uint64_t window, unsigned *slot, uint64_t *until)
{
    uint64_t m = 0;
    *until = 0;
    for (unsigned i = 0; i < xc_sig.n; i++) {
        uint64_t v = XC_LOAD(xc_sig.w[i]);
        if (v == 0)
            continue;
        uint64_t u = slot_stale_at(i, v, now, window);
        if (u <= now)
            continue;
        if (v > m) {
            m = v;
            *slot = i;
        }
        if (u > *until)
            *until = u;
    }
    return m;
}

static void hold(void)
{
    const xcuda_limits *l = xc.lim;
    uint64_t window = clamp_u64(XC_LOAD(&l->hold_window_ns), XCUDA_DEFAULT_HOLD_WINDOW_NS, 1000,
                                XCUDA_HOLD_WINDOW_MAX_NS);
    uint64_t now = xc_now_mono_ns();
    int ahead = ahead_on();
    int fit = atomic_load_explicit(&fitted, memory_order_relaxed);
    uint64_t linger = fit ? 0 : linger_ns();
    unsigned slot = 0;
    uint64_t stale_at = 0;
    uint64_t v = busy_value(now, window, &slot, &stale_at);
    ahead_observe(v, now);
    if (v != 0) {
        XC_STORE(&online_seen, now);
        if (!fit)
            follow_slow(1);
    } else if (linger_until(now, linger) == 0 &&
               (!ahead || ahead_until(now, xc_gate_launch_est_ns()) == 0)) {
        return;
    }
    uint64_t period = clamp_u64(XC_LOAD(&l->hold_period_ns), XCUDA_DEFAULT_HOLD_PERIOD_NS,
                                XCUDA_HOLD_PERIOD_MIN_NS, XCUDA_HOLD_PERIOD_MAX_NS);
    uint64_t bp = clamp_u64(XC_LOAD(&l->hold_max_bp), XCUDA_DEFAULT_HOLD_MAX_BP, 0,
                            XCUDA_HOLD_MAX_BP_CAP);
    uint64_t budget = period / XCUDA_SHARE_FULL * bp;
    uint64_t t0 = now, ahead_held = 0;
    for (;;) {
        uint64_t start = XC_LOAD(&hold_period_start);
        if (start == 0 || start > now || now - start >= period) {
            XC_STORE(&hold_period_start, now);
            XC_STORE(&hold_used, 0);
        }
        uint64_t used = XC_LOAD(&hold_used);
        if (used >= budget || atomic_load_explicit(&xc_stopping, memory_order_relaxed))
            break;
        /* Each slot's sequence before its value: a clear after this read wakes us. */
        uint32_t seq[XCUDA_SIGNAL_SLOTS];
        for (unsigned i = 0; i < xc_sig.n; i++)
            seq[i] = __atomic_load_n(&slot_at(i)->idle_seq, __ATOMIC_SEQ_CST);
        v = busy_value(now, window, &slot, &stale_at);
        ahead_observe(v, now);
        uint64_t w = budget - used < HOLD_WAIT_MAX_NS ? budget - used : HOLD_WAIT_MAX_NS;
        int early = 0;
        if (v != 0) {
            XC_STORE(&online_seen, now);
            if (stale_at - now < w)
                w = stale_at - now; /* the slot goes stale then */
            wait_idle(slot, seq[slot], w);
        } else {
            /* No online work in flight: wait while lingering after the last request,
             * or ahead of the next predicted one; the start of either wakes nobody,
             * so look again every 50 us. */
            uint64_t until = ahead ? ahead_until(now, xc_gate_launch_est_ns()) : 0;
            early = until > now;
            uint64_t lg = linger_until(now, linger);
            if (lg > until)
                until = lg;
            if (until <= now)
                break;
            if (until - now < w)
                w = until - now;
            xc_sleep_ns(w < HOLD_AHEAD_POLL_NS ? w : HOLD_AHEAD_POLL_NS);
        }
        uint64_t t = xc_now_mono_ns();
        XC_ADD(&hold_used, t > now ? t - now : 0);
        if (early)
            ahead_held += t > now ? t - now : 0;
        now = t;
    }
    uint64_t held = now > t0 ? now - t0 : 0;
    if (held == 0 || xc.use == NULL)
        return;
    XC_ADD(&xc.use->online_held_ns, held);
    if (ahead_held)
        XC_ADD(&xc.use->ahead_held_ns, ahead_held);
    XC_ADD(&xc.use->throttled_ns, held);
    if (xc.me)
        XC_ADD(&xc.me->throttled_ns, held);
}

/* Whether this offline process's contexts leave the online kernels of its GPUs room:
 * created with an MPS percentage at most the limits' online_fit_pct (see
 * xcuda_limits). Then an online kernel never waits for this process's blocks to retire,
 * which is what bounding its outstanding work is for: it still holds new launches while
 * online work is in flight (co-resident blocks, memory traffic and power still slow the
 * online kernels), but keeps its launches unmeasured and its queue unbounded. Re-read on
 * the slow path, which every 32nd launch of a thread takes. */
static int fits_now(void)
{
    uint32_t fit = XC_LOAD(&xc.lim->online_fit_pct);
    return xc_mps_pct > 0 && fit > 0 && fit <= 100 && xc_mps_pct <= fit;
}

static int xc_signal_fitted(void)
{
    return atomic_load_explicit(&fitted, memory_order_relaxed);
}

int xc_signal_online_seen(uint64_t now)
{
    uint64_t seen = XC_LOAD(&online_seen);
    return xc_sig.n != 0 && !xc_sig.pub && seen != 0 && now >= seen &&
           now - seen < XCUDA_SHRINK_NS;
}

int xc_signal_online_within(uint64_t window)
{
    if (xc_sig.n == 0 || xc_sig.pub)
        return 0;
    uint64_t now = xc_now_mono_ns(), seen = XC_LOAD(&online_seen);
    if (seen != 0 && now >= seen && now - seen < window)
        return 1;
    for (unsigned i = 0; i < xc_sig.n; i++) {
        uint64_t busy = XC_LOAD(xc_sig.w[i]), idle = XC_LOAD(&slot_at(i)->idle_ns);
        if (busy != 0 || (idle != 0 && idle <= now && now - idle < window))
            return 1;
    }
    return 0;
}

int xc_signal_online_recent(uint64_t now)
{
    return xc_signal_online_seen(now) && !xc_signal_fitted();
}

/* Refreshes `fitted`; a follower with one slot that was bounding goes back to its slot. */
static void follow_fitted(void)
{
    int f = fits_now();
    if (f == atomic_load_explicit(&fitted, memory_order_relaxed))
        return;
    atomic_store_explicit(&fitted, f, memory_order_relaxed);
    xc_log("MPS percentage %u %s the online kernels room: %s", xc_mps_pct,
           f ? "leaves" : "no longer leaves", f ? "launches unbounded" : "bounded again");
    if (f)
        follow_slow(0);
}

void xc_signal_launch(void)
{
    if (xc_sig.n == 0)
        return;
    if (xc_sig.pub) {
        /* Every 32nd launch of a thread comes here anyway: refresh then. */
        if (!all_quiet() || (xc_tls_launches & XC_FLUSH_MASK) == 0)
            publish();
        if (xc_sig.n == 1 && XC_LOAD(&xc_sig.w0) != xc_sig.w[0])
            XC_STORE(&xc_sig.w0, (const uint64_t *)xc_sig.w[0]); /* after a copy */
    } else {
        follow_fitted();
        if (!all_quiet() || XC_LOAD(&ahead_period) != 0 ||
            (!xc_signal_fitted() && linger_until(xc_now_mono_ns(), linger_ns()) != 0))
            hold();
        else if (XC_LOAD(&ahead_prev) != 0)
            XC_STORE(&ahead_prev, 0); /* idle seen: the next busy value is a new request */
        if (XC_LOAD(&xc_sig.w0) == &never_quiet[0] && xc_sig.n == 1 &&
            !xc_signal_online_recent(xc_now_mono_ns())) {
            /* No online work for a while: back to the fast path (a regular pace is
             * forgotten too: the service has paused). */
            XC_STORE(&ahead_period, 0);
            follow_slow(0);
        }
    }
}

void xc_signal_copy(void)
{
    if (xc_sig.n == 0)
        return;
    if (!xc_sig.pub) {
        xc_signal_launch();
        return;
    }
    publish();
    /* The next launch still takes the slow path, as the first after an idle GPU did
     * before the copy set the slot: that is where the online kernels' width is noted
     * (width.c). It points w0 back at the slot (xc_signal_launch). */
    if (xc_sig.n == 1)
        XC_STORE(&xc_sig.w0, &never_quiet[1]);
}

void xc_signal_note_ended(void)
{
    if (xc_sig.n == 0 || xc_sig.pub)
        return;
    uint64_t now = xc_now_mono_ns(), last = 0;
    for (unsigned i = 0; i < xc_sig.n; i++) {
        uint64_t t = XC_LOAD(&slot_at(i)->idle_ns);
        if (t > last && t <= now)
            last = t;
    }
    if (last == 0 || now - last >= XCUDA_SHRINK_NS || last <= XC_LOAD(&online_seen))
        return;
    XC_STORE(&online_seen, last);
    if (!xc_signal_fitted())
        follow_slow(1);
}

void xc_signal_confined(int on)
{
    if (xc_sig.pub)
        return;
    if (xc_sig.n == 0) /* no signal page: w0 is otherwise unset */
        XC_STORE(&xc_sig.w0, on ? &never_quiet[0] : NULL);
    else /* released: still bounded while online work is recent */
        follow_slow(on || xc_signal_online_recent(xc_now_mono_ns()));
}

int xc_signal_bounds_slow(void)
{
    return XC_LOAD(&online_seen) != 0 && xc_signal_online_recent(xc_now_mono_ns());
}
