/* apiprobe — links the fake libcuda directly (-lcuda) and walks the driver
 * API surface: every check prints "ok NAME" or "FAIL NAME: ..." and the exit
 * status is the number of failures. Run by gpusim's Go tests under gpusimd. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cuda.h>

#include "probe.h"

static const char *module = "gpusim-module 1\nfunc k block_us=100 bw=0.1\n";

int main(void)
{
	CUdevice dev;
	CUcontext ctx, ctx2, cur;
	int n = 0, v = 0;
	char name[128];
	size_t total = 0, fr = 0, tot = 0;

	CHECK("before init", cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
	CHECK("cuInit bad flags", cuInit(1), CUDA_ERROR_INVALID_VALUE);
	CHECK("cuInit", cuInit(0), CUDA_SUCCESS);
	CHECK("cuDriverGetVersion", cuDriverGetVersion(&v), CUDA_SUCCESS);
	TRUE("driver version >= 12000", v >= 12000);
	CHECK("cuDeviceGetCount", cuDeviceGetCount(&n), CUDA_SUCCESS);
	TRUE("one or more devices", n >= 1);
	CHECK("cuDeviceGet bad ordinal", cuDeviceGet(&dev, n), CUDA_ERROR_INVALID_DEVICE);
	CHECK("cuDeviceGet", cuDeviceGet(&dev, 0), CUDA_SUCCESS);
	CHECK("cuDeviceGetName", cuDeviceGetName(name, sizeof name, dev), CUDA_SUCCESS);
	TRUE("name says NVIDIA or Tesla", strstr(name, "NVIDIA") != NULL || strstr(name, "Tesla") != NULL);
	CUuuid u;
	CHECK("cuDeviceGetUuid", cuDeviceGetUuid(&u, dev), CUDA_SUCCESS);
	CHECK("cuDeviceTotalMem", cuDeviceTotalMem(&total, dev), CUDA_SUCCESS);
	TRUE("total memory > 1 GiB", total > (1ull << 30));
	CHECK("SM count", cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), CUDA_SUCCESS);
	TRUE("SM count positive", v > 0);
	CHECK("bad attribute", cuDeviceGetAttribute(&v, (CUdevice_attribute)100000, dev), CUDA_ERROR_INVALID_VALUE);

	CHECK("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS);
	CHECK("cuCtxSetCurrent", cuCtxSetCurrent(ctx), CUDA_SUCCESS);
	CHECK("cuCtxGetCurrent", cuCtxGetCurrent(&cur), CUDA_SUCCESS);
	TRUE("current is primary", cur == ctx);
	CHECK("cuCtxCreate", cuCtxCreate(&ctx2, 0, dev), CUDA_SUCCESS);
	CHECK("cuCtxPopCurrent", cuCtxPopCurrent(&cur), CUDA_SUCCESS);
	TRUE("popped the new context", cur == ctx2);
	CHECK("cuCtxDestroy", cuCtxDestroy(ctx2), CUDA_SUCCESS);
	CHECK("cuCtxDestroy twice", cuCtxDestroy(ctx2), CUDA_ERROR_INVALID_CONTEXT);

	/* context slots are reused: more create/destroy cycles than slots */
	int cyc_fail = 0;
	for (int i = 0; i < 5000 && !cyc_fail; i++) {
		CUcontext t;
		if (cuCtxCreate(&t, 0, dev) != CUDA_SUCCESS || cuCtxDestroy(t) != CUDA_SUCCESS)
			cyc_fail = i + 1;
	}
	TRUE("5000 context create/destroy cycles", cyc_fail == 0);
	CHECK("primary still current", cuCtxGetCurrent(&cur), CUDA_SUCCESS);
	TRUE("primary is current again", cur == ctx);

	CUdeviceptr p = 0, p2 = 0, base = 0;
	size_t sz = 0, pitch = 0;
	CHECK("cuMemGetInfo", cuMemGetInfo(&fr, &tot), CUDA_SUCCESS);
	TRUE("free <= total", fr <= tot && tot > 0);
	CHECK("cuMemAlloc", cuMemAlloc(&p, 1 << 20), CUDA_SUCCESS);
	CHECK("cuMemAlloc zero", cuMemAlloc(&p2, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK("cuMemAlloc too big", cuMemAlloc(&p2, tot + (1ull << 30)), CUDA_ERROR_OUT_OF_MEMORY);
	size_t fr2 = 0;
	CHECK("cuMemGetInfo after alloc", cuMemGetInfo(&fr2, &tot), CUDA_SUCCESS);
	TRUE("free dropped by 1 MiB", fr - fr2 == (1 << 20));
	CHECK("cuMemGetAddressRange", cuMemGetAddressRange(&base, &sz, p + 10), CUDA_SUCCESS);
	TRUE("address range", base == p && sz == (1 << 20));
	CHECK("cuMemAllocPitch", cuMemAllocPitch(&p2, &pitch, 1000, 10, 4), CUDA_SUCCESS);
	TRUE("pitch aligned", pitch >= 1000 && pitch % 512 == 0);
	CHECK("cuMemFree pitch", cuMemFree(p2), CUDA_SUCCESS);
	CHECK("cuMemAllocManaged", cuMemAllocManaged(&p2, 4096, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
	CHECK("cuMemFree managed", cuMemFree(p2), CUDA_SUCCESS);
	CHECK("cuMemFree unknown", cuMemFree(0xdead0000ull), CUDA_ERROR_INVALID_VALUE);
	char host[4096];
	CHECK("cuMemcpyHtoD", cuMemcpyHtoD(p, host, sizeof host), CUDA_SUCCESS);
	CHECK("cuMemcpyDtoH", cuMemcpyDtoH(host, p, sizeof host), CUDA_SUCCESS);
	CHECK("cuMemsetD32", cuMemsetD32(p, 7, 1024), CUDA_SUCCESS);
	void *hp = NULL;
	CHECK("cuMemAllocHost", cuMemAllocHost(&hp, 4096), CUDA_SUCCESS);
	CHECK("cuMemFreeHost", cuMemFreeHost(hp), CUDA_SUCCESS);

	CUstream s;
	CHECK("cuStreamCreate", cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
	CHECK("cuMemAllocAsync", cuMemAllocAsync(&p2, 8192, s), CUDA_SUCCESS);
	CHECK("cuMemFreeAsync", cuMemFreeAsync(p2, s), CUDA_SUCCESS);
	CUmemoryPool pool;
	CHECK("cuDeviceGetDefaultMemPool", cuDeviceGetDefaultMemPool(&pool, dev), CUDA_SUCCESS);
	CHECK("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync(&p2, 8192, pool, s), CUDA_SUCCESS);
	CHECK("cuMemFreeAsync pool", cuMemFreeAsync(p2, s), CUDA_SUCCESS);

	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof prop);
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = dev;
	size_t gran = 0;
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	CHECK("cuMemGetAllocationGranularity", cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
	CHECK("cuMemCreate", cuMemCreate(&h, gran, &prop, 0), CUDA_SUCCESS);
	CHECK("cuMemCreate unaligned", cuMemCreate(&h, gran + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK("cuMemAddressReserve", cuMemAddressReserve(&va, gran, 0, 0, 0), CUDA_SUCCESS);
	CHECK("cuMemMap", cuMemMap(va, gran, 0, h, 0), CUDA_SUCCESS);
	CUmemAccessDesc acc = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CHECK("cuMemSetAccess", cuMemSetAccess(va, gran, &acc, 1), CUDA_SUCCESS);
	CHECK("cuMemUnmap", cuMemUnmap(va, gran), CUDA_SUCCESS);
	CHECK("cuMemAddressFree", cuMemAddressFree(va, gran), CUDA_SUCCESS);
	CHECK("cuMemRelease", cuMemRelease(h), CUDA_SUCCESS);

	CUmodule mod;
	CUfunction fn;
	CHECK("cuModuleLoadData", cuModuleLoadData(&mod, module), CUDA_SUCCESS);
	CHECK("cuModuleLoadData bad", cuModuleLoadData(&mod, "gpusim-module 1\nfunc k speed=1\n"), CUDA_ERROR_INVALID_IMAGE);
	CHECK("cuModuleGetFunction", cuModuleGetFunction(&fn, mod, "k"), CUDA_SUCCESS);
	CUfunction nf;
	CHECK("cuModuleGetFunction missing", cuModuleGetFunction(&nf, mod, "nope"), CUDA_ERROR_NOT_FOUND);
	CHECK("cuLaunchKernel", cuLaunchKernel(fn, 4, 1, 1, 128, 1, 1, 0, s, NULL, NULL), CUDA_SUCCESS);
	CHECK("cuLaunchKernel 2048 threads", cuLaunchKernel(fn, 1, 1, 1, 2048, 1, 1, 0, s, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
	CHECK("cuLaunchKernel null function", cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL), CUDA_ERROR_INVALID_HANDLE);
	CUlaunchConfig cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
	cfg.blockDimX = 64;
	cfg.blockDimY = cfg.blockDimZ = 1;
	cfg.hStream = s;
	CHECK("cuLaunchKernelEx", cuLaunchKernelEx(&cfg, fn, NULL, NULL), CUDA_SUCCESS);
	CHECK("cuLaunchCooperativeKernel", cuLaunchCooperativeKernel(fn, 2, 1, 1, 64, 1, 1, 0, s, NULL), CUDA_SUCCESS);
	CHECK("cuLaunchCooperativeKernel too large", cuLaunchCooperativeKernel(fn, 1u << 30, 1, 1, 64, 1, 1, 0, s, NULL), CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
	CUevent e1, e2;
	float ms = 0;
	CHECK("cuEventCreate", cuEventCreate(&e1, 0), CUDA_SUCCESS);
	CHECK("cuEventCreate 2", cuEventCreate(&e2, 0), CUDA_SUCCESS);
	CHECK("cuEventRecord", cuEventRecord(e1, s), CUDA_SUCCESS);
	CHECK("cuLaunchKernel timed", cuLaunchKernel(fn, 1, 1, 1, 64, 1, 1, 0, s, NULL, NULL), CUDA_SUCCESS);
	CHECK("cuEventRecord 2", cuEventRecord(e2, s), CUDA_SUCCESS);
	CHECK("cuEventSynchronize", cuEventSynchronize(e2), CUDA_SUCCESS);
	CHECK("cuEventQuery", cuEventQuery(e2), CUDA_SUCCESS);
	CHECK("cuEventElapsedTime", cuEventElapsedTime(&ms, e1, e2), CUDA_SUCCESS);
	TRUE("elapsed about 0.1 ms", ms > 0.05f && ms < 50.0f);
	/* Event completions that gpusimd reports (answered without a round trip) follow
	 * CUDA's semantics: never recorded is complete, a new record is pending until the
	 * work before it finishes, and elapsed times are those of the latest records. */
	CUevent e3;
	CHECK("cuEventCreate 3", cuEventCreate(&e3, 0), CUDA_SUCCESS);
	CHECK("cuEventQuery never recorded", cuEventQuery(e3), CUDA_SUCCESS);
	for (int round = 0; round < 2; round++) {
		CHECK("cuEventRecord before", cuEventRecord(e1, s), CUDA_SUCCESS);
		for (int i = 0; i < 20; i++) /* 2 ms of kernels */
			CHECK("cuLaunchKernel queued", cuLaunchKernel(fn, 1, 1, 1, 64, 1, 1, 0, s, NULL, NULL), CUDA_SUCCESS);
		CHECK("cuEventRecord after", cuEventRecord(e3, s), CUDA_SUCCESS);
		CHECK("cuEventQuery behind 2 ms of work", cuEventQuery(e3), CUDA_ERROR_NOT_READY);
		CHECK("cuEventElapsedTime not ready", cuEventElapsedTime(&ms, e1, e3), CUDA_ERROR_NOT_READY);
		CUresult q = CUDA_ERROR_NOT_READY;
		if (round == 1) { /* after a sync the record is complete at once */
			CHECK("cuStreamSynchronize before the query", cuStreamSynchronize(s), CUDA_SUCCESS);
			CHECK("cuEventQuery right after the sync", cuEventQuery(e3), CUDA_SUCCESS);
		}
		for (int i = 0; i < 100000 && q == CUDA_ERROR_NOT_READY; i++) {
			struct timespec ts = {0, 50000};
			nanosleep(&ts, NULL);
			q = cuEventQuery(e3);
		}
		CHECK("cuEventQuery polled to completion", q, CUDA_SUCCESS);
		CHECK("cuEventElapsedTime of the latest records", cuEventElapsedTime(&ms, e1, e3), CUDA_SUCCESS);
		TRUE("20 kernels of 0.1 ms took about 2 ms", ms > 1.5f && ms < 50.0f);
	}
	/* A synchronisation on one event covers the records before it, not those after: a
	 * launch gate that waits for its oldest launch and polls the later ones. */
	CUevent e4;
	CHECK("cuEventCreate 4", cuEventCreate(&e4, 0), CUDA_SUCCESS);
	CHECK("cuEventRecord first", cuEventRecord(e1, s), CUDA_SUCCESS);
	for (int i = 0; i < 10; i++)
		CHECK("cuLaunchKernel first ms", cuLaunchKernel(fn, 1, 1, 1, 64, 1, 1, 0, s, NULL, NULL), CUDA_SUCCESS);
	CHECK("cuEventRecord middle", cuEventRecord(e3, s), CUDA_SUCCESS);
	for (int i = 0; i < 20; i++)
		CHECK("cuLaunchKernel next 2 ms", cuLaunchKernel(fn, 1, 1, 1, 64, 1, 1, 0, s, NULL, NULL), CUDA_SUCCESS);
	CHECK("cuEventRecord last", cuEventRecord(e4, s), CUDA_SUCCESS);
	CHECK("cuEventSynchronize middle", cuEventSynchronize(e3), CUDA_SUCCESS);
	CHECK("cuEventQuery of the record before the synced one", cuEventQuery(e1), CUDA_SUCCESS);
	CHECK("cuEventQuery of the synced one", cuEventQuery(e3), CUDA_SUCCESS);
	CHECK("cuEventQuery of the one after, 2 ms behind", cuEventQuery(e4), CUDA_ERROR_NOT_READY);
	CHECK("cuEventSynchronize last", cuEventSynchronize(e4), CUDA_SUCCESS);
	CHECK("cuEventQuery of the last once synced", cuEventQuery(e4), CUDA_SUCCESS);
	CHECK("cuEventDestroy 4", cuEventDestroy(e4), CUDA_SUCCESS);
	CHECK("cuEventDestroy 3", cuEventDestroy(e3), CUDA_SUCCESS);
	CUstream s2;
	CHECK("cuStreamCreate 2", cuStreamCreate(&s2, 0), CUDA_SUCCESS);
	CHECK("cuStreamWaitEvent", cuStreamWaitEvent(s2, e2, 0), CUDA_SUCCESS);
	CHECK("cuStreamSynchronize", cuStreamSynchronize(s), CUDA_SUCCESS);
	CHECK("cuStreamQuery", cuStreamQuery(s), CUDA_SUCCESS);
	CHECK("cuCtxSynchronize", cuCtxSynchronize(), CUDA_SUCCESS);

	CUgraph g;
	CUgraphExec ge;
	CUstreamCaptureStatus cs;
	CHECK("cuStreamBeginCapture", cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
	CHECK("cuStreamIsCapturing", cuStreamIsCapturing(s, &cs), CUDA_SUCCESS);
	TRUE("capturing", cs == CU_STREAM_CAPTURE_STATUS_ACTIVE);
	CHECK("captured launch", cuLaunchKernel(fn, 8, 1, 1, 128, 1, 1, 0, s, NULL, NULL), CUDA_SUCCESS);
	CHECK("captured memset", cuMemsetD32Async(p, 0, 16, s), CUDA_SUCCESS);
	CHECK("sync while capturing", cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	CHECK("cuStreamEndCapture", cuStreamEndCapture(s, &g), CUDA_SUCCESS);
	CHECK("cuGraphInstantiate", cuGraphInstantiate(&ge, g, 0), CUDA_SUCCESS);
	CHECK("cuGraphLaunch", cuGraphLaunch(ge, s), CUDA_SUCCESS);
	CHECK("cuGraphLaunch again", cuGraphLaunch(ge, s), CUDA_SUCCESS);
	CHECK("graph sync", cuStreamSynchronize(s), CUDA_SUCCESS);
	CHECK("cuGraphExecDestroy", cuGraphExecDestroy(ge), CUDA_SUCCESS);

	/* inspecting and editing a graph: a chain of its two nodes */
	size_t nn = 0, ne = 0;
	CUgraphNode nodes[3], from[2], to[2], cn;
	CUgraphNodeType ty;
	CHECK("cuGraphGetNodes count", cuGraphGetNodes(g, NULL, &nn), CUDA_SUCCESS);
	TRUE("two nodes", nn == 2);
	nn = 3;
	CHECK("cuGraphGetNodes", cuGraphGetNodes(g, nodes, &nn), CUDA_SUCCESS);
	TRUE("two nodes returned, the rest NULL", nn == 2 && nodes[2] == NULL);
	CHECK("cuGraphNodeGetType kernel", cuGraphNodeGetType(nodes[0], &ty), CUDA_SUCCESS);
	TRUE("the launch is a kernel node", ty == CU_GRAPH_NODE_TYPE_KERNEL);
	CHECK("cuGraphNodeGetType memset", cuGraphNodeGetType(nodes[1], &ty), CUDA_SUCCESS);
	TRUE("the memset is a memset node", ty == CU_GRAPH_NODE_TYPE_MEMSET);
	CHECK("cuGraphGetEdges count", cuGraphGetEdges(g, NULL, NULL, &ne), CUDA_SUCCESS);
	ne = 2;
	CHECK("cuGraphGetEdges", cuGraphGetEdges(g, from, to, &ne), CUDA_SUCCESS);
	TRUE("one edge, launch to memset", ne == 1 && from[0] == nodes[0] && to[0] == nodes[1] && from[1] == NULL);
	CUgraph gc;
	CHECK("cuGraphClone", cuGraphClone(&gc, g), CUDA_SUCCESS);
	CHECK("cuGraphNodeFindInClone", cuGraphNodeFindInClone(&cn, nodes[1], gc), CUDA_SUCCESS);
	TRUE("the clone's node is its own", cn != nodes[1]);
	CHECK("find in the original", cuGraphNodeFindInClone(&cn, nodes[1], g), CUDA_ERROR_INVALID_VALUE);
	CHECK("cuGraphDestroyNode", cuGraphDestroyNode(cn), CUDA_SUCCESS);
	CHECK("destroy it again", cuGraphDestroyNode(cn), CUDA_ERROR_INVALID_VALUE);
	nn = 0;
	CHECK("clone's nodes", cuGraphGetNodes(gc, NULL, &nn), CUDA_SUCCESS);
	TRUE("the clone keeps one, the original two", nn == 1 && cuGraphGetNodes(g, NULL, &ne) == CUDA_SUCCESS && ne == 2);
	CHECK("clone edges", cuGraphGetEdges(gc, NULL, NULL, &ne), CUDA_SUCCESS);
	TRUE("no edge left in the clone", ne == 0);
	CHECK("instantiate the clone", cuGraphInstantiate(&ge, gc, 0), CUDA_SUCCESS);
	CHECK("launch the clone", cuGraphLaunch(ge, s), CUDA_SUCCESS);
	CHECK("clone sync", cuStreamSynchronize(s), CUDA_SUCCESS);
	CHECK("destroy the clone's exec", cuGraphExecDestroy(ge), CUDA_SUCCESS);
	/* a node's parameters set again in an instantiated graph */
	CHECK("instantiate the graph again", cuGraphInstantiate(&ge, g, 0), CUDA_SUCCESS);
	CUDA_MEMSET_NODE_PARAMS mp = {.dst = p, .elementSize = 4, .width = 16, .height = 1};
	CHECK("set the memset node", cuGraphExecMemsetNodeSetParams(ge, nodes[1], &mp, ctx), CUDA_SUCCESS);
	CHECK("set a kernel node as a memset", cuGraphExecMemsetNodeSetParams(ge, nodes[0], &mp, ctx),
	      CUDA_ERROR_INVALID_VALUE);
	mp.elementSize = 3;
	CHECK("a memset of 3-byte elements", cuGraphExecMemsetNodeSetParams(ge, nodes[1], &mp, ctx),
	      CUDA_ERROR_INVALID_VALUE);
	CHECK("launch it set again", cuGraphLaunch(ge, s), CUDA_SUCCESS);
	CHECK("set-again sync", cuStreamSynchronize(s), CUDA_SUCCESS);
	CHECK("destroy it", cuGraphExecDestroy(ge), CUDA_SUCCESS);
	CHECK("destroy the clone", cuGraphDestroy(gc), CUDA_SUCCESS);
	CHECK("cuGraphDestroy", cuGraphDestroy(g), CUDA_SUCCESS);

	void *fp = NULL;
	CUdriverProcAddressQueryResult qr;
	CHECK("cuGetProcAddress cuMemAlloc", cuGetProcAddress("cuMemAlloc", &fp, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &qr), CUDA_SUCCESS);
	TRUE("cuMemAlloc resolves to cuMemAlloc_v2", fp == (void *)cuMemAlloc);
	CHECK("cuGetProcAddress ptsz", cuGetProcAddress("cuLaunchKernel", &fp, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &qr), CUDA_SUCCESS);
	TRUE("per-thread launch is the _ptsz one", fp == (void *)cuLaunchKernel_ptsz);
	CHECK("cuGetProcAddress unknown", cuGetProcAddress("cuNoSuchThing", &fp, 12000, 0, &qr), CUDA_ERROR_NOT_FOUND);
	TRUE("unknown reports not found", qr == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	const char *es = NULL;
	CHECK("cuGetErrorString", cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &es), CUDA_SUCCESS);
	TRUE("error string", es != NULL && strcmp(es, "out of memory") == 0);
	CHECK("cuGetErrorName unknown code", cuGetErrorName((CUresult)12345, &es), CUDA_ERROR_INVALID_VALUE);

	CHECK("cuStreamDestroy", cuStreamDestroy(s2), CUDA_SUCCESS);
	CHECK("cuStreamDestroy", cuStreamDestroy(s), CUDA_SUCCESS);
	CHECK("cuEventDestroy", cuEventDestroy(e1), CUDA_SUCCESS);
	CHECK("cuModuleUnload", cuModuleUnload(mod), CUDA_SUCCESS);
	CHECK("cuMemFree", cuMemFree(p), CUDA_SUCCESS);
	CHECK("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease(dev), CUDA_SUCCESS);
	printf("failures %d\n", fails);
	return fails;
}
