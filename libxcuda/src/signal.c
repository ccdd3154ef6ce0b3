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
 * waits in short sleeps while some slot says online launched within the
 * hold window, bounded by a budget: at most hold_max_bp of every hold period
 * is spent holding, whatever the page says, so offline always progresses.
 * The page is writable by every online container, so every value read from
 * it is untrusted: a timestamp in the future or the far past is stale, a
 * page that says "busy" forever costs offline its budget and no more. The
 * policy comes from the container's own limits page (read-only to it). */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "xcuda.h"

struct xc_sig xc_sig;

/* Process-wide hold budget: start of the current hold period and the time
 * held in it (all threads; two threads holding together use it up twice as
 * fast, which only errs towards offline progress). */
static uint64_t hold_period_start, hold_used;
/* When this process last saw online work published (CLOCK_MONOTONIC ns). */
static uint64_t online_seen;

#define HOLD_POLL_NS 50000ull /* re-check the signal every 50 us while holding */

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
    static const uint64_t never_quiet[2] = {1, 0}; /* follow: 1 (busy), publish: 0 (unset) */
    xc_sig.pub = (uint64_t)pub;
    xc_sig.page = s;
    xc_sig.n = n;
    /* Last: the fast path looks at w0 first. */
    xc_sig.w0 = n == 1 ? xc_sig.w[0] : &never_quiet[pub];
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

/* Every slot quiet (see xc_signal_quiet). */
static int all_quiet(void)
{
    for (unsigned i = 0; i < xc_sig.n; i++)
        if ((uint64_t)(XC_LOAD(xc_sig.w[i]) != 0) != xc_sig.pub)
            return 0;
    return 1;
}

static int any_busy(uint64_t now, uint64_t window)
{
    for (unsigned i = 0; i < xc_sig.n; i++)
        if (slot_busy(XC_LOAD(xc_sig.w[i]), now, window))
            return 1;
    return 0;
}

static void publish(void)
{
    uint64_t now = xc_now_mono_ns();
    for (unsigned i = 0; i < xc_sig.n; i++) {
        uint64_t v = XC_LOAD(xc_sig.w[i]);
        if (v == 0 || v > now || now - v >= XCUDA_SIGNAL_REFRESH_NS)
            XC_STORE(xc_sig.w[i], now);
    }
}

void xc_signal_idle(void)
{
    if (!xc_sig.pub)
        return;
    for (unsigned i = 0; i < xc_sig.n; i++)
        if (XC_LOAD(xc_sig.w[i]) != 0)
            XC_STORE(xc_sig.w[i], 0);
}

static uint64_t clamp_u64(uint64_t v, uint64_t def, uint64_t lo, uint64_t hi)
{
    if (v == 0)
        v = def;
    return v < lo ? lo : v > hi ? hi : v;
}

static void hold(void)
{
    const xcuda_limits *l = xc.lim;
    uint64_t window = clamp_u64(XC_LOAD(&l->hold_window_ns), XCUDA_DEFAULT_HOLD_WINDOW_NS, 1000,
                                XCUDA_HOLD_WINDOW_MAX_NS);
    uint64_t now = xc_now_mono_ns();
    if (!any_busy(now, window))
        return;
    XC_STORE(&online_seen, now);
    uint64_t period = clamp_u64(XC_LOAD(&l->hold_period_ns), XCUDA_DEFAULT_HOLD_PERIOD_NS,
                                XCUDA_HOLD_PERIOD_MIN_NS, XCUDA_HOLD_PERIOD_MAX_NS);
    uint64_t bp = clamp_u64(XC_LOAD(&l->hold_max_bp), XCUDA_DEFAULT_HOLD_MAX_BP, 0,
                            XCUDA_HOLD_MAX_BP_CAP);
    uint64_t budget = period / XCUDA_SHARE_FULL * bp;
    uint64_t t0 = now;
    for (;;) {
        uint64_t start = XC_LOAD(&hold_period_start);
        if (start == 0 || start > now || now - start >= period) {
            XC_STORE(&hold_period_start, now);
            XC_STORE(&hold_used, 0);
        }
        uint64_t used = XC_LOAD(&hold_used);
        if (used >= budget || !any_busy(now, window) ||
            atomic_load_explicit(&xc_stopping, memory_order_relaxed))
            break;
        uint64_t w = budget - used < HOLD_POLL_NS ? budget - used : HOLD_POLL_NS;
        xc_sleep_ns(w);
        uint64_t t = xc_now_mono_ns();
        XC_ADD(&hold_used, t > now ? t - now : 0);
        now = t;
    }
    uint64_t held = now > t0 ? now - t0 : 0;
    if (held == 0 || xc.use == NULL)
        return;
    XC_ADD(&xc.use->online_held_ns, held);
    XC_ADD(&xc.use->throttled_ns, held);
    if (xc.me)
        XC_ADD(&xc.me->throttled_ns, held);
}

int xc_signal_online_recent(uint64_t now)
{
    uint64_t seen = XC_LOAD(&online_seen);
    return xc_sig.n != 0 && !xc_sig.pub && seen != 0 && now >= seen &&
           now - seen < XCUDA_SHRINK_NS;
}

void xc_signal_launch(void)
{
    if (xc_sig.n == 0)
        return;
    if (xc_sig.pub) {
        /* Every 32nd launch of a thread comes here anyway: refresh then. */
        if (!all_quiet() || (xc_tls_launches & XC_FLUSH_MASK) == 0)
            publish();
    } else if (!all_quiet()) {
        hold();
    }
}
