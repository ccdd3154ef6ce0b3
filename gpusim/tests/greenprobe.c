/* greenprobe — links the fake libcuda directly (-lcuda) and checks green
 * contexts (CUDA 12.4): SM resources and their split on an H100 (device 0) and a
 * T4 (device 1), descriptors, green contexts and their streams, launches confined
 * to the green context's SMs, and event ordering between a green stream and a
 * primary-context stream. Every check prints "ok NAME" or "FAIL NAME: ..."; the
 * exit status is the number of failures. Run by gpusim's Go tests under a gpusimd
 * serving "h100,t4". */
#include <stdio.h>
#include <string.h>

#include <cuda.h>

#include "probe.h"

/* slow: 2 ms a block, to order streams by; fill: a 0.5 ms wave, to time confinement */
static const char *module = "gpusim-module 1\nfunc slow block_us=2000 bw=0.1\nfunc fill block_us=500 bw=0.1\n";

enum { H100 = 0, T4 = 1, H100_SMS = 132, T4_SMS = 40 };

static int zero_after_sm_count(const CUdevResource *r)
{
	for (size_t i = sizeof r->sm; i < sizeof r->_oversize; i++)
		if (r->_oversize[i] != 0)
			return 0;
	return 1;
}

static void check_device_resource(void)
{
	CUdevResource r;
	memset(&r, 0xab, sizeof r);
	CHECK("cuDeviceGetDevResource H100", cuDeviceGetDevResource(H100, &r, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS);
	TRUE("H100 resource: 132 SMs, the rest zero", r.type == CU_DEV_RESOURCE_TYPE_SM && r.sm.smCount == H100_SMS &&
							  zero_after_sm_count(&r));
	CHECK("cuDeviceGetDevResource T4", cuDeviceGetDevResource(T4, &r, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS);
	TRUE("T4 resource: 40 SMs", r.sm.smCount == T4_SMS);
	CHECK("resource of type INVALID", cuDeviceGetDevResource(H100, &r, CU_DEV_RESOURCE_TYPE_INVALID), CUDA_ERROR_INVALID_VALUE);
	CHECK("resource of an unknown type", cuDeviceGetDevResource(H100, &r, (CUdevResourceType)7), CUDA_ERROR_INVALID_VALUE);
	CHECK("resource into NULL", cuDeviceGetDevResource(H100, NULL, CU_DEV_RESOURCE_TYPE_SM), CUDA_ERROR_INVALID_VALUE);
	CHECK("resource of a missing device", cuDeviceGetDevResource(2, &r, CU_DEV_RESOURCE_TYPE_SM), CUDA_ERROR_INVALID_DEVICE);
}

/* split_count: how many groups a split of dev's SMs by min_count makes, and of what size */
static void split_count(const char *name, CUdevice dev, unsigned min_count, unsigned want_groups, unsigned want_size)
{
	CUdevResource in, out[64], rest;
	unsigned n = 0;
	char label[128];
	cuDeviceGetDevResource(dev, &in, CU_DEV_RESOURCE_TYPE_SM);
	snprintf(label, sizeof label, "%s: count", name);
	CHECK(label, cuDevSmResourceSplitByCount(NULL, &n, &in, NULL, 0, min_count), CUDA_SUCCESS);
	snprintf(label, sizeof label, "%s: %u groups fit", name, want_groups);
	TRUE(label, n == want_groups);
	n = 64;
	snprintf(label, sizeof label, "%s: split", name);
	CHECK(label, cuDevSmResourceSplitByCount(out, &n, &in, &rest, 0, min_count), CUDA_SUCCESS);
	int same = n == want_groups;
	for (unsigned i = 0; i < n && i < 64; i++)
		same = same && out[i].type == CU_DEV_RESOURCE_TYPE_SM && out[i].sm.smCount == want_size;
	snprintf(label, sizeof label, "%s: %u groups of %u SMs, the rest in remaining", name, want_groups, want_size);
	TRUE(label, same && rest.sm.smCount == in.sm.smCount - want_groups * want_size);
}

static void check_split(void)
{
	split_count("H100 minCount 10", H100, 10, 8, 16); /* 9.x: a multiple of 8 */
	split_count("H100 minCount 0", H100, 0, 16, 8);   /* at least 8 */
	split_count("H100 minCount 121", H100, 121, 1, 128);
	split_count("T4 minCount 3", T4, 3, 10, 4);   /* 7.x: a multiple of 2 */
	split_count("T4 minCount 1", T4, 1, 20, 2);   /* at least 2 */
	split_count("T4 minCount 10", T4, 10, 4, 10);

	CUdevResource in, out[8], rest, bad;
	unsigned n = 3;
	cuDeviceGetDevResource(H100, &in, CU_DEV_RESOURCE_TYPE_SM);
	CHECK("split into 3 of the 8 groups", cuDevSmResourceSplitByCount(out, &n, &in, &rest, 0, 10), CUDA_SUCCESS);
	TRUE("3 groups written, 84 SMs remaining", n == 3 && rest.sm.smCount == H100_SMS - 48);
	CHECK("split, no remaining wanted", cuDevSmResourceSplitByCount(out, &n, &in, NULL, 0, 10), CUDA_SUCCESS);
	n = 8;
	CHECK("split the input into itself as remaining", cuDevSmResourceSplitByCount(out, &n, &in, &in, 0, 10), CUDA_SUCCESS);
	TRUE("remaining overwrote the input after the split", n == 8 && in.sm.smCount == 4 && out[7].sm.smCount == 16);
	cuDeviceGetDevResource(H100, &in, CU_DEV_RESOURCE_TYPE_SM);
	n = 8;
	CHECK("groups rounded up past the input", cuDevSmResourceSplitByCount(out, &n, &in, &rest, 0, 129),
	      CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
	CHECK("useFlags 1", cuDevSmResourceSplitByCount(out, &n, &in, &rest, 1, 8), CUDA_ERROR_INVALID_VALUE);
	CHECK("nbGroups NULL", cuDevSmResourceSplitByCount(out, NULL, &in, &rest, 0, 8), CUDA_ERROR_INVALID_VALUE);
	CHECK("input NULL", cuDevSmResourceSplitByCount(out, &n, NULL, &rest, 0, 8), CUDA_ERROR_INVALID_VALUE);
	n = 0;
	CHECK("room for 0 groups", cuDevSmResourceSplitByCount(out, &n, &in, &rest, 0, 8), CUDA_ERROR_INVALID_VALUE);
	n = 8;
	bad = in;
	bad.type = CU_DEV_RESOURCE_TYPE_INVALID;
	CHECK("input of another type", cuDevSmResourceSplitByCount(out, &n, &bad, &rest, 0, 8), CUDA_ERROR_INVALID_RESOURCE_TYPE);
	memset(&bad, 0, sizeof bad);
	bad.type = CU_DEV_RESOURCE_TYPE_SM;
	bad.sm.smCount = H100_SMS;
	CHECK("input filled in by hand", cuDevSmResourceSplitByCount(out, &n, &bad, &rest, 0, 8), CUDA_ERROR_INVALID_VALUE);
	CHECK("split the split", cuDevSmResourceSplitByCount(NULL, &n, &out[0], NULL, 0, 8), CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
}

static void check_desc(void)
{
	CUdevResource h[8], h2[8], t[4], rest;
	CUdevResourceDesc d;
	unsigned n = 8, m = 8, k = 4;
	cuDeviceGetDevResource(H100, &rest, CU_DEV_RESOURCE_TYPE_SM);
	cuDevSmResourceSplitByCount(h, &n, &rest, NULL, 0, 16);
	cuDevSmResourceSplitByCount(h2, &m, &rest, NULL, 0, 16);
	cuDeviceGetDevResource(T4, &rest, CU_DEV_RESOURCE_TYPE_SM);
	cuDevSmResourceSplitByCount(t, &k, &rest, NULL, 0, 10);
	CHECK("desc into NULL", cuDevResourceGenerateDesc(NULL, h, 1), CUDA_ERROR_INVALID_VALUE);
	CHECK("desc of NULL", cuDevResourceGenerateDesc(&d, NULL, 1), CUDA_ERROR_INVALID_VALUE);
	CHECK("desc of nothing", cuDevResourceGenerateDesc(&d, h, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK("desc of one group", cuDevResourceGenerateDesc(&d, h, 1), CUDA_SUCCESS);
	CHECK("desc of two groups of one split", cuDevResourceGenerateDesc(&d, h, 2), CUDA_SUCCESS);
	CUdevResource twice[2] = {h[0], h[0]}, mixed[2] = {h[0], h2[1]}, devs[2] = {h[0], t[0]};
	CHECK("desc of one group twice", cuDevResourceGenerateDesc(&d, twice, 2), CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
	CHECK("desc of groups of two splits", cuDevResourceGenerateDesc(&d, mixed, 2), CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);
	CHECK("desc of two devices' groups", cuDevResourceGenerateDesc(&d, devs, 2), CUDA_ERROR_INVALID_VALUE);
	twice[0].type = (CUdevResourceType)9;
	CHECK("desc of another type", cuDevResourceGenerateDesc(&d, twice, 1), CUDA_ERROR_INVALID_RESOURCE_TYPE);
}

/* green_of makes a green context of the first group of min_count SMs on dev */
static CUresult green_of(CUgreenCtx *g, CUdevice dev, unsigned min_count)
{
	CUdevResource in, grp;
	CUdevResourceDesc d;
	unsigned n = 1;
	CUresult r = cuDeviceGetDevResource(dev, &in, CU_DEV_RESOURCE_TYPE_SM);
	if (r == CUDA_SUCCESS)
		r = cuDevSmResourceSplitByCount(&grp, &n, &in, NULL, 0, min_count);
	if (r == CUDA_SUCCESS)
		r = cuDevResourceGenerateDesc(&d, &grp, 1);
	if (r == CUDA_SUCCESS)
		r = cuGreenCtxCreate(g, d, dev, CU_GREEN_CTX_DEFAULT_STREAM);
	return r;
}

static void check_create_errors(void)
{
	CUdevResource in, grp;
	CUdevResourceDesc d;
	CUgreenCtx g;
	unsigned n = 1;
	cuDeviceGetDevResource(H100, &in, CU_DEV_RESOURCE_TYPE_SM);
	cuDevSmResourceSplitByCount(&grp, &n, &in, NULL, 0, 16);
	cuDevResourceGenerateDesc(&d, &grp, 1);
	CHECK("green context into NULL", cuGreenCtxCreate(NULL, d, H100, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_ERROR_INVALID_VALUE);
	CHECK("green context of no descriptor", cuGreenCtxCreate(&g, NULL, H100, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_ERROR_INVALID_VALUE);
	CHECK("green context flags 2", cuGreenCtxCreate(&g, d, H100, 2), CUDA_ERROR_INVALID_VALUE);
	CHECK("green context on another device than its SMs", cuGreenCtxCreate(&g, d, T4, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_ERROR_INVALID_VALUE);
	CHECK("green context on a missing device", cuGreenCtxCreate(&g, d, 9, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_ERROR_INVALID_DEVICE);
	CUstream s;
	CHECK("green stream of NULL", cuGreenCtxStreamCreate(&s, NULL, CU_STREAM_NON_BLOCKING, 0), CUDA_ERROR_INVALID_HANDLE);
	CHECK("cuCtxFromGreenCtx of NULL", cuCtxFromGreenCtx((CUcontext *)&s, NULL), CUDA_ERROR_INVALID_HANDLE);
	CHECK("cuGreenCtxDestroy of NULL", cuGreenCtxDestroy(NULL), CUDA_ERROR_INVALID_HANDLE);
}

/* elapsed_ms: the time between two completed events, or -1 */
static float elapsed_ms(CUevent a, CUevent b)
{
	float ms = -1;
	if (cuEventSynchronize(b) != CUDA_SUCCESS || cuEventElapsedTime(&ms, a, b) != CUDA_SUCCESS)
		return -1;
	return ms;
}

/* Work ordered by events across a green stream and a primary-context stream, in
 * both directions; the function was got in the primary context. */
static void check_ordering(CUstream green, CUstream prim, CUfunction slow, CUfunction fill)
{
	CUevent start, ga, pa;
	cuEventCreate(&start, 0);
	cuEventCreate(&ga, 0);
	cuEventCreate(&pa, 0);
	CHECK("record start on the green stream", cuEventRecord(start, green), CUDA_SUCCESS);
	CHECK("primary-context function in a green stream", cuLaunchKernel(slow, 16, 1, 1, 256, 1, 1, 0, green, NULL, NULL), CUDA_SUCCESS);
	CHECK("record on the green stream", cuEventRecord(ga, green), CUDA_SUCCESS);
	CHECK("primary stream waits for the green event", cuStreamWaitEvent(prim, ga, 0), CUDA_SUCCESS);
	CHECK("record on the primary stream after the wait", cuEventRecord(pa, prim), CUDA_SUCCESS);
	CHECK("primary stream behind the green 2 ms kernel", cuEventQuery(pa), CUDA_ERROR_NOT_READY);
	float ms = elapsed_ms(start, pa);
	printf("green -> primary: %.3f ms\n", ms);
	TRUE("the primary record came after the green kernel", ms >= 1.6f);

	CHECK("record start on the primary stream", cuEventRecord(start, prim), CUDA_SUCCESS);
	CHECK("2 ms kernel on the primary stream", cuLaunchKernel(slow, 16, 1, 1, 256, 1, 1, 0, prim, NULL, NULL), CUDA_SUCCESS);
	CHECK("record on the primary stream", cuEventRecord(pa, prim), CUDA_SUCCESS);
	CHECK("green stream waits for the primary event", cuStreamWaitEvent(green, pa, 0), CUDA_SUCCESS);
	CHECK("kernel on the green stream after the wait", cuLaunchKernel(fill, 16, 1, 1, 256, 1, 1, 0, green, NULL, NULL), CUDA_SUCCESS);
	CHECK("record on the green stream after it", cuEventRecord(ga, green), CUDA_SUCCESS);
	CHECK("green stream behind the primary 2 ms kernel", cuEventQuery(ga), CUDA_ERROR_NOT_READY);
	ms = elapsed_ms(start, ga);
	printf("primary -> green: %.3f ms\n", ms);
	TRUE("the green kernel ran after the primary one", ms >= 2.0f);
	cuEventDestroy(start);
	cuEventDestroy(ga);
	cuEventDestroy(pa);
}

/* wave_ms: one GPU-filling launch of fill (132 SMs × 8 blocks) on the current
 * context's NULL stream, in ms */
static float wave_ms(CUfunction fill)
{
	CUevent a, b;
	cuEventCreate(&a, 0);
	cuEventCreate(&b, 0);
	cuEventRecord(a, NULL);
	CUresult r = cuLaunchKernel(fill, H100_SMS * 8, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL);
	cuEventRecord(b, NULL);
	float ms = r == CUDA_SUCCESS ? elapsed_ms(a, b) : -1;
	cuEventDestroy(a);
	cuEventDestroy(b);
	return ms;
}

/* The green context as a CUcontext: current, its NULL stream confined to its SMs,
 * its memory process-wide. */
static void check_current(CUgreenCtx g, CUcontext primary, CUfunction fill)
{
	CUcontext gc = NULL, cur = NULL;
	CHECK("cuCtxFromGreenCtx NULL out", cuCtxFromGreenCtx(NULL, g), CUDA_ERROR_INVALID_VALUE);
	CHECK("cuCtxFromGreenCtx", cuCtxFromGreenCtx(&gc, g), CUDA_SUCCESS);
	TRUE("the green context's CUcontext is its own", gc != NULL && gc != primary);
	CHECK("cuCtxDestroy of a green context's CUcontext", cuCtxDestroy(gc), CUDA_ERROR_INVALID_CONTEXT);
	CHECK("cuCtxPushCurrent green", cuCtxPushCurrent(gc), CUDA_SUCCESS);
	CHECK("cuCtxPopCurrent green", cuCtxPopCurrent(&cur), CUDA_SUCCESS);
	TRUE("popped the green context", cur == gc);
	CHECK("cuCtxSetCurrent green", cuCtxSetCurrent(gc), CUDA_SUCCESS);
	CUdevice dev = -1;
	CHECK("cuCtxGetDevice in the green context", cuCtxGetDevice(&dev), CUDA_SUCCESS);
	TRUE("green context on the H100", dev == H100);
	float green = wave_ms(fill);
	CUdeviceptr p = 0;
	size_t free0 = 0, free1 = 0, total = 0;
	cuMemGetInfo(&free0, &total);
	CHECK("cuMemAlloc in the green context", cuMemAlloc(&p, 64 << 20), CUDA_SUCCESS);
	cuMemGetInfo(&free1, &total);
	TRUE("the green allocation uses device memory", free0 - free1 == (64 << 20));
	CHECK("cuCtxSynchronize in the green context", cuCtxSynchronize(), CUDA_SUCCESS);
	CHECK("cuCtxSetCurrent primary", cuCtxSetCurrent(primary), CUDA_SUCCESS);
	CHECK("cuMemFree of it in the primary context", cuMemFree(p), CUDA_SUCCESS);
	float whole = wave_ms(fill);
	printf("a 132x8-block wave: %.3f ms on 16 green SMs, %.3f ms on the whole H100\n", green, whole);
	/* 1056 blocks: 9 waves of 128 on 16 SMs, one on 132 */
	TRUE("the green context's NULL stream is confined to 16 SMs", whole > 0 && green > 4 * whole);
}

static void check_procaddr(void)
{
	static const struct {
		const char *name;
		void *fn;
	} want[] = {
		{"cuDeviceGetDevResource", (void *)cuDeviceGetDevResource},
		{"cuDevSmResourceSplitByCount", (void *)cuDevSmResourceSplitByCount},
		{"cuDevResourceGenerateDesc", (void *)cuDevResourceGenerateDesc},
		{"cuGreenCtxCreate", (void *)cuGreenCtxCreate},
		{"cuGreenCtxDestroy", (void *)cuGreenCtxDestroy},
		{"cuCtxFromGreenCtx", (void *)cuCtxFromGreenCtx},
		{"cuGreenCtxStreamCreate", (void *)cuGreenCtxStreamCreate},
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		void *fp = NULL;
		CUresult r = cuGetProcAddress(want[i].name, &fp, 12040, CU_GET_PROC_ADDRESS_DEFAULT, NULL);
		if (r != CUDA_SUCCESS || fp != want[i].fn) {
			printf("FAIL cuGetProcAddress %s: %d\n", want[i].name, (int)r);
			fails++;
		} else {
			printf("ok cuGetProcAddress %s\n", want[i].name);
		}
	}
}

static void check_green(void)
{
	CUgreenCtx g = NULL, gt = NULL;
	CUcontext primary, cur = NULL;
	unsigned flags;
	int active = -1;
	check_create_errors();
	CHECK("green context of 16 H100 SMs", green_of(&g, H100, 10), CUDA_SUCCESS);
	CHECK("green context of 10 T4 SMs", green_of(&gt, T4, 10), CUDA_SUCCESS);
	CHECK("cuCtxGetCurrent after the create", cuCtxGetCurrent(&cur), CUDA_SUCCESS);
	TRUE("a green context is not made current", cur == NULL);
	CHECK("primary context state", cuDevicePrimaryCtxGetState(H100, &flags, &active), CUDA_SUCCESS);
	TRUE("the green context retained the primary context", active == 1);

	CUstream gs, ps;
	CHECK("green stream, blocking flags", cuGreenCtxStreamCreate(&gs, g, CU_STREAM_DEFAULT, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK("green stream into NULL", cuGreenCtxStreamCreate(NULL, g, CU_STREAM_NON_BLOCKING, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK("cuGreenCtxStreamCreate", cuGreenCtxStreamCreate(&gs, g, CU_STREAM_NON_BLOCKING, -1), CUDA_SUCCESS);
	CHECK("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&primary, H100), CUDA_SUCCESS);
	CHECK("cuCtxSetCurrent primary", cuCtxSetCurrent(primary), CUDA_SUCCESS);
	CHECK("primary stream", cuStreamCreate(&ps, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
	CUmodule mod;
	CUfunction slow, fill;
	CHECK("cuModuleLoadData in the primary context", cuModuleLoadData(&mod, module), CUDA_SUCCESS);
	CHECK("cuModuleGetFunction slow", cuModuleGetFunction(&slow, mod, "slow"), CUDA_SUCCESS);
	CHECK("cuModuleGetFunction fill", cuModuleGetFunction(&fill, mod, "fill"), CUDA_SUCCESS);
	check_ordering(gs, ps, slow, fill);
	check_current(g, primary, fill);

	CHECK("cuStreamDestroy green", cuStreamDestroy(gs), CUDA_SUCCESS);
	CHECK("cuStreamDestroy primary", cuStreamDestroy(ps), CUDA_SUCCESS);
	CHECK("cuGreenCtxDestroy", cuGreenCtxDestroy(g), CUDA_SUCCESS);
	CHECK("cuGreenCtxDestroy twice", cuGreenCtxDestroy(g), CUDA_ERROR_INVALID_HANDLE);
	CHECK("cuCtxFromGreenCtx of a destroyed one", cuCtxFromGreenCtx(&cur, g), CUDA_ERROR_INVALID_HANDLE);
	CHECK("cuGreenCtxDestroy T4", cuGreenCtxDestroy(gt), CUDA_SUCCESS);
	CHECK("cuModuleUnload", cuModuleUnload(mod), CUDA_SUCCESS);
	CHECK("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease(H100), CUDA_SUCCESS);
	CHECK("primary context state at the end", cuDevicePrimaryCtxGetState(H100, &flags, &active), CUDA_SUCCESS);
	TRUE("the green context released its retain", active == 0);
	CHECK("T4 primary context state at the end", cuDevicePrimaryCtxGetState(T4, &flags, &active), CUDA_SUCCESS);
	TRUE("the T4 green context released its retain", active == 0);
}

int main(void)
{
	CUdevResource r;
	int n = 0, sms = 0;
	CHECK("before cuInit", cuDeviceGetDevResource(0, &r, CU_DEV_RESOURCE_TYPE_SM), CUDA_ERROR_NOT_INITIALIZED);
	CHECK("cuInit", cuInit(0), CUDA_SUCCESS);
	CHECK("cuDeviceGetCount", cuDeviceGetCount(&n), CUDA_SUCCESS);
	cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, T4);
	if (n != 2 || sms != T4_SMS) {
		printf("FAIL setup: want gpusimd -gpus h100,t4, got %d devices, device 1 with %d SMs\n", n, sms);
		return 1;
	}
	check_device_resource();
	check_split();
	check_desc();
	check_green();
	check_procaddr();
	printf("failures %d\n", fails);
	return fails;
}
