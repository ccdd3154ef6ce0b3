/* context.c — primary and explicit contexts, the per-thread current-context
 * stack, and MPS limits read at context creation. */
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define GS_CTX_STACK 16
static __thread struct CUctx_st *tls_stack[GS_CTX_STACK];
static __thread int tls_depth;
static pthread_mutex_t gs_ctx_mu = PTHREAD_MUTEX_INITIALIZER;

struct CUctx_st *gs_current(void) { return tls_depth > 0 ? tls_stack[tls_depth - 1] : NULL; }

static int ctx_valid(struct CUctx_st *c) { return c != NULL && c->magic == GS_MAGIC_CTX; }

CUresult gs_ctx_ok(struct CUctx_st *c)
{
	if (!ctx_valid(c))
		return CUDA_ERROR_INVALID_CONTEXT;
	int e = atomic_load_explicit(&c->err, memory_order_relaxed);
	return e != 0 ? (CUresult)e : CUDA_SUCCESS;
}

CUresult gs_need_ctx(struct CUctx_st **out)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	struct CUctx_st *c = gs_current();
	if (!ctx_valid(c))
		return CUDA_ERROR_INVALID_CONTEXT;
	*out = c;
	return CUDA_SUCCESS;
}

CUresult gs_resolve_stream(CUstream s, struct CUstream_st **out)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
		struct CUctx_st *c;
		CUresult r = gs_need_ctx(&c);
		if (r != CUDA_SUCCESS)
			return r;
		*out = &c->def;
		return CUDA_SUCCESS;
	}
	if (s->magic != GS_MAGIC_STREAM || !ctx_valid(s->ctx))
		return CUDA_ERROR_INVALID_HANDLE;
	*out = s;
	return CUDA_SUCCESS;
}

/* parse_size reads "512M", "2G", "1.5GB", "1048576" into bytes */
static int parse_size(const char *s, const char **end, uint64_t *out)
{
	char *e;
	double v = strtod(s, &e);
	if (e == s || !(v >= 0))
		return -1;
	double mul = 1;
	switch (toupper((unsigned char)*e)) {
	case 'K': mul = 1024.0; e++; break;
	case 'M': mul = 1024.0 * 1024; e++; break;
	case 'G': mul = 1024.0 * 1024 * 1024; e++; break;
	case 'T': mul = 1024.0 * 1024 * 1024 * 1024; e++; break;
	default: break;
	}
	if (toupper((unsigned char)*e) == 'B')
		e++;
	*out = (uint64_t)(v * mul);
	*end = e;
	return 0;
}

/* env_mem_limit: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=1G,1=512M" for device
 * (simulator index) dev; 0 = no limit. Malformed values are ignored. */
static uint64_t env_mem_limit(int dev)
{
	const char *v = getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT");
	if (v == NULL)
		return 0;
	const char *p = v;
	while (*p != '\0') {
		char *e;
		long d = strtol(p, &e, 10);
		if (e == p || *e != '=')
			return 0;
		const char *after;
		uint64_t bytes;
		if (parse_size(e + 1, &after, &bytes) != 0)
			return 0;
		if (d == dev)
			return bytes;
		if (*after == ',')
			after++;
		else if (*after != '\0')
			return 0;
		p = after;
	}
	return 0;
}

static double env_atp(void)
{
	const char *v = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
	if (v == NULL || *v == '\0')
		return 0;
	char *e;
	double d = strtod(v, &e);
	if (e == v || !(d > 0) || d > 100)
		return 0;
	return d;
}

/* env_priority: GPUSIM_PRIORITY=high|normal|low, read at context creation
 * (not a CUDA variable: the simulator's priority time-sharing baseline) */
static int32_t env_priority(void)
{
	const char *v = getenv("GPUSIM_PRIORITY");
	if (v == NULL)
		return 0;
	if (strcmp(v, "high") == 0)
		return 1;
	if (strcmp(v, "low") == 0)
		return -1;
	return 0;
}

/* env_mps_client_priority: CUDA_MPS_CLIENT_PRIORITY (an MPS client's
 * priority level: 0 NORMAL, 1 BELOW_NORMAL), read at context creation. A
 * below-normal client's pending blocks are dispatched only after normal
 * clients' (sim priority -1 inside its MPS server). */
static int32_t env_mps_client_priority(void)
{
	const char *v = getenv("CUDA_MPS_CLIENT_PRIORITY");
	if (v != NULL && (strcmp(v, "1") == 0 || strcmp(v, "BELOW_NORMAL") == 0))
		return -1;
	return 0;
}

struct CUctx_st *gs_ctx_alloc(CUdevice dev)
{
	struct CUctx_st *c = calloc(1, sizeof *c);
	if (c == NULL)
		return NULL;
	c->magic = GS_MAGIC_CTX;
	/* a context's id is its slot in gs_ctx_by_id, claimed now, so that
	 * notifications find it; slot 0 stays empty */
	c->id = 0;
	for (uint32_t i = 1; i < GS_MAX_CTX && c->id == 0; i++) {
		struct CUctx_st *empty = NULL;
		if (atomic_compare_exchange_strong(&gs_ctx_by_id[i], &empty, c))
			c->id = i;
	}
	if (c->id == 0) {
		free(c);
		return NULL;
	}
	c->dev = dev;
	c->def.magic = GS_MAGIC_STREAM;
	c->def.id = gs_next_id();
	c->def.ctx = c;
	return c;
}

void gs_ctx_unalloc(struct CUctx_st *c)
{
	atomic_store(&gs_ctx_by_id[c->id], NULL);
	free(c);
}

static CUresult ctx_create(struct CUctx_st **out, CUdevice dev, int primary, double atp_req)
{
	CUresult r = gs_init();
	if (r != CUDA_SUCCESS)
		return gs_initialized ? r : CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || dev >= gs_ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	if (gs_mps_server_pid < 0)
		return CUDA_ERROR_MPS_CONNECTION_FAILED;
	struct CUctx_st *c = gs_ctx_alloc(dev);
	if (c == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	c->primary = primary;
	int sim = gs_devs[dev].sim_index;
	struct gs_ctx_create m = {.ctx = c->id, .dev = (uint32_t)sim, .default_stream = c->def.id,
				  .mps_pid = gs_mps_server_pid > 0 ? (uint32_t)gs_mps_server_pid : 0};
	if (gs_mps_server_pid > 0) {
		double env = env_atp();
		m.atp = env;
		if (atp_req > 0 && (m.atp == 0 || atp_req < m.atp))
			m.atp = atp_req;
		m.mem_limit = env_mem_limit(sim);
	}
	m.priority = env_priority();
	if (gs_mps_server_pid > 0 && m.priority == 0)
		m.priority = env_mps_client_priority();
	gs_hdr_fill(&m.h, GS_CTX_CREATE, sizeof m);
	struct gs_ctx_create_reply rep;
	r = gs_call(&m, sizeof m, &rep, sizeof rep);
	if (r != CUDA_SUCCESS) {
		gs_ctx_unalloc(c);
		return r;
	}
	c->mps = gs_mps_server_pid > 0;
	c->atp = rep.atp;
	c->sm_cap = rep.sm_cap;
	*out = c;
	return CUDA_SUCCESS;
}

void gs_ctx_destroy(struct CUctx_st *c)
{
	(void)gs_call_ids(GS_CTX_DESTROY, c->id, 0);
	atomic_store(&gs_ctx_by_id[c->id], NULL);
	c->magic = 0;
	/* never freed: other threads may still hold the pointer; a stale handle
	 * then fails the magic check instead of touching freed memory */
}

GS_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || dev >= gs_ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&gs_ctx_mu);
	struct gs_device *d = &gs_devs[dev];
	CUresult r = CUDA_SUCCESS;
	if (d->primary == NULL)
		r = ctx_create(&d->primary, dev, 1, 0);
	if (r == CUDA_SUCCESS) {
		d->primary_refs++;
		*pctx = d->primary;
	}
	pthread_mutex_unlock(&gs_ctx_mu);
	return r;
}

CUresult gs_primary_release(CUdevice dev, struct CUctx_st *which)
{
	pthread_mutex_lock(&gs_ctx_mu);
	struct gs_device *d = &gs_devs[dev];
	CUresult r = CUDA_SUCCESS;
	if (d->primary_refs <= 0 || (which != NULL && d->primary != which)) {
		r = CUDA_ERROR_INVALID_CONTEXT;
	} else if (--d->primary_refs == 0) {
		gs_ctx_destroy(d->primary);
		d->primary = NULL;
	}
	pthread_mutex_unlock(&gs_ctx_mu);
	return r;
}

GS_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || dev >= gs_ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	return gs_primary_release(dev, NULL);
}

GS_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || dev >= gs_ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&gs_ctx_mu);
	struct gs_device *d = &gs_devs[dev];
	if (d->primary != NULL) {
		gs_ctx_destroy(d->primary);
		d->primary = NULL;
		d->primary_refs = 0;
	}
	pthread_mutex_unlock(&gs_ctx_mu);
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || dev >= gs_ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	if (flags & ~(unsigned)CU_CTX_FLAGS_MASK)
		return CUDA_ERROR_INVALID_VALUE;
	gs_devs[dev].primary_flags = flags;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (flags == NULL || active == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= gs_ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	*flags = gs_devs[dev].primary_flags;
	*active = gs_devs[dev].primary != NULL;
	return CUDA_SUCCESS;
}

static void push(struct CUctx_st *c)
{
	if (tls_depth < GS_CTX_STACK)
		tls_stack[tls_depth++] = c;
	else
		tls_stack[GS_CTX_STACK - 1] = c;
}

static CUresult create_and_push(CUcontext *pctx, unsigned int flags, CUdevice dev, double atp)
{
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (flags & ~(unsigned)CU_CTX_FLAGS_MASK)
		return CUDA_ERROR_INVALID_VALUE;
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	struct CUctx_st *c;
	CUresult r = ctx_create(&c, dev, 0, atp);
	if (r != CUDA_SUCCESS)
		return r;
	push(c);
	*pctx = c;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	return create_and_push(pctx, flags, dev, 0);
}

GS_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n,
				  unsigned int flags, CUdevice dev)
{
	if (n < 0 || (n > 0 && params == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	double atp = 0;
	if (gs_initialized && dev >= 0 && dev < gs_ndev) {
		for (int i = 0; i < n; i++) {
			if (params[i].type != CU_EXEC_AFFINITY_TYPE_SM_COUNT)
				return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
			/* an SM-count affinity is an MPS-only limit, like the real one */
			if (gs_mps_server_pid <= 0)
				return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
			unsigned sms = gs_devs[dev].info.sms;
			unsigned want = params[i].param.smCount.val;
			if (want == 0 || want > sms)
				want = sms;
			atp = 100.0 * want / sms;
		}
	}
	return create_and_push(pctx, flags, dev, atp);
}

void gs_ctx_unstack(struct CUctx_st *c)
{
	for (int i = 0; i < tls_depth; i++)
		if (tls_stack[i] == c)
			tls_stack[i] = NULL;
	while (tls_depth > 0 && tls_stack[tls_depth - 1] == NULL)
		tls_depth--;
}

GS_EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	/* a primary context goes with its last release, a green context's with
	 * cuGreenCtxDestroy */
	if (!ctx_valid(ctx) || ctx->primary || ctx->green != NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	gs_ctx_unstack(ctx);
	gs_ctx_destroy(ctx);
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	push(ctx);
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxPopCurrent(CUcontext *pctx)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (tls_depth == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	struct CUctx_st *c = tls_stack[--tls_depth];
	if (pctx != NULL)
		*pctx = c;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (ctx == NULL) {
		if (tls_depth > 0)
			tls_depth--;
		return CUDA_SUCCESS;
	}
	if (!ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (tls_depth == 0)
		tls_depth = 1;
	tls_stack[tls_depth - 1] = ctx;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = gs_current();
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
	if (device == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUctx_st *c;
	CUresult r = gs_need_ctx(&c);
	if (r != CUDA_SUCCESS)
		return r;
	*device = c->dev;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxSynchronize(void)
{
	struct CUctx_st *c;
	CUresult r = gs_need_ctx(&c);
	if (r != CUDA_SUCCESS)
		return r;
	if ((r = gs_ctx_ok(c)) != CUDA_SUCCESS)
		return r;
	return gs_call_ids(GS_SYNC, GS_SYNC_CONTEXT, c->id);
}
