/* train — an offline training job stand-in: a memory footprint, then
 * iterations of big (GPU-filling) and small kernels, synchronised once per
 * iteration, optionally after a batch's input copy and gradient memset, optionally
 * captured once into a CUDA graph and replayed.
 * Prints JSON with iterations/s. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static void usage(void)
{
	fprintf(stderr, "usage: train [--iters N | --duration S] [--kernels K] [--big-share F] [--kernel-us U]\n"
			"             [--small-grid B] [--bw F] [--mem BYTES] [--batch BYTES] [--graph]\n"
			"             [--update-every N] [--device D] [--dlsym]\n");
}

/* step_work enqueues one step: the batch's input copy and zeroed gradients (when batch > 0),
 * then its kernels, the first nbig of them GPU-filling. */
static CUresult step_work(struct drv *d, CUfunction fn, CUstream st, int kernels, int nbig,
			  unsigned big_grid, unsigned small_grid, CUdeviceptr foot, const void *input,
			  uint64_t batch)
{
	CUresult r = CUDA_SUCCESS;
	if (batch > 0 && (r = d->MemcpyHtoDAsync(foot, input, batch, st)) == CUDA_SUCCESS)
		r = d->MemsetD8Async(foot, 0, batch, st);
	for (int i = 0; i < kernels && r == CUDA_SUCCESS; i++)
		r = d->LaunchKernel(fn, i < nbig ? big_grid : small_grid, 1, 1, 256, 1, 1, 0, st, NULL, NULL);
	return r;
}

/* find_memset finds g's memset node (step_work's gradients). */
static CUresult find_memset(struct drv *d, CUgraph g, CUgraphNode *out)
{
	CUgraphNode nodes[64];
	size_t n = sizeof nodes / sizeof nodes[0];
	CUresult r = d->GraphGetNodes(g, nodes, &n);
	for (size_t i = 0; r == CUDA_SUCCESS && i < n; i++) {
		CUgraphNodeType t;
		if ((r = d->GraphNodeGetType(nodes[i], &t)) == CUDA_SUCCESS && t == CU_GRAPH_NODE_TYPE_MEMSET) {
			*out = nodes[i];
			return CUDA_SUCCESS;
		}
	}
	return r == CUDA_SUCCESS ? CUDA_ERROR_NOT_FOUND : r;
}

int main(int argc, char **argv)
{
	long iters = 0;
	double duration = 5, big_share = 0.5, kernel_us = 500, bw = 0.4;
	int kernels = 10, device = 0, graph = 0, use_dlsym = 0, update_every = 0;
	unsigned small_grid = 64;
	uint64_t mem = 1ull << 30, batch = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int ok = 1;
		if (strcmp(a, "--graph") == 0) {
			graph = 1;
			continue;
		} else if (strcmp(a, "--dlsym") == 0) {
			use_dlsym = 1;
			continue;
		}
		if (v == NULL) {
			usage();
			return 2;
		}
		i++;
		if (strcmp(a, "--iters") == 0)
			ok = sscanf(v, "%ld", &iters) == 1 && iters >= 1;
		else if (strcmp(a, "--duration") == 0)
			ok = sscanf(v, "%lf", &duration) == 1 && duration > 0 && duration <= 86400;
		else if (strcmp(a, "--kernels") == 0)
			ok = sscanf(v, "%d", &kernels) == 1 && kernels >= 1 && kernels <= 100000;
		else if (strcmp(a, "--big-share") == 0)
			ok = sscanf(v, "%lf", &big_share) == 1 && big_share >= 0 && big_share <= 1;
		else if (strcmp(a, "--kernel-us") == 0)
			ok = sscanf(v, "%lf", &kernel_us) == 1 && kernel_us > 0 && kernel_us <= 1e7;
		else if (strcmp(a, "--small-grid") == 0)
			ok = sscanf(v, "%u", &small_grid) == 1 && small_grid >= 1;
		else if (strcmp(a, "--bw") == 0)
			ok = sscanf(v, "%lf", &bw) == 1 && bw >= 0 && bw <= 1;
		else if (strcmp(a, "--mem") == 0)
			ok = parse_bytes(v, &mem) == 0;
		else if (strcmp(a, "--batch") == 0)
			ok = parse_bytes(v, &batch) == 0;
		else if (strcmp(a, "--device") == 0)
			ok = sscanf(v, "%d", &device) == 1 && device >= 0;
		else if (strcmp(a, "--update-every") == 0)
			ok = sscanf(v, "%d", &update_every) == 1 && update_every >= 1;
		else
			ok = 0;
		if (!ok) {
			fprintf(stderr, "train: bad value for %s: %s\n", a, v);
			usage();
			return 2;
		}
	}
	if (update_every > 0 && (!graph || batch == 0)) {
		fprintf(stderr, "train: --update-every sets the graph's memset: it needs --graph and --batch\n");
		return 2;
	}
	if (batch > mem) {
		fprintf(stderr, "train: --batch %llu is larger than --mem %llu\n", (unsigned long long)batch,
			(unsigned long long)mem);
		return 2;
	}
	/* the host side of the batch's input copy; gpusim never reads it */
	unsigned char *input = batch > 0 ? calloc(1, (size_t)batch) : NULL;
	if (batch > 0 && input == NULL) {
		fprintf(stderr, "train: no host memory for a batch of %llu bytes\n", (unsigned long long)batch);
		return 1;
	}
	struct drv d;
	if (drv_load(&d, use_dlsym) != 0)
		return 1;
	CUresult r;
	CUdevice dev;
	CUcontext ctx;
	CUstream st;
	CUmodule mod;
	CUfunction fn;
	CUdeviceptr foot = 0;
	int sms = 0;
	const char *step;
	if ((r = drv_open(&d, device, &dev, &ctx, &st, &step)) != CUDA_SUCCESS ||
	    (step = "cuDeviceGetAttribute", r = d.DeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)) != CUDA_SUCCESS ||
	    (step = "cuMemAlloc", r = (mem > 0 ? d.MemAlloc(&foot, mem) : CUDA_SUCCESS)) != CUDA_SUCCESS) {
		printf("{\"iterations\":0,\"it_per_s\":0,\"errors\":1,\"first_error\":\"%s\",\"failed_at\":\"%s\"}\n",
		       drv_errname(&d, r), step);
		return 3;
	}
	char text[512];
	struct kdef k = {"train_step", kernel_us, bw};
	if ((r = d.ModuleLoadData(&mod, module_text(&k, 1, text, sizeof text))) != CUDA_SUCCESS ||
	    (r = d.ModuleGetFunction(&fn, mod, "train_step")) != CUDA_SUCCESS) {
		printf("{\"iterations\":0,\"it_per_s\":0,\"errors\":1,\"first_error\":\"%s\",\"failed_at\":\"module\"}\n",
		       drv_errname(&d, r));
		return 3;
	}
	/* big kernels fill the GPU for two waves; small ones use small_grid blocks */
	unsigned big_grid = (unsigned)sms * 8 * 2;
	int nbig = (int)lround(big_share * kernels);
	CUgraphExec exec = NULL;
	CUgraph g = NULL;
	CUgraphNode zero = NULL; /* the graph's memset, set again every update_every steps */
	if (graph) {
		r = d.StreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_GLOBAL);
		if (r == CUDA_SUCCESS)
			r = step_work(&d, fn, st, kernels, nbig, big_grid, small_grid, foot, input, batch);
		if (r == CUDA_SUCCESS)
			r = d.StreamEndCapture(st, &g);
		if (r == CUDA_SUCCESS)
			r = d.GraphInstantiate(&exec, g, 0);
		if (r == CUDA_SUCCESS && update_every > 0)
			r = find_memset(&d, g, &zero);
		if (r != CUDA_SUCCESS) {
			printf("{\"iterations\":0,\"it_per_s\":0,\"errors\":1,\"first_error\":\"%s\",\"failed_at\":\"graph\"}\n",
			       drv_errname(&d, r));
			return 3;
		}
		if (update_every == 0) {
			d.GraphDestroy(g);
			g = NULL;
		}
	}
	/* events around each step give its GPU time, free of host-side delays */
	CUevent ev0, ev1;
	if ((r = d.EventCreate(&ev0, 0)) != CUDA_SUCCESS || (r = d.EventCreate(&ev1, 0)) != CUDA_SUCCESS) {
		printf("{\"iterations\":0,\"it_per_s\":0,\"errors\":1,\"first_error\":\"%s\",\"failed_at\":\"events\"}\n",
		       drv_errname(&d, r));
		return 3;
	}
	long done = 0, errors = 0;
	double gpu_ms = 0;
	struct latencies steps = {0};
	CUresult first = CUDA_SUCCESS;
	double t0 = now_s();
	while (iters > 0 ? done < iters : now_s() - t0 < duration) {
		r = d.EventRecord(ev0, st);
		if (r == CUDA_SUCCESS && zero != NULL && done % update_every == 0) {
			CUDA_MEMSET_NODE_PARAMS p = {.dst = foot, .elementSize = 1, .width = batch, .height = 1};
			r = d.GraphExecMemsetNodeSetParams(exec, zero, &p, ctx);
		}
		if (r == CUDA_SUCCESS && graph)
			r = d.GraphLaunch(exec, st);
		else if (r == CUDA_SUCCESS)
			r = step_work(&d, fn, st, kernels, nbig, big_grid, small_grid, foot, input, batch);
		if (r == CUDA_SUCCESS)
			r = d.EventRecord(ev1, st);
		if (r == CUDA_SUCCESS)
			r = d.StreamSynchronize(st);
		float ms = 0;
		if (r == CUDA_SUCCESS)
			r = d.EventElapsedTime(&ms, ev0, ev1);
		if (r != CUDA_SUCCESS) {
			errors++;
			first = r;
			break;
		}
		gpu_ms += ms;
		lat_add(&steps, ms);
		done++;
	}
	double el = now_s() - t0;
	double smin = lat_pct(&steps, 0), smed = lat_pct(&steps, 50);
	printf("{\"iterations\":%ld,\"it_per_s\":%.3f,\"gpu_ms_per_iter\":%.3f,\"gpu_ms_min\":%.3f,\"gpu_ms_p50\":%.3f,\"duration_s\":%.3f,\"errors\":%ld,\"first_error\":\"%s\","
	       "\"mem_bytes\":%llu,\"graph\":%s,\"kernels_per_iter\":%d}\n",
	       done, el > 0 ? (double)done / el : 0, done ? gpu_ms / (double)done : 0, smin, smed, el, errors, first == CUDA_SUCCESS ? "" : drv_errname(&d, first),
	       (unsigned long long)mem, graph ? "true" : "false", kernels);
	fflush(stdout);
	if (first != CUDA_SUCCESS)
		return 3;
	if (exec)
		d.GraphExecDestroy(exec);
	if (g)
		d.GraphDestroy(g);
	if (foot)
		d.MemFree(foot);
	d.StreamDestroy(st);
	d.PrimaryCtxRelease(dev);
	free(input);
	return 0;
}
