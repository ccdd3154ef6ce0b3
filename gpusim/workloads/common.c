/* common.c — see common.h. */
#include "common.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef CUresult (*getproc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static int resolve(void *lib, getproc_fn gp, const char *plain, const char *exported, void **out)
{
	if (gp != NULL) {
		CUdriverProcAddressQueryResult st;
		if (gp(plain, out, 12060, CU_GET_PROC_ADDRESS_DEFAULT, &st) == CUDA_SUCCESS && *out != NULL)
			return 0;
		fprintf(stderr, "cuGetProcAddress(%s) failed\n", plain);
		return -1;
	}
	*out = dlsym(lib, exported);
	if (*out == NULL) {
		fprintf(stderr, "dlsym(%s): %s\n", exported, dlerror());
		return -1;
	}
	return 0;
}

int drv_load(struct drv *d, int use_dlsym)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (lib == NULL) {
		fprintf(stderr, "dlopen(libcuda.so.1): %s\n", dlerror());
		return -1;
	}
	getproc_fn gp = NULL;
	if (!use_dlsym) {
		gp = (getproc_fn)dlsym(lib, "cuGetProcAddress_v2");
		if (gp == NULL) {
			fprintf(stderr, "libcuda.so.1 has no cuGetProcAddress_v2\n");
			return -1;
		}
	}
	struct {
		const char *plain, *exported;
		void **slot;
	} t[] = {
		{"cuInit", "cuInit", (void **)&d->Init},
		{"cuDeviceGet", "cuDeviceGet", (void **)&d->DeviceGet},
		{"cuDeviceGetCount", "cuDeviceGetCount", (void **)&d->DeviceGetCount},
		{"cuDeviceGetName", "cuDeviceGetName", (void **)&d->DeviceGetName},
		{"cuDeviceGetAttribute", "cuDeviceGetAttribute", (void **)&d->DeviceGetAttribute},
		{"cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", (void **)&d->PrimaryCtxRetain},
		{"cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease_v2", (void **)&d->PrimaryCtxRelease},
		{"cuCtxSetCurrent", "cuCtxSetCurrent", (void **)&d->CtxSetCurrent},
		{"cuCtxSynchronize", "cuCtxSynchronize", (void **)&d->CtxSynchronize},
		{"cuStreamCreate", "cuStreamCreate", (void **)&d->StreamCreate},
		{"cuStreamSynchronize", "cuStreamSynchronize", (void **)&d->StreamSynchronize},
		{"cuStreamDestroy", "cuStreamDestroy_v2", (void **)&d->StreamDestroy},
		{"cuStreamBeginCapture", "cuStreamBeginCapture_v2", (void **)&d->StreamBeginCapture},
		{"cuStreamEndCapture", "cuStreamEndCapture", (void **)&d->StreamEndCapture},
		{"cuGraphInstantiate", "cuGraphInstantiateWithFlags", (void **)&d->GraphInstantiate},
		{"cuGraphLaunch", "cuGraphLaunch", (void **)&d->GraphLaunch},
		{"cuGraphDestroy", "cuGraphDestroy", (void **)&d->GraphDestroy},
		{"cuGraphExecDestroy", "cuGraphExecDestroy", (void **)&d->GraphExecDestroy},
		{"cuGraphGetNodes", "cuGraphGetNodes", (void **)&d->GraphGetNodes},
		{"cuGraphNodeGetType", "cuGraphNodeGetType", (void **)&d->GraphNodeGetType},
		{"cuGraphExecMemsetNodeSetParams", "cuGraphExecMemsetNodeSetParams",
		 (void **)&d->GraphExecMemsetNodeSetParams},
		{"cuModuleLoadData", "cuModuleLoadData", (void **)&d->ModuleLoadData},
		{"cuModuleGetFunction", "cuModuleGetFunction", (void **)&d->ModuleGetFunction},
		{"cuLaunchKernel", "cuLaunchKernel", (void **)&d->LaunchKernel},
		{"cuMemAlloc", "cuMemAlloc_v2", (void **)&d->MemAlloc},
		{"cuMemFree", "cuMemFree_v2", (void **)&d->MemFree},
		{"cuMemGetInfo", "cuMemGetInfo_v2", (void **)&d->MemGetInfo},
		{"cuMemcpyHtoDAsync", "cuMemcpyHtoDAsync_v2", (void **)&d->MemcpyHtoDAsync},
		{"cuMemcpyDtoHAsync", "cuMemcpyDtoHAsync_v2", (void **)&d->MemcpyDtoHAsync},
		{"cuMemsetD8Async", "cuMemsetD8Async", (void **)&d->MemsetD8Async},
		{"cuGetErrorName", "cuGetErrorName", (void **)&d->GetErrorName},
		{"cuEventCreate", "cuEventCreate", (void **)&d->EventCreate},
		{"cuEventRecord", "cuEventRecord", (void **)&d->EventRecord},
		{"cuEventElapsedTime", "cuEventElapsedTime", (void **)&d->EventElapsedTime},
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (resolve(lib, gp, t[i].plain, t[i].exported, t[i].slot) != 0)
			return -1;
	return 0;
}

const char *drv_errname(struct drv *d, CUresult r)
{
	const char *s = NULL;
	if (d->GetErrorName == NULL || d->GetErrorName(r, &s) != CUDA_SUCCESS || s == NULL)
		return "CUDA_ERROR_UNRECOGNISED";
	return s;
}

CUresult drv_open(struct drv *d, int device, CUdevice *dev, CUcontext *ctx, CUstream *st,
		  const char **step)
{
	CUresult r;
	if ((*step = "cuInit", r = d->Init(0)) != CUDA_SUCCESS ||
	    (*step = "cuDeviceGet", r = d->DeviceGet(dev, device)) != CUDA_SUCCESS ||
	    (*step = "cuDevicePrimaryCtxRetain", r = d->PrimaryCtxRetain(ctx, *dev)) != CUDA_SUCCESS ||
	    (*step = "cuCtxSetCurrent", r = d->CtxSetCurrent(*ctx)) != CUDA_SUCCESS ||
	    (*step = "cuStreamCreate", r = d->StreamCreate(st, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS)
		return r;
	return CUDA_SUCCESS;
}

int is_sticky(CUresult r)
{
	switch (r) {
	case CUDA_ERROR_ILLEGAL_ADDRESS:
	case CUDA_ERROR_LAUNCH_FAILED:
	case CUDA_ERROR_ECC_UNCORRECTABLE:
	case CUDA_ERROR_MPS_RPC_FAILURE:
	case CUDA_ERROR_MPS_CLIENT_TERMINATED:
	case CUDA_ERROR_MPS_CONNECTION_FAILED:
	case CUDA_ERROR_DEVICE_UNAVAILABLE:
	case CUDA_ERROR_UNKNOWN:
		return 1;
	default:
		return 0;
	}
}

double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void sleep_until(double t)
{
	double d = t - now_s();
	if (d <= 0)
		return;
	struct timespec ts = {.tv_sec = (time_t)d, .tv_nsec = (long)((d - floor(d)) * 1e9)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
	}
}

int parse_bytes(const char *s, uint64_t *out)
{
	char *e;
	double v = strtod(s, &e);
	if (e == s || !(v >= 0))
		return -1;
	double m = 1;
	if (*e == 'K' || *e == 'k')
		m = 1024.0, e++;
	else if (*e == 'M' || *e == 'm')
		m = 1024.0 * 1024, e++;
	else if (*e == 'G' || *e == 'g')
		m = 1024.0 * 1024 * 1024, e++;
	if (*e == 'i')
		e++;
	if (*e == 'B' || *e == 'b')
		e++;
	if (*e != '\0')
		return -1;
	*out = (uint64_t)(v * m);
	return 0;
}

const char *module_text(const struct kdef *k, int n, char *buf, size_t cap)
{
	size_t off = (size_t)snprintf(buf, cap, "gpusim-module 1\n");
	for (int i = 0; i < n && off < cap; i++)
		off += (size_t)snprintf(buf + off, cap - off, "func %s block_us=%.3f bw=%.3f\n", k[i].name,
					k[i].block_us, k[i].bw);
	return buf;
}

void lat_add(struct latencies *l, double x)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 1024;
		double *p = realloc(l->v, cap * sizeof *p);
		if (p == NULL)
			return;
		l->v = p;
		l->cap = cap;
	}
	l->v[l->n++] = x;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

double lat_pct(struct latencies *l, double p)
{
	if (l->n == 0)
		return 0;
	qsort(l->v, l->n, sizeof *l->v, cmp_d);
	size_t i = (size_t)ceil(p / 100.0 * (double)l->n);
	if (i > 0)
		i--;
	if (i >= l->n)
		i = l->n - 1;
	return l->v[i];
}
