/* launchbench — measures the fake driver's costs from one process: the
 * median time a cuLaunchKernel call takes (asynchronous), the median
 * cuStreamSynchronize round trip on an idle stream, and the sustained launch
 * rate (launches / time until they have all completed), and how late after a
 * 300 us kernel ends a cuStreamSynchronize waiting for it returns. Prints JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cuda.h>

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp);
	return v[n / 2];
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 20000;
	int nsync = 500;
	if (n < 100 || n > 10000000) {
		fprintf(stderr, "usage: launchbench [LAUNCHES (100..10000000)]\n");
		return 2;
	}
	CUdevice dev;
	CUcontext ctx;
	CUstream s;
	CUmodule m;
	CUfunction f;
	if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
	    cuStreamCreate(&s, 0) || cuModuleLoadData(&m, "gpusim-module 1\nfunc tiny block_us=1 bw=0\n") ||
	    cuModuleGetFunction(&f, m, "tiny")) {
		fprintf(stderr, "launchbench: setup failed (is gpusimd running?)\n");
		return 1;
	}
	double *lat = malloc(sizeof(double) * (size_t)n), *sy = malloc(sizeof(double) * (size_t)nsync);
	if (lat == NULL || sy == NULL)
		return 1;
	for (int i = 0; i < nsync; i++) {
		double t = now_us();
		if (cuStreamSynchronize(s) != CUDA_SUCCESS)
			return 1;
		sy[i] = now_us() - t;
	}
	double t0 = now_us();
	for (int i = 0; i < n; i++) {
		double t = now_us();
		if (cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL) != CUDA_SUCCESS)
			return 1;
		lat[i] = now_us() - t;
	}
	if (cuStreamSynchronize(s) != CUDA_SUCCESS)
		return 1;
	double el = now_us() - t0;
	/* cuEventQuery on a completed event: what a launch gate polling its events pays */
	CUevent ev;
	double *q = malloc(sizeof(double) * (size_t)nsync);
	if (q == NULL || cuEventCreate(&ev, 0) || cuEventRecord(ev, s) || cuEventSynchronize(ev))
		return 1;
	for (int i = 0; i < nsync; i++) {
		double t = now_us();
		if (cuEventQuery(ev) != CUDA_SUCCESS)
			return 1;
		q[i] = now_us() - t;
	}
	/* cuEventQuery on a pending event just after cuEventSynchronize on an earlier one:
	 * a launch gate waiting for its oldest launch, then polling the later ones (a real
	 * driver reads host memory either way). */
	CUevent older, newer;
	CUfunction k100;
	double *pq = malloc(sizeof(double) * (size_t)nsync);
	if (pq == NULL || cuEventCreate(&older, 0) || cuEventCreate(&newer, 0) ||
	    cuModuleLoadData(&m, "gpusim-module 1\nfunc k100 block_us=100 bw=0\n") ||
	    cuModuleGetFunction(&k100, m, "k100"))
		return 1;
	int pending = 0;
	for (int i = 0; i < nsync; i++) {
		if (cuLaunchKernel(k100, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL) || cuEventRecord(older, s) ||
		    cuLaunchKernel(k100, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL) ||
		    cuLaunchKernel(k100, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL) || cuEventRecord(newer, s) ||
		    cuEventSynchronize(older))
			return 1;
		double t = now_us();
		CUresult r = cuEventQuery(newer);
		pq[i] = now_us() - t;
		if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY)
			return 1;
		pending += r == CUDA_ERROR_NOT_READY;
		if (cuEventSynchronize(newer))
			return 1;
	}
	/* A 300 us kernel, then cuStreamSynchronize: how late after the kernel ends the
	 * sync returns (a real driver: microseconds). */
	CUfunction k300;
	double *late = malloc(sizeof(double) * (size_t)nsync);
	if (late == NULL || cuModuleLoadData(&m, "gpusim-module 1\nfunc k300 block_us=300 bw=0\n") ||
	    cuModuleGetFunction(&k300, m, "k300"))
		return 1;
	for (int i = 0; i < nsync; i++) {
		double t = now_us();
		if (cuLaunchKernel(k300, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL) != CUDA_SUCCESS ||
		    cuStreamSynchronize(s) != CUDA_SUCCESS)
			return 1;
		late[i] = now_us() - t - 300;
	}
	printf("{\"launches\":%d,\"launches_per_s\":%.0f,\"launch_median_us\":%.3f,\"sync_median_us\":%.3f,"
	       "\"event_query_median_us\":%.3f,\"pending_query_median_us\":%.3f,\"pending_queries\":%d,"
	       "\"sync_after_kernel_median_us\":%.3f}\n",
	       n, n / (el / 1e6), median(lat, n), median(sy, nsync), median(q, nsync), median(pq, nsync),
	       pending, median(late, nsync));
	return 0;
}
