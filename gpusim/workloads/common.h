/* common.h — what infer and train share: reaching the driver the way
 * frameworks do (dlopen("libcuda.so.1") + cuGetProcAddress, or plain dlsym
 * for every symbol), a generated fake module, clocks and JSON output. */
#ifndef GPUSIM_WL_COMMON_H
#define GPUSIM_WL_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

struct drv {
	CUresult (*Init)(unsigned int);
	CUresult (*DeviceGet)(CUdevice *, int);
	CUresult (*DeviceGetCount)(int *);
	CUresult (*DeviceGetName)(char *, int, CUdevice);
	CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
	CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*PrimaryCtxRelease)(CUdevice);
	CUresult (*CtxSetCurrent)(CUcontext);
	CUresult (*CtxSynchronize)(void);
	CUresult (*StreamCreate)(CUstream *, unsigned int);
	CUresult (*StreamSynchronize)(CUstream);
	CUresult (*StreamDestroy)(CUstream);
	CUresult (*StreamBeginCapture)(CUstream, CUstreamCaptureMode);
	CUresult (*StreamEndCapture)(CUstream, CUgraph *);
	CUresult (*GraphInstantiate)(CUgraphExec *, CUgraph, unsigned long long);
	CUresult (*GraphLaunch)(CUgraphExec, CUstream);
	CUresult (*GraphDestroy)(CUgraph);
	CUresult (*GraphExecDestroy)(CUgraphExec);
	CUresult (*GraphGetNodes)(CUgraph, CUgraphNode *, size_t *);
	CUresult (*GraphNodeGetType)(CUgraphNode, CUgraphNodeType *);
	CUresult (*GraphExecMemsetNodeSetParams)(CUgraphExec, CUgraphNode, const CUDA_MEMSET_NODE_PARAMS *,
						 CUcontext);
	CUresult (*ModuleLoadData)(CUmodule *, const void *);
	CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
				 unsigned, CUstream, void **, void **);
	CUresult (*MemAlloc)(CUdeviceptr *, size_t);
	CUresult (*MemFree)(CUdeviceptr);
	CUresult (*MemGetInfo)(size_t *, size_t *);
	CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
	CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
	CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
	CUresult (*GetErrorName)(CUresult, const char **);
	CUresult (*EventCreate)(CUevent *, unsigned int);
	CUresult (*EventRecord)(CUevent, CUstream);
	CUresult (*EventElapsedTime)(float *, CUevent, CUevent);
};

/* drv_load fills d; use_dlsym chooses plain dlsym over cuGetProcAddress.
 * Returns 0 or prints why and returns -1. */
int drv_load(struct drv *d, int use_dlsym);
const char *drv_errname(struct drv *d, CUresult r);

/* drv_open starts the way both programs do: cuInit, the device's primary
 * context made current, one non-blocking stream. On failure *step names the
 * call that failed. */
CUresult drv_open(struct drv *d, int device, CUdevice *dev, CUcontext *ctx, CUstream *st,
		  const char **step);

/* is_sticky: errors after which the context is unusable */
int is_sticky(CUresult r);

double now_s(void);
void sleep_until(double t);
int parse_bytes(const char *s, uint64_t *out);

/* the fake module both programs load: one kernel per entry */
struct kdef {
	const char *name;
	double block_us;
	double bw;
};
const char *module_text(const struct kdef *k, int n, char *buf, size_t cap);

struct latencies {
	double *v;
	size_t n, cap;
};
void lat_add(struct latencies *l, double x);
double lat_pct(struct latencies *l, double p); /* sorts */

#endif
