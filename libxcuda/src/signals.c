/* signals.c — the workload side of mixed error handling. An offline
 * process killed by SIGINT/SIGTERM mid-kernel faults every client of its MPS
 * server, so libxcuda catches those signals, stops new launches, drains what
 * is in flight, releases its contexts, and only then honours the signal: the
 * application's own handler if it installed one, else the default action.
 *
 * The handler only does async-signal-safe work (atomic stores, sem_post);
 * a helper thread that blocks all signals does the draining. Handlers the
 * application installs later (sigaction/signal) are recorded, not installed,
 * so libxcuda stays first in line. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "xcuda.h"

#define NSIGS 2
static const int sigs[NSIGS] = {SIGINT, SIGTERM};

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
typedef void (*sighandler_fn)(int);

static struct sigaction app_act[NSIGS];
static _Atomic int installed;
static sem_t drain_sem;
static volatile sig_atomic_t pending_sig;
static siginfo_t pending_info;
static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static CUcontext ctxs[64];

static sigaction_fn real_sigaction(void)
{
    static sigaction_fn f;
    if (f == NULL)
        f = (sigaction_fn)xc_real_dlsym(RTLD_NEXT, "sigaction");
    return f;
}

static int sig_index(int sig)
{
    for (int i = 0; i < NSIGS; i++)
        if (sigs[i] == sig)
            return i;
    return -1;
}

void xc_track_context(CUcontext ctx, int add)
{
    if (ctx == NULL)
        return;
    pthread_mutex_lock(&ctx_mu);
    for (size_t i = 0; i < sizeof ctxs / sizeof ctxs[0]; i++) {
        if (add && ctxs[i] == NULL) {
            ctxs[i] = ctx;
            break;
        }
        if (!add && ctxs[i] == ctx) {
            ctxs[i] = NULL;
            break;
        }
    }
    pthread_mutex_unlock(&ctx_mu);
}

static void on_signal(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    int saved = errno;
    int expected = 0;
    if (atomic_compare_exchange_strong(&xc_stopping, &expected, 1)) {
        pending_sig = sig;
        if (si != NULL)
            pending_info = *si;
        else
            memset(&pending_info, 0, sizeof pending_info);
        if (xc.me)
            __atomic_fetch_or(&xc.me->flags, XCUDA_PROC_DRAINING, __ATOMIC_RELAXED);
        sem_post(&drain_sem);
    }
    /* A second signal while draining is absorbed: the drain honours the first. */
    errno = saved;
}

static void sync_context(CUcontext ctx)
{
    if (xc_real.cuCtxPushCurrent == NULL || xc_real.cuCtxPopCurrent == NULL ||
        xc_real.cuCtxSynchronize == NULL || xc_real.cuCtxPushCurrent(ctx) != CUDA_SUCCESS)
        return;
    xc_real.cuCtxSynchronize();
    CUcontext dummy;
    xc_real.cuCtxPopCurrent(&dummy);
}

static int primary_ok(void)
{
    return xc_real.cuDeviceGetCount && xc_real.cuDeviceGet && xc_real.cuDevicePrimaryCtxGetState &&
           xc_real.cuDevicePrimaryCtxRetain && xc_real.cuDevicePrimaryCtxRelease &&
           xc_real.cuDevicePrimaryCtxReset;
}

/* Calls fn for each device whose primary context is active. */
static void each_active_device(void (*fn)(CUdevice))
{
    int n = 0;
    if (!primary_ok() || xc_real.cuDeviceGetCount(&n) != CUDA_SUCCESS)
        return;
    for (int d = 0; d < n; d++) {
        CUdevice dev;
        unsigned flags = 0;
        int active = 0;
        if (xc_real.cuDeviceGet(&dev, d) == CUDA_SUCCESS &&
            xc_real.cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && active)
            fn(dev);
    }
}

static void sync_primary(CUdevice dev)
{
    CUcontext pctx;
    if (xc_real.cuDevicePrimaryCtxRetain(&pctx, dev) != CUDA_SUCCESS)
        return;
    sync_context(pctx);
    xc_real.cuDevicePrimaryCtxRelease(dev);
}

static void reset_primary(CUdevice dev)
{
    xc_real.cuDevicePrimaryCtxReset(dev);
}

/* Waits for all GPU work of this process. */
static void drain(void)
{
    /* A launch that passed the gate just before the signal is still inside
     * the driver; give it time to be queued so the sync below covers it. */
    xc_sleep_ns(2000000);
    xc_gate_drain();
    pthread_mutex_lock(&ctx_mu);
    for (size_t i = 0; i < sizeof ctxs / sizeof ctxs[0]; i++)
        if (ctxs[i] != NULL)
            sync_context(ctxs[i]);
    pthread_mutex_unlock(&ctx_mu);
    each_active_device(sync_primary);
}

/* Frees the (now idle) contexts so the MPS server sees a clean exit. Done
 * right before the signal is re-raised: the application's other threads may
 * see errors from here on, and the signal must reach them first. */
static void release_contexts(void)
{
    pthread_mutex_lock(&ctx_mu);
    for (size_t i = 0; i < sizeof ctxs / sizeof ctxs[0]; i++) {
        if (ctxs[i] != NULL && xc_real.cuCtxDestroy != NULL)
            xc_real.cuCtxDestroy(ctxs[i]);
        ctxs[i] = NULL;
    }
    pthread_mutex_unlock(&ctx_mu);
    each_active_device(reset_primary);
}

void xc_release_slot(void);

/* A drain that cannot finish (a hung GPU, a driver stuck in a lock) must
 * not keep a process that was told to die alive: after xc_drain_timeout_s
 * (env XCUDA_DRAIN_TIMEOUT, default 10 s) the default action is taken anyway. */
int xc_drain_timeout_s = 10;
static sem_t watch_start, watch_done;

static void die_by(int sig)
{
    struct sigaction d;
    memset(&d, 0, sizeof d);
    d.sa_handler = SIG_DFL;
    sigemptyset(&d.sa_mask);
    real_sigaction()(sig, &d, NULL);
    kill(getpid(), sig);
}

static void *watch_main(void *arg)
{
    (void)arg;
    for (;;) {
        if (sem_wait(&watch_start) != 0)
            continue;
        int sig = pending_sig;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += xc_drain_timeout_s;
        while (sem_timedwait(&watch_done, &until) != 0) {
            if (errno == ETIMEDOUT) {
                int i = sig_index(sig);
                if (i >= 0 && !(app_act[i].sa_flags & SA_SIGINFO) &&
                    app_act[i].sa_handler == SIG_DFL) {
                    xc_log("signal %d: drain did not finish in %d s; exiting anyway", sig,
                           xc_drain_timeout_s);
                    die_by(sig);
                }
                break;
            }
        }
    }
    return NULL;
}

static void *drain_main(void *arg)
{
    (void)arg;
    for (;;) {
        if (sem_wait(&drain_sem) != 0)
            continue;
        int sig = pending_sig;
        int i = sig_index(sig);
        if (i < 0)
            continue;
        struct sigaction act = app_act[i];
        int dfl = !(act.sa_flags & SA_SIGINFO) && act.sa_handler == SIG_DFL;
        xc_log("signal %d: draining GPU work before %s", sig,
               dfl ? "the default action" : "the application's handler");
        sem_post(&watch_start);
        drain();
        sem_post(&watch_done);
        if (dfl) {
            xc_release_slot();
            struct sigaction d;
            memset(&d, 0, sizeof d);
            d.sa_handler = SIG_DFL;
            sigemptyset(&d.sa_mask);
            real_sigaction()(sig, &d, NULL);
            release_contexts();
            kill(getpid(), sig);
            /* Delivered to a thread that does not block it; wait for it. */
            for (;;)
                pause();
        }
        if (xc.me)
            __atomic_fetch_and(&xc.me->flags, ~XCUDA_PROC_DRAINING, __ATOMIC_RELAXED);
        atomic_store(&xc_stopping, 0);
        if (act.sa_flags & SA_SIGINFO) {
            if (act.sa_sigaction != NULL)
                act.sa_sigaction(sig, &pending_info, NULL);
        } else if (act.sa_handler != SIG_IGN) {
            act.sa_handler(sig);
        }
    }
    return NULL;
}

static void atfork_child(void)
{
    /* The drain thread does not exist in the child (nor does its CUDA
     * state): give the signals back to the application. */
    pthread_mutex_init(&ctx_mu, NULL);
    memset(ctxs, 0, sizeof ctxs);
    if (!atomic_load(&installed))
        return;
    atomic_store(&installed, 0);
    for (int i = 0; i < NSIGS; i++)
        real_sigaction()(sigs[i], &app_act[i], NULL);
}

static pthread_once_t install_once = PTHREAD_ONCE_INIT;

static void install(void)
{
    if (real_sigaction() == NULL || sem_init(&drain_sem, 0, 0) != 0 ||
        sem_init(&watch_start, 0, 0) != 0 || sem_init(&watch_done, 0, 0) != 0)
        return;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t th, wd;
    int rc = pthread_create(&th, NULL, drain_main, NULL);
    if (rc == 0) {
        pthread_detach(th);
        rc = pthread_create(&wd, NULL, watch_main, NULL);
        if (rc == 0)
            pthread_detach(wd);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        /* Without the helpers the handlers stay uninstalled: default
         * behaviour rather than a drain that never starts. */
        xc_log("cannot start the drain threads: %s", strerror(rc));
        return;
    }
    for (int i = 0; i < NSIGS; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_signal;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        for (int j = 0; j < NSIGS; j++)
            sigaddset(&sa.sa_mask, sigs[j]);
        real_sigaction()(sigs[i], &sa, &app_act[i]);
    }
    pthread_atfork(NULL, NULL, atfork_child);
    atomic_store(&installed, 1);
}

void xc_signals_install(void)
{
    pthread_once(&install_once, install);
}

/* ---- the application's view of SIGINT/SIGTERM ---- */

XC_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    int i = sig_index(sig);
    if (i < 0 || !atomic_load(&installed)) {
        sigaction_fn real = real_sigaction();
        if (real == NULL) {
            errno = ENOSYS;
            return -1;
        }
        return real(sig, act, old);
    }
    if (old != NULL)
        *old = app_act[i];
    if (act != NULL)
        app_act[i] = *act;
    return 0;
}

XC_EXPORT sighandler_fn signal(int sig, sighandler_fn handler)
{
    int i = sig_index(sig);
    if (i < 0 || !atomic_load(&installed)) {
        struct sigaction sa, old;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = handler;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(sig, &sa, &old) != 0)
            return SIG_ERR;
        return (old.sa_flags & SA_SIGINFO) ? (sighandler_fn)(void (*)(void))old.sa_sigaction : old.sa_handler;
    }
    sighandler_fn prev = (app_act[i].sa_flags & SA_SIGINFO)
                             ? (sighandler_fn)(void (*)(void))app_act[i].sa_sigaction
                             : app_act[i].sa_handler;
    memset(&app_act[i], 0, sizeof app_act[i]);
    app_act[i].sa_handler = handler;
    app_act[i].sa_flags = SA_RESTART;
    sigemptyset(&app_act[i].sa_mask);
    return prev;
}
