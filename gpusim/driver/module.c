/* module.c — fake modules, functions, kernel launches and the copy helper.
 * A launch is one pipelined message: no reply, no allocation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int gs_graph_add(struct CUgraph_st *g, const struct gs_node *n);

static CUresult module_send(CUmodule *pm, const void *data, uint32_t size)
{
	struct CUctx_st *c;
	CUresult r = gs_need_ctx(&c);
	if (r != CUDA_SUCCESS)
		return r;
	struct CUmod_st *m = calloc(1, sizeof *m);
	char *msg = malloc(sizeof(struct gs_module_load) + size);
	if (m == NULL || msg == NULL) {
		free(m);
		free(msg);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	m->magic = GS_MAGIC_MODULE;
	m->id = gs_next_id();
	struct gs_module_load h = {.module = m->id, .size = size};
	gs_hdr_fill(&h.h, GS_MODULE_LOAD, (uint32_t)(sizeof h + size));
	memcpy(msg, &h, sizeof h);
	if (size > 0)
		memcpy(msg + sizeof h, data, size);
	struct gs_reply rep;
	r = gs_call(msg, (uint32_t)(sizeof h + size), &rep, sizeof rep);
	free(msg);
	if (r != CUDA_SUCCESS) {
		free(m);
		return r;
	}
	*pm = m;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuModuleLoadData(CUmodule *pm, const void *image)
{
	if (pm == NULL || image == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	/* a gpusim module is text; anything else (cubin, fatbin, PTX) is
	 * accepted as opaque and its functions get the default cost */
	size_t n = 0;
	if (strncmp(image, "gpusim-module", 13) == 0)
		n = strnlen(image, GS_MAX_MSG - 1024);
	return module_send(pm, image, (uint32_t)n);
}

GS_EXPORT CUresult cuModuleLoad(CUmodule *pm, const char *fname)
{
	if (pm == NULL || fname == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	FILE *f = fopen(fname, "rb");
	if (f == NULL)
		return CUDA_ERROR_FILE_NOT_FOUND;
	char *buf = malloc(1 << 20);
	size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
	fclose(f);
	if (buf == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	buf[n] = '\0';
	CUresult r = module_send(pm, buf, strncmp(buf, "gpusim-module", 13) == 0 ? (uint32_t)n : 0);
	free(buf);
	return r;
}

GS_EXPORT CUresult cuModuleUnload(CUmodule m)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (m == NULL || m->magic != GS_MAGIC_MODULE)
		return CUDA_ERROR_INVALID_HANDLE;
	m->magic = 0;
	return gs_send_ids(GS_MODULE_UNLOAD, m->id, 0);
}

GS_EXPORT CUresult cuModuleGetFunction(CUfunction *pf, CUmodule m, const char *name)
{
	if (pf == NULL || name == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (m == NULL || m->magic != GS_MAGIC_MODULE)
		return CUDA_ERROR_INVALID_HANDLE;
	size_t nl = strnlen(name, 4097);
	if (nl == 0 || nl > 4096)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUfunc_st *f = calloc(1, sizeof *f);
	char *msg = malloc(sizeof(struct gs_func_get) + nl);
	if (f == NULL || msg == NULL) {
		free(f);
		free(msg);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	f->magic = GS_MAGIC_FUNC;
	f->id = gs_next_id();
	f->mod = m;
	struct gs_func_get h = {.module = m->id, .func = f->id, .name_len = (uint32_t)nl};
	gs_hdr_fill(&h.h, GS_FUNC_GET, (uint32_t)(sizeof h + nl));
	memcpy(msg, &h, sizeof h);
	memcpy(msg + sizeof h, name, nl);
	struct gs_reply rep;
	CUresult r = gs_call(msg, (uint32_t)(sizeof h + nl), &rep, sizeof rep);
	free(msg);
	if (r != CUDA_SUCCESS) {
		free(f);
		return r;
	}
	*pf = f;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuModuleGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUmodule m, const char *name)
{
	(void)dptr;
	(void)bytes;
	if (name == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (m == NULL || m->magic != GS_MAGIC_MODULE)
		return CUDA_ERROR_INVALID_HANDLE;
	return CUDA_ERROR_NOT_FOUND; /* fake modules have no globals */
}

CUresult gs_launch(struct CUfunc_st *f, const uint32_t grid[3], const uint32_t block[3], CUstream hs)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (f == NULL || f->magic != GS_MAGIC_FUNC)
		return CUDA_ERROR_INVALID_HANDLE;
	if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || block[0] == 0 || block[1] == 0 || block[2] == 0 ||
	    grid[1] > 65535 || grid[2] > 65535 || block[2] > 64 ||
	    (uint64_t)block[0] * block[1] * block[2] > 1024)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUstream_st *s;
	CUresult r = gs_resolve_stream(hs, &s);
	if (r != CUDA_SUCCESS)
		return r;
	if ((r = gs_ctx_ok(s->ctx)) != CUDA_SUCCESS)
		return r;
	if (s->capture != NULL) {
		struct gs_node n = {.func = f->id};
		memcpy(n.grid, grid, sizeof n.grid);
		memcpy(n.block, block, sizeof n.block);
		return gs_graph_add(s->capture, &n) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
	}
	/* every 256 launches, read what gpusimd sent: sticky errors, event completions */
	static _Atomic unsigned launches;
	if ((atomic_fetch_add_explicit(&launches, 1, memory_order_relaxed) & 255) == 255) {
		gs_drain();
		if ((r = gs_ctx_ok(s->ctx)) != CUDA_SUCCESS)
			return r;
	}
	struct gs_launch m = {.stream = s->id, .func = f->id,
			      .grid = {grid[0], grid[1], grid[2]}, .block = {block[0], block[1], block[2]}};
	gs_hdr_fill(&m.h, GS_LAUNCH, sizeof m);
	return gs_send(&m, sizeof m);
}

GS_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
				  unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
				  CUstream hs, void **params, void **extra)
{
	(void)shmem;
	(void)params;
	(void)extra;
	const uint32_t g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
	return gs_launch(f, g, b, hs);
}

GS_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
				       unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
				       CUstream hs, void **params, void **extra)
{
	return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, hs, params, extra);
}

GS_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra)
{
	(void)params;
	(void)extra;
	if (cfg == NULL || (cfg->numAttrs > 0 && cfg->attrs == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	const uint32_t g[3] = {cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ};
	const uint32_t b[3] = {cfg->blockDimX, cfg->blockDimY, cfg->blockDimZ};
	return gs_launch(f, g, b, cfg->hStream);
}

GS_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra)
{
	return cuLaunchKernelEx(cfg, f, params, extra);
}

GS_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
					     unsigned int bx, unsigned int by, unsigned int bz,
					     unsigned int shmem, CUstream hs, void **params)
{
	(void)shmem;
	(void)params;
	if (gs_initialized && gs_current() != NULL) {
		/* every block must be resident at once */
		const struct gs_dev_info_reply *d = &gs_devs[gs_current()->dev].info;
		uint64_t blocks = (uint64_t)gx * gy * gz;
		if (blocks > (uint64_t)d->sms * d->max_blocks_per_sm)
			return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
	}
	const uint32_t g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
	return gs_launch(f, g, b, hs);
}

GS_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
						  unsigned int gz, unsigned int bx, unsigned int by,
						  unsigned int bz, unsigned int shmem, CUstream hs, void **params)
{
	return cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, hs, params);
}

CUresult gs_copy(CUstream hs, uint32_t kind, uint64_t bytes, int sync)
{
	struct CUstream_st *s;
	CUresult r = gs_resolve_stream(hs, &s);
	if (r != CUDA_SUCCESS)
		return r;
	if ((r = gs_ctx_ok(s->ctx)) != CUDA_SUCCESS)
		return r;
	if (bytes == 0)
		return CUDA_SUCCESS;
	if (s->capture != NULL) {
		if (sync)
			return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
		struct gs_node n = {.is_copy = 1, .kind = kind, .bytes = bytes};
		return gs_graph_add(s->capture, &n) == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
	}
	struct gs_copy m = {.stream = s->id, .kind = kind, .bytes = bytes};
	gs_hdr_fill(&m.h, GS_COPY, sizeof m);
	if ((r = gs_send(&m, sizeof m)) != CUDA_SUCCESS || !sync)
		return r;
	return gs_call_ids(GS_SYNC, GS_SYNC_STREAM, s->id);
}
