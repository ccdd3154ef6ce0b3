/* xctest.c — a CUDA driver API client that exercises libxcuda for the Go
 * tests (libxcuda/xcudatest). It reaches the driver one of three ways:
 *   link   through the exported symbols (the program links libcuda);
 *   dlsym  through dlopen("libcuda.so.1") + dlsym;
 *   gpa    through cuGetProcAddress_v2 obtained with dlsym.
 * Commands (all print key=value lines):
 *   entry <way> <cap_bytes>      over-cap alloc must fail, small alloc and
 *                                unhooked calls must work, memory view
 *   hold <way> <chunk> [max]     allocate chunks until OOM, wait for stdin
 *                                EOF, free them
 *   churn <way> <chunk> <n>      allocate n chunks, print "ready", then free
 *                                and allocate them again forever (to be killed
 *                                in the middle of a free)
 *   requests <way> <kernel_us> <gap_us> <secs>
 *                                an online service: launch, synchronise,
 *                                idle gap_us; print the requests and the
 *                                time they were busy
 *   loop <way> <kernel_us> <secs> <graph|kernel>
 *                                launch back to back, print progress (with
 *                                the process's voluntary context switches)
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*info_fn)(size_t *, size_t *);
typedef CUresult (*name_fn)(char *, int, CUdevice);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);
typedef CUresult (*graph_fn)(CUgraphExec, CUstream);
typedef CUresult (*coop_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, unsigned, CUstream, void **);
typedef CUresult (*sync_fn)(void);
typedef CUresult (*retain_fn)(CUcontext *, CUdevice);
typedef CUresult (*setcur_fn)(CUcontext);
typedef CUresult (*ver_fn)(int *);
typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t,
                           CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa1_fn)(const char *, void **, int, cuuint64_t);
typedef void *(*dlsym_fn)(void *, const char *);

/* dlsym as binaries linked against glibc < 2.34 reference it. */
#if defined(__x86_64__)
__asm__(".symver dlsym_old, dlsym@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver dlsym_old, dlsym@GLIBC_2.17");
#endif
extern void *dlsym_old(void *, const char *);

static struct {
    init_fn init;
    alloc_fn alloc;
    free_fn free;
    info_fn info;
    name_fn name;
    launch_fn launch, launch_ptsz;
    graph_fn graph;
    coop_fn coop;
    sync_fn sync;
    ver_fn version;
    retain_fn retain;
    setcur_fn setcur;
    void *export_table;
} api;

static gpa_fn gpa;
static gpa1_fn gpa1;
static void *drv; /* the driver's handle, for the stub's test hooks */

static void *by_gpa(const char *name, cuuint64_t flags)
{
    void *p = NULL;
    CUdriverProcAddressQueryResult st;
    if (gpa1 != NULL)
        return gpa1(name, &p, 11080, flags) == CUDA_SUCCESS ? p : NULL;
    if (gpa(name, &p, 12000, flags, &st) != CUDA_SUCCESS)
        return NULL;
    return p;
}

/* Where a function pointer lives: "libxcuda", "driver" or "none". */
static const char *owner(void *p)
{
    Dl_info info;
    if (p == NULL)
        return "none";
    if (dladdr(p, &info) == 0 || info.dli_fname == NULL)
        return "unknown";
    const char *base = strrchr(info.dli_fname, '/');
    base = base ? base + 1 : info.dli_fname;
    return strncmp(base, "libxcuda", 8) == 0 ? "libxcuda" : "driver";
}

static int setup(const char *way)
{
    if (strcmp(way, "link") == 0) {
#ifdef XCTEST_LINKED
        api.init = cuInit;
        api.alloc = cuMemAlloc;
        api.free = cuMemFree;
        api.info = cuMemGetInfo;
        api.name = cuDeviceGetName;
        api.launch = cuLaunchKernel;
        api.graph = cuGraphLaunch;
        api.sync = cuCtxSynchronize;
        api.version = cuDriverGetVersion;
        api.retain = cuDevicePrimaryCtxRetain;
        api.setcur = cuCtxSetCurrent;
        drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        return 0;
#else
        fprintf(stderr, "xctest: built without linking libcuda\n");
        return -1;
#endif
    }
    void *h = drv = dlopen("libcuda.so.1", RTLD_NOW);
    if (h == NULL) {
        fprintf(stderr, "xctest: dlopen libcuda.so.1: %s\n", dlerror());
        return -1;
    }
    dlsym_fn ds = dlsym;
    if (strcmp(way, "dlsym-old") == 0) {
        ds = dlsym_old;
        way = "dlsym";
    }
    if (strcmp(way, "dlsym") == 0) {
        api.init = (init_fn)ds(h, "cuInit");
        api.alloc = (alloc_fn)ds(h, "cuMemAlloc_v2");
        api.free = (free_fn)ds(h, "cuMemFree_v2");
        api.info = (info_fn)ds(h, "cuMemGetInfo_v2");
        api.name = (name_fn)ds(h, "cuDeviceGetName");
        api.launch = (launch_fn)ds(h, "cuLaunchKernel");
        api.launch_ptsz = (launch_fn)ds(h, "cuLaunchKernel_ptsz");
        api.graph = (graph_fn)ds(h, "cuGraphLaunch");
        api.coop = (coop_fn)ds(h, "cuLaunchCooperativeKernel");
        api.sync = (sync_fn)ds(h, "cuCtxSynchronize");
        api.version = (ver_fn)ds(h, "cuDriverGetVersion");
        api.retain = (retain_fn)ds(h, "cuDevicePrimaryCtxRetain");
        api.setcur = (setcur_fn)ds(h, "cuCtxSetCurrent");
        api.export_table = ds(h, "cuGetExportTable");
        return 0;
    }
    if (strcmp(way, "gpa") == 0 || strcmp(way, "gpa1") == 0) {
        if (strcmp(way, "gpa1") == 0) {
            /* A CUDA 11.x runtime: the 4-argument ABI. */
            gpa1 = (gpa1_fn)dlsym(h, "cuGetProcAddress");
            if (gpa1 == NULL)
                return -1;
            gpa1 = (gpa1_fn)by_gpa("cuGetProcAddress", 0);
            printf("gpa_owner=%s\n", owner((void *)gpa1));
            if (gpa1 == NULL)
                return -1;
        } else {
            gpa = (gpa_fn)dlsym(h, "cuGetProcAddress_v2");
            if (gpa == NULL)
                return -1;
            /* As the CUDA runtime does: cuGetProcAddress for everything,
             * even for cuGetProcAddress itself. */
            gpa = (gpa_fn)by_gpa("cuGetProcAddress", 0);
            printf("gpa_owner=%s\n", owner((void *)gpa));
            if (gpa == NULL)
                return -1;
        }
        api.init = (init_fn)by_gpa("cuInit", 0);
        api.alloc = (alloc_fn)by_gpa("cuMemAlloc", 0);
        api.free = (free_fn)by_gpa("cuMemFree", 0);
        api.info = (info_fn)by_gpa("cuMemGetInfo", 0);
        api.name = (name_fn)by_gpa("cuDeviceGetName", 0);
        api.launch = (launch_fn)by_gpa("cuLaunchKernel", 0);
        api.launch_ptsz =
            (launch_fn)by_gpa("cuLaunchKernel", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
        api.graph = (graph_fn)by_gpa("cuGraphLaunch", 0);
        api.sync = (sync_fn)by_gpa("cuCtxSynchronize", 0);
        api.version = (ver_fn)by_gpa("cuDriverGetVersion", 0);
        api.retain = (retain_fn)by_gpa("cuDevicePrimaryCtxRetain", 0);
        api.setcur = (setcur_fn)by_gpa("cuCtxSetCurrent", 0);
        api.export_table = by_gpa("cuGetExportTable", 0);
        return 0;
    }
    fprintf(stderr, "xctest: unknown way %s\n", way);
    return -1;
}

/* cuInit, then device 0's primary context made current: a real driver
 * refuses allocations and launches without a current context. */
static CUresult init_ctx(void)
{
    CUresult r = api.init(0);
    if (r != CUDA_SUCCESS || api.retain == NULL || api.setcur == NULL)
        return r;
    CUcontext ctx;
    if ((r = api.retain(&ctx, 0)) != CUDA_SUCCESS)
        return r;
    return api.setcur(ctx);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmd_entry(size_t cap)
{
    printf("alloc_owner=%s\nlaunch_owner=%s\nname_owner=%s\n", owner((void *)api.alloc),
           owner((void *)api.launch), owner((void *)api.name));
    if (api.launch_ptsz)
        printf("launch_ptsz_owner=%s\n", owner((void *)api.launch_ptsz));
    if (api.export_table)
        printf("export_table_owner=%s\n", owner(api.export_table));
    CUresult r = init_ctx();
    printf("init=%d\n", r);
    CUdeviceptr big = 0, small = 0;
    printf("alloc_over_cap=%d\n", api.alloc(&big, cap + 1));
    printf("alloc_small=%d\n", api.alloc(&small, 4096));
    size_t fr = 0, tot = 0;
    r = api.info(&fr, &tot);
    printf("meminfo=%d\nmem_total=%zu\nmem_free=%zu\n", r, tot, fr);
    char name[64] = "";
    r = api.name(name, sizeof name, 0);
    printf("name_rc=%d\nname=%s\n", r, name);
    int v = 0;
    r = api.version(&v);
    printf("version_rc=%d\nversion=%d\n", r, v);
    printf("free_small=%d\n", api.free(small));
    /* An address libxcuda never handed out goes to the driver as is. */
    printf("free_unknown=%d\n", api.free((CUdeviceptr)0x1234000));
    return 0;
}

static int cmd_hold(size_t chunk, long max)
{
    if (init_ctx() != CUDA_SUCCESS)
        return 1;
    /* Start line: every process is initialised before any allocates, so
     * the allocations really race. */
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (fgets(line, sizeof line, stdin) == NULL)
        return 1;
    static CUdeviceptr ptrs[1 << 16];
    long n = 0;
    CUresult r = CUDA_SUCCESS;
    while (n < (long)(sizeof ptrs / sizeof ptrs[0]) && (max <= 0 || n < max)) {
        r = api.alloc(&ptrs[n], chunk);
        if (r != CUDA_SUCCESS)
            break;
        n++;
    }
    printf("held=%ld\nlast=%d\n", n, r);
    fflush(stdout);
    char buf[64];
    while (fread(buf, 1, sizeof buf, stdin) > 0) {
    }
    long bad = 0;
    for (long i = 0; i < n; i++)
        if (api.free(ptrs[i]) != CUDA_SUCCESS)
            bad++;
    printf("freed=%ld\nfree_errors=%ld\n", n, bad);
    return 0;
}

static int cmd_churn(size_t chunk, long n)
{
    if (init_ctx() != CUDA_SUCCESS || n <= 0 || n > 1024)
        return 1;
    static CUdeviceptr ptrs[1024];
    for (long i = 0; i < n; i++)
        if (api.alloc(&ptrs[i], chunk) != CUDA_SUCCESS)
            return 1;
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        for (long i = 0; i < n; i++)
            api.free(ptrs[i]);
        for (long i = 0; i < n; i++)
            if (api.alloc(&ptrs[i], chunk) != CUDA_SUCCESS)
                return 1;
    }
}

static int cmd_loop(unsigned kernel_us, double secs, int graph)
{
    if (graph == 2 && api.coop == NULL)
        return 1;
    if (init_ctx() != CUDA_SUCCESS)
        return 1;
    /* The stub driver reports the kernel time it queued (a GPU-time meter). */
    uint64_t (*busy)(void) = (uint64_t (*)(void))(drv ? dlsym(drv, "stub_busy_ns") : NULL);
    /* ... and the most work a launch found queued (what an online kernel could meet). */
    uint64_t (*maxq)(void) = (uint64_t (*)(void))(drv ? dlsym(drv, "stub_take_max_queued_ns") : NULL);
    /* ... and the events recorded (the launch gate's measuring cost, in driver calls). */
    uint64_t (*records)(void) = (uint64_t (*)(void))(drv ? dlsym(drv, "stub_records") : NULL);
    double t0 = now_s(), next = t0 + 0.05;
    long n = 0, errors = 0;
    while (now_s() - t0 < secs) {
        CUresult r =
            graph == 2 ? api.coop((CUfunction)1, kernel_us, 1, 1, 1, 1, 1, 0, NULL, NULL)
            : graph    ? api.graph((CUgraphExec)(uintptr_t)kernel_us, NULL)
                       : api.launch((CUfunction)1, kernel_us, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        if (r != CUDA_SUCCESS)
            errors++;
        n++;
        double t = now_s();
        if (t >= next) {
            struct rusage ru;
            getrusage(RUSAGE_SELF, &ru);
            printf("t=%.3f launches=%ld errors=%ld busy_ns=%llu mono=%.6f maxq_ns=%llu nvcsw=%ld "
                   "records=%llu\n",
                   t - t0, n, errors, busy ? (unsigned long long)busy() : 0ull, t,
                   maxq ? (unsigned long long)maxq() : 0ull, ru.ru_nvcsw,
                   records ? (unsigned long long)records() : 0ull);
            fflush(stdout);
            next += 0.05;
        }
    }
    api.sync();
    printf("done launches=%ld errors=%ld\n", n, errors);
    return errors != 0;
}

static int cmd_requests(unsigned kernel_us, unsigned gap_us, double secs)
{
    if (init_ctx() != CUDA_SUCCESS)
        return 1;
    double t0 = now_s(), busy = 0;
    long n = 0, errors = 0;
    while (now_s() - t0 < secs) {
        double start = now_s();
        if (api.launch((CUfunction)1, kernel_us, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS ||
            api.sync() != CUDA_SUCCESS)
            errors++;
        busy += now_s() - start;
        n++;
        struct timespec gap = {(time_t)(gap_us / 1000000u), (long)(gap_us % 1000000u) * 1000};
        nanosleep(&gap, NULL);
    }
    printf("requests=%ld\nerrors=%ld\nbusy=%.6f\nsecs=%.6f\n", n, errors, busy, now_s() - t0);
    return errors != 0;
}

/* synced: n launches and one synchronisation, then "synced" and a pause while
 * the test reads the usage page (launch counts there without waiting for 32). */
static int cmd_synced(unsigned n)
{
    if (init_ctx() != CUDA_SUCCESS)
        return 1;
    for (unsigned i = 0; i < n; i++)
        if (api.launch((CUfunction)1, 10, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS)
            return 1;
    if (api.sync() != CUDA_SUCCESS)
        return 1;
    printf("synced\n");
    fflush(stdout);
    struct timespec pause = {2, 0};
    nanosleep(&pause, NULL);
    return 0;
}

/* kinds: every kind of device allocation is capped and returned. Run with
 * a 4 MiB cap; each kind takes 3 MiB (fits), then 3 MiB more (must not). */
static int cmd_kinds(void)
{
    void *h = drv;
    if (init_ctx() != CUDA_SUCCESS || h == NULL)
        return 1;
    /* Through the exported symbols, i.e. libxcuda's wrappers. */
    CUresult (*managed)(CUdeviceptr *, size_t, unsigned) = (void *)dlsym(h, "cuMemAllocManaged");
    CUresult (*async)(CUdeviceptr *, size_t, CUstream) = (void *)dlsym(h, "cuMemAllocAsync");
    CUresult (*pool)(CUdeviceptr *, size_t, CUmemoryPool, CUstream) =
        (void *)dlsym(h, "cuMemAllocFromPoolAsync");
    CUresult (*freeasync)(CUdeviceptr, CUstream) = (void *)dlsym(h, "cuMemFreeAsync");
    CUresult (*pitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned) =
        (void *)dlsym(h, "cuMemAllocPitch_v2");
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                       unsigned long long) = (void *)dlsym(h, "cuMemCreate");
    CUresult (*release)(CUmemGenericAllocationHandle) = (void *)dlsym(h, "cuMemRelease");
    CUresult (*arr)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *) = (void *)dlsym(h, "cuArrayCreate_v2");
    CUresult (*arrfree)(CUarray) = (void *)dlsym(h, "cuArrayDestroy");
    if (!managed || !async || !pool || !freeasync || !pitch || !create || !release || !arr ||
        !arrfree)
        return 1;
    const size_t mb3 = 3 << 20;
    CUdeviceptr a, b;
    CUresult r1 = managed(&a, mb3, CU_MEM_ATTACH_GLOBAL), r2 = managed(&b, mb3, CU_MEM_ATTACH_GLOBAL);
    printf("managed=%d,%d,%d\n", r1, r2, api.free(a));
    r1 = async(&a, mb3, NULL);
    r2 = async(&b, mb3, NULL);
    printf("async=%d,%d,%d\n", r1, r2, freeasync(a, NULL));
    r1 = pool(&a, mb3, NULL, NULL);
    r2 = pool(&b, mb3, NULL, NULL);
    printf("pool=%d,%d,%d\n", r1, r2, freeasync(a, NULL));
    size_t p1, p2;
    r1 = pitch(&a, &p1, 1000, 3000, 4); /* 1024 x 3000 = 2.9 MiB */
    r2 = pitch(&b, &p2, 1000, 3000, 4);
    printf("pitch=%d,%d,%d\n", r1, r2, api.free(a));
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle ha, hb;
    r1 = create(&ha, mb3, &prop, 0);
    r2 = create(&hb, mb3, &prop, 0);
    printf("create=%d,%d,%d\n", r1, r2, release(ha));
    CUDA_ARRAY_DESCRIPTOR d = {.Width = 768, .Height = 1024, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    CUarray xa, xb;
    r1 = arr(&xa, &d);
    r2 = arr(&xb, &d);
    printf("array=%d,%d,%d\n", r1, r2, arrfree(xa));
    return 0;
}

/* fork: the child gets its own process slot and cannot release the
 * parent's reservations by freeing the parent's pointers. */
static int cmd_fork(void)
{
    if (init_ctx() != CUDA_SUCCESS)
        return 1;
    CUdeviceptr p;
    printf("parent_alloc=%d\n", api.alloc(&p, 1 << 20));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        CUdeviceptr q;
        printf("child_alloc=%d\n", api.alloc(&q, 1 << 20));
        printf("child_free_parent_ptr=%d\n", api.free(p));
        fflush(stdout);
        char buf[8];
        while (fread(buf, 1, sizeof buf, stdin) > 0) {
        }
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    printf("child_status=%d\n", st);
    printf("parent_free=%d\n", api.free(p));
    return 0;
}

/* An application SIGTERM handler installed after cuInit still runs (after
 * libxcuda drained), and the process lives on. */
static volatile sig_atomic_t got_term;
static void on_term(int sig)
{
    (void)sig;
    got_term = 1;
}

static int cmd_sigapp(void)
{
    if (init_ctx() != CUDA_SUCCESS)
        return 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    struct sigaction cur;
    sigaction(SIGTERM, NULL, &cur);
    printf("handler_seen=%d\nready\n", cur.sa_handler == on_term);
    fflush(stdout);
    double t0 = now_s();
    long n = 0;
    while (!got_term && now_s() - t0 < 10) {
        api.launch((CUfunction)1, 500, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        n++;
    }
    printf("got_term=%d\n", (int)got_term);
    /* Launching still works after the application's handler ran. */
    printf("launch_after=%d\n",
           api.launch((CUfunction)1, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 3 || setup(argv[2]) != 0) {
        fprintf(stderr, "usage: xctest entry|hold|loop link|dlsym|gpa ...\n");
        return 2;
    }
    if (strcmp(argv[1], "entry") == 0 && argc == 4)
        return cmd_entry(strtoull(argv[3], NULL, 0));
    if (strcmp(argv[1], "hold") == 0 && argc >= 4)
        return cmd_hold(strtoull(argv[3], NULL, 0), argc > 4 ? atol(argv[4]) : 0);
    if (strcmp(argv[1], "churn") == 0 && argc == 5)
        return cmd_churn(strtoull(argv[3], NULL, 0), atol(argv[4]));
    if (strcmp(argv[1], "env") == 0) {
        const char *a = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
        const char *p = getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
        printf("atp=%s\npinned=%s\n", a ? a : "", p ? p : "");
        return 0;
    }
    if (strcmp(argv[1], "fork") == 0)
        return cmd_fork();
    if (strcmp(argv[1], "synced") == 0 && argc == 4)
        return cmd_synced((unsigned)atoi(argv[3]));
    if (strcmp(argv[1], "kinds") == 0)
        return cmd_kinds();
    if (strcmp(argv[1], "sigapp") == 0)
        return cmd_sigapp();
    if (strcmp(argv[1], "requests") == 0 && argc == 6)
        return cmd_requests((unsigned)atoi(argv[3]), (unsigned)atoi(argv[4]), atof(argv[5]));
    if (strcmp(argv[1], "loop") == 0 && argc == 6)
        return cmd_loop((unsigned)atoi(argv[3]), atof(argv[4]),
                        strcmp(argv[5], "graph") == 0 ? 1 : strcmp(argv[5], "coop") == 0 ? 2 : 0);
    fprintf(stderr, "xctest: bad arguments\n");
    return 2;
}
