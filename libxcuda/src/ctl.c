/* ctl.c — start-up: maps the control block (limits read-only, usage
 * read-write), claims this process's slot, exports the MPS client limits
 * before the driver can read them, and keeps the slot right across fork and
 * exit. Everything that reads the environment happens here, once. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "xcuda.h"
#include "xcuda_env.h"

struct xc_state xc;
_Atomic int xc_stopping;
static int debug;
extern const char *xc_libcuda_path;
extern int xc_drain_timeout_s;

void xc_log(const char *fmt, ...)
{
    if (!debug)
        return;
    char buf[512];
    int n = snprintf(buf, sizeof buf, "libxcuda[%d]: ", (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof buf)
        n += vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof buf - 1)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(2, buf, (size_t)n);
    (void)w;
}

uint64_t xc_now_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t xc_now_real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void xc_sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static void *map_file(const char *dir, const char *name, size_t size, int writable)
{
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof path)
        return NULL;
    int fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) {
        xc_log("cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    void *p = NULL;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= size) {
        p = mmap(NULL, size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            xc_log("cannot map %s: %s", path, strerror(errno));
            p = NULL;
        }
    } else {
        xc_log("%s is too short for a control block", path);
    }
    close(fd);
    return p;
}

static int valid_header(const xcuda_header *h, uint64_t magic)
{
    return h->magic == magic && h->version >= 1;
}

static int pid_alive(int pid)
{
    return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH);
}

static void sub_sat(uint64_t *p, uint64_t v)
{
    uint64_t cur = XC_LOAD(p);
    XC_STORE(p, cur > v ? cur - v : 0);
}

/* Memory accounting changes two counters per operation (the container's shared one
 * and this process's own), and no single atomic instruction covers both. A process
 * killed between the two used to leave them disagreeing, and the reclaim of its slot
 * then returned the same bytes twice (the cap was exceeded by what it was freeing).
 * So every change happens under mem_lock, a pid-owned lock in the usage page: a
 * process killed inside leaves the lock held by a dead pid, and whoever takes the
 * lock over recomputes each shared counter as the sum of the per-process counters,
 * which are the truth, before going on. The critical sections are a few stores and
 * never contain a driver call; the launch path never takes the lock. */
static void recount_locked(void)
{
    for (int d = 0; d < XCUDA_MAX_DEVICES; d++) {
        uint64_t sum = 0;
        for (int i = 0; i < XCUDA_MAX_PROCS; i++) {
            uint64_t b = XC_LOAD(&xc.use->procs[i].reserved_bytes[d]);
            sum = sum + b < sum ? UINT64_MAX : sum + b;
        }
        XC_STORE(&xc.use->reserved_bytes[d], sum);
    }
    XC_ADD(&xc.use->mem_recoveries, 1);
    xc_log("memory-accounting lock taken over from a dead process: counters recounted");
}

void xc_mem_lock(void)
{
    uint32_t *lk = &xc.use->mem_lock;
    uint32_t me = (uint32_t)xc.pid;
    for (unsigned spins = 1;; spins++) {
        uint32_t cur = 0;
        if (__atomic_compare_exchange_n(lk, &cur, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return;
        /* Held by another thread of this process, or by a process that may have died
         * inside: check the latter now and then. */
        if (cur != me && spins % 64 == 0 && !pid_alive((int)cur) &&
            __atomic_compare_exchange_n(lk, &cur, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
            recount_locked();
            return;
        }
        if (spins < 128) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        } else {
            xc_sleep_ns(20000);
        }
    }
}

void xc_mem_unlock(void)
{
    __atomic_store_n(&xc.use->mem_lock, 0, __ATOMIC_RELEASE);
}

/* Returns the reservation of one dead slot; lock held. */
static uint64_t reap_slot_locked(xcuda_proc *p, int32_t pid)
{
    if (XC_LOAD(&p->pid) != pid)
        return 0;
    uint64_t freed = 0;
    for (int d = 0; d < XCUDA_MAX_DEVICES; d++) {
        uint64_t b = XC_LOAD(&p->reserved_bytes[d]);
        if (b) {
            sub_sat(&xc.use->reserved_bytes[d], b);
            XC_STORE(&p->reserved_bytes[d], 0);
            freed += b;
        }
    }
    XC_STORE(&p->flags, 0);
    __atomic_store_n(&p->pid, 0, __ATOMIC_RELEASE);
    xc_log("reclaimed slot of dead pid %d (%llu bytes)", pid, (unsigned long long)freed);
    return freed;
}

uint64_t xc_reap_dead_slots(void)
{
    if (xc.use == NULL)
        return 0;
    uint64_t freed = 0;
    for (int i = 0; i < XCUDA_MAX_PROCS; i++) {
        xcuda_proc *p = &xc.use->procs[i];
        int32_t pid = XC_LOAD(&p->pid);
        /* Negative: a slot an older libxcuda was reclaiming when it died. */
        if (pid == 0 || pid == xc.pid || (pid > 0 && pid_alive(pid)))
            continue;
        xc_mem_lock();
        freed += reap_slot_locked(p, pid);
        xc_mem_unlock();
    }
    return freed;
}

void xc_claim_slot(void)
{
    xc.me = NULL;
    if (xc.use == NULL)
        return;
    for (int attempt = 0; attempt < 2 && xc.me == NULL; attempt++) {
        for (int i = 0; i < XCUDA_MAX_PROCS; i++) {
            xcuda_proc *p = &xc.use->procs[i];
            int32_t zero = 0;
            if (XC_LOAD(&p->pid) == 0 &&
                __atomic_compare_exchange_n(&p->pid, &zero, xc.pid, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED)) {
                for (int d = 0; d < XCUDA_MAX_DEVICES; d++)
                    XC_STORE(&p->reserved_bytes[d], 0);
                XC_STORE(&p->launches, 0);
                XC_STORE(&p->throttled_ns, 0);
                XC_STORE(&p->flags, 0);
                XC_STORE(&p->heartbeat_ns, xc_now_real_ns());
                xc.me = p;
                break;
            }
        }
        if (xc.me == NULL)
            xc_reap_dead_slots();
    }
    if (xc.me == NULL) {
        xc_log("no free process slot in the control block");
        if (xc.lim != NULL && XC_LOAD(&xc.lim->fail_policy) == XCUDA_FAIL_CLOSED)
            xc.fail_closed = 1;
    }
}

/* Returns this process's reservations to the shared counters. */
void xc_release_slot(void)
{
    xcuda_proc *p = xc.me;
    if (p == NULL || xc.use == NULL)
        return;
    xc_flush_launches();
    xc_mem_lock();
    for (int d = 0; d < XCUDA_MAX_DEVICES; d++) {
        uint64_t b = XC_LOAD(&p->reserved_bytes[d]);
        if (b) {
            sub_sat(&xc.use->reserved_bytes[d], b);
            XC_STORE(&p->reserved_bytes[d], 0);
        }
    }
    xc_mem_unlock();
    XC_STORE(&p->flags, 0);
    __atomic_store_n(&p->pid, 0, __ATOMIC_RELEASE);
    xc.me = NULL;
    /* Children that ended with _exit (fork workers do) left their slots;
     * a process that exits cleanly tidies up after them. */
    xc_reap_dead_slots();
}

uint32_t xc_mps_pct;

/* The MPS client reads these at context creation; they can only tighten
 * what the server allows, so they are an out-of-process backstop. */
static void export_mps_env(void)
{
    /* muxd's wiring mounts the node's MPS pipe directory here and sets the
     * variable in the container's spec; processes started another way
     * (kubectl exec) inherit no spec environment but still load libxcuda
     * through /etc/ld.so.preload. */
    static const char mps_dir[] = XCUDA_MPS_DIR;
    struct stat st;
    if (getenv(XCUDA_ENV_MPS_PIPE) == NULL && stat(mps_dir, &st) == 0 && S_ISDIR(st.st_mode))
        setenv(XCUDA_ENV_MPS_PIPE, mps_dir, 0);
    const xcuda_limits *l = xc.lim;
    /* Offline work yields the SMs that free up to pending online blocks. The
     * container may not raise it: set over whatever the spec or the process
     * said. */
    if (XC_LOAD(&l->signal_role) == XCUDA_SIGNAL_FOLLOW)
        setenv(XCUDA_ENV_MPS_CLIENT_PRIORITY, XCUDA_MPS_PRIORITY_BELOW_NORMAL, 1);
    uint32_t pct = XC_LOAD(&l->mps_active_thread_pct);
    const char *cur = getenv(XCUDA_ENV_MPS_THREAD_PERCENTAGE);
    long have = cur ? strtol(cur, NULL, 10) : 0;
    if (have > 0 && have <= 100)
        xc_mps_pct = (uint32_t)have;
    if (pct > 0 && pct <= 100 && (have <= 0 || have > (long)pct)) {
        char v[16];
        snprintf(v, sizeof v, "%u", pct);
        setenv(XCUDA_ENV_MPS_THREAD_PERCENTAGE, v, 1);
        xc_mps_pct = pct;
    }
    char buf[XCUDA_MAX_DEVICES * 32];
    size_t n = 0;
    for (int d = 0; d < XCUDA_MAX_DEVICES; d++) {
        uint64_t b = XC_LOAD(&l->mps_pinned_limit[d]);
        if (b == 0)
            continue;
        uint64_t mib = b >> 20;
        if (mib == 0)
            mib = 1;
        int w = snprintf(buf + n, sizeof buf - n, "%s%d=%lluM", n ? "," : "", d,
                         (unsigned long long)mib);
        if (w < 0 || (size_t)w >= sizeof buf - n)
            break;
        n += (size_t)w;
    }
    if (n > 0)
        setenv(XCUDA_ENV_MPS_PINNED_MEM, buf, 1);
}

/* Slots are claimed on first CUDA use, not at load: every process of the
 * container loads libxcuda (shells, data-loader workers), and only those
 * that touch the GPU should take one of the XCUDA_MAX_PROCS slots. */
static pthread_mutex_t slot_mu = PTHREAD_MUTEX_INITIALIZER;
static int slot_tried;

void xc_ensure_slot(void)
{
    if (xc.use == NULL || __atomic_load_n(&slot_tried, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&slot_mu);
    if (!slot_tried) {
        xc_claim_slot();
        __atomic_store_n(&slot_tried, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&slot_mu);
}

static void atfork_child(void)
{
    /* The parent's slot stays the parent's; the child claims its own if
     * it uses CUDA itself. */
    xc.pid = (int)getpid();
    xc.me = NULL;
    slot_tried = 0;
    pthread_mutex_init(&slot_mu, NULL);
    atomic_store(&xc_stopping, 0);
    xc_mem_atfork_child();
    xc_gate_atfork_child();
    xc_graph_atfork_child();
    xc_confine_atfork_child();
}

__attribute__((constructor)) static void xc_init(void)
{
    const char *v = getenv("XCUDA_DEBUG");
    debug = v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
    v = getenv(XCUDA_ENV_DRAIN_TIMEOUT);
    if (v != NULL) {
        long t = strtol(v, NULL, 10);
        if (t >= 1 && t <= XCUDA_DRAIN_TIMEOUT_MAX)
            xc_drain_timeout_s = (int)t;
    }
    v = getenv("XCUDA_REAL_LIBCUDA");
    if (v != NULL && v[0] != '\0')
        xc_libcuda_path = v;
    xc.pid = (int)getpid();
    const char *dir = getenv(XCUDA_ENV_CONTROL_BLOCK);
    if (dir == NULL || dir[0] == '\0')
        dir = XCUDA_DEFAULT_DIR;
    const char *pol = getenv(XCUDA_ENV_FAIL_POLICY);
    int closed_if_missing = pol != NULL && strcmp(pol, XCUDA_FAIL_POLICY_CLOSED) == 0;

    const xcuda_limits *lim = map_file(dir, XCUDA_LIMITS_FILE, sizeof(xcuda_limits), 0);
    xcuda_usage *use = map_file(dir, XCUDA_USAGE_FILE, sizeof(xcuda_usage), 1);
    if (lim == NULL || use == NULL || !valid_header(&lim->hdr, XCUDA_LIMITS_MAGIC) ||
        !valid_header(&use->hdr, XCUDA_USAGE_MAGIC)) {
        if (lim)
            munmap((void *)lim, sizeof(xcuda_limits));
        if (use)
            munmap(use, sizeof(xcuda_usage));
        xc.fail_closed = closed_if_missing;
        xc_log("no usable control block in %s: %s", dir,
               closed_if_missing ? "failing closed" : "passing through");
        return;
    }
    /* Constructors run before any thread of the program exists. */
    xc.use = use;
    xc.lim = lim;
    export_mps_env();
    v = getenv(XCUDA_ENV_SIGNAL);
    xc_signal_init(v != NULL && v[0] != '\0' ? v : XCUDA_DEFAULT_SIGNAL);
    pthread_atfork(NULL, NULL, atfork_child);
    xc_log("control block %s: share %u bp, paused %u, mem[0] %llu", dir,
           XC_LOAD(&lim->share_bp), XC_LOAD(&lim->paused),
           (unsigned long long)XC_LOAD(&lim->mem_limit[0]));
}

__attribute__((destructor)) static void xc_fini(void)
{
    xc_sticky_check_at_exit();
    xc_signal_idle();
    xc_release_slot();
}
