/* xcbench.c — what libxcuda adds to a call, measured in one process: the
 * stub driver's function called directly (its own pointer, via stub_fn)
 * versus the exported symbol, which LD_PRELOAD=libxcuda.so interposes.
 *   xcbench time            prints medians (ns per call) and the difference
 *   xcbench direct|wrapped N  runs N launches only (for callgrind)
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*sync_fn)(void);

static launch_fn direct_launch;
static alloc_fn direct_alloc;
static free_fn direct_free;
static sync_fn direct_sync;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

__attribute__((noinline)) void loop_direct(long n)
{
    for (long i = 0; i < n; i++)
        direct_launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
}

__attribute__((noinline)) void loop_wrapped(long n)
{
    for (long i = 0; i < n; i++)
        cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
}

__attribute__((noinline)) void alloc_direct(long n)
{
    for (long i = 0; i < n; i++) {
        CUdeviceptr p;
        if (direct_alloc(&p, 256) == CUDA_SUCCESS)
            direct_free(p);
    }
}

__attribute__((noinline)) void alloc_wrapped(long n)
{
    for (long i = 0; i < n; i++) {
        CUdeviceptr p;
        if (cuMemAlloc(&p, 256) == CUDA_SUCCESS)
            cuMemFree(p);
    }
}

/* A request of one empty kernel: launch, then synchronise (an online process clears its
 * GPU's signal slot there and wakes the offline processes holding for it). */
__attribute__((noinline)) void request_direct(long n)
{
    for (long i = 0; i < n; i++) {
        direct_launch(NULL, 0, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        direct_sync();
    }
}

__attribute__((noinline)) void request_wrapped(long n)
{
    for (long i = 0; i < n; i++) {
        cuLaunchKernel(NULL, 0, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        cuCtxSynchronize();
    }
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median over rounds of the per-call time of a batch; the two variants
 * alternate so machine load hits both alike. */
static void measure(void (*a)(long), void (*b)(long), long batch, int rounds, double *ma,
                    double *mb)
{
    double *ta = calloc((size_t)rounds, sizeof *ta), *tb = calloc((size_t)rounds, sizeof *tb);
    a(batch);
    b(batch);
    for (int r = 0; r < rounds; r++) {
        double t0 = now_ns();
        a(batch);
        double t1 = now_ns();
        b(batch);
        double t2 = now_ns();
        ta[r] = (t1 - t0) / (double)batch;
        tb[r] = (t2 - t1) / (double)batch;
    }
    qsort(ta, (size_t)rounds, sizeof *ta, cmp);
    qsort(tb, (size_t)rounds, sizeof *tb, cmp);
    *ma = ta[rounds / 2];
    *mb = tb[rounds / 2];
    free(ta);
    free(tb);
}

int main(int argc, char **argv)
{
    void *(*stub_fn)(const char *) = (void *(*)(const char *))dlsym(RTLD_DEFAULT, "stub_fn");
    if (stub_fn == NULL) {
        fprintf(stderr, "xcbench: needs the stub driver (stub_fn)\n");
        return 2;
    }
    direct_launch = (launch_fn)stub_fn("cuLaunchKernel");
    direct_alloc = (alloc_fn)stub_fn("cuMemAlloc_v2");
    direct_free = (free_fn)stub_fn("cuMemFree_v2");
    direct_sync = (sync_fn)stub_fn("cuCtxSynchronize");
    if (cuInit(0) != CUDA_SUCCESS) {
        fprintf(stderr, "xcbench: cuInit failed\n");
        return 1;
    }
    if (argc == 3 && strcmp(argv[1], "direct") == 0) {
        loop_direct(atol(argv[2]));
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "wrapped") == 0) {
        loop_wrapped(atol(argv[2]));
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "time") == 0) {
        double d, w;
        measure(loop_direct, loop_wrapped, 20000, 201, &d, &w);
        printf("cuLaunchKernel: direct %.2f ns, intercepted %.2f ns, added %.2f ns (median of 201 batches of 20000)\n",
               d, w, w - d);
        measure(alloc_direct, alloc_wrapped, 2000, 101, &d, &w);
        printf("cuMemAlloc+cuMemFree: direct %.2f ns, intercepted %.2f ns, added %.2f ns per pair (median of 101 batches of 2000)\n",
               d, w, w - d);
        measure(request_direct, request_wrapped, 2000, 101, &d, &w);
        printf("cuLaunchKernel+cuCtxSynchronize: direct %.2f ns, intercepted %.2f ns, added %.2f ns per request (median of 101 batches of 2000)\n",
               d, w, w - d);
        return 0;
    }
    fprintf(stderr, "usage: xcbench time | direct N | wrapped N\n");
    return 2;
}
