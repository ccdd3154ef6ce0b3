/* green.c — green contexts (CUDA 12.4): SM resources, their split into groups,
 * resource descriptors, and green contexts made from the primary context.
 *
 * A CUdevResource is plain data the application copies around; the driver keeps
 * what it needs to know about one (which device it describes, which split made
 * it) in the resource's _internal_padding, which is the driver's own. A green
 * context is a context of its own in gpusimd (GS_GREEN_CTX_CREATE) whose kernels
 * may hold at most its SM count (gpusim/sim/green.go); memory, modules and events
 * are process-wide there, so a function got in the primary context launches in a
 * green stream and events order work between the two. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* what the driver keeps in a resource's padding */
struct res_priv {
	uint32_t magic; /* GS_MAGIC_RES: this driver made it */
	int32_t dev;
	uint32_t split; /* 0: a whole device's SMs; else the split that made it */
	uint32_t part;  /* which output of that split: 1.. a group, RES_REMAINDER the rest */
};
#define RES_REMAINDER 0xffffffffu
_Static_assert(sizeof(struct res_priv) <= sizeof(((CUdevResource *)0)->_internal_padding),
	       "the driver's notes must fit the resource's padding");

struct CUdevResourceDesc_st {
	uint32_t magic;
	int dev;
	unsigned int sms;
};

struct CUgreenCtx_st {
	uint32_t magic;
	int dev;
	struct CUctx_st *ctx;     /* its CUcontext (cuCtxFromGreenCtx) */
	struct CUctx_st *primary; /* the primary context it retained */
};

static _Atomic uint32_t split_seq;

/* res_make fills *r with sms SMs of dev, made by the given split and part;
 * everything else is zero, as a real driver's fresh resource */
static void res_make(CUdevResource *r, int dev, unsigned int sms, uint32_t split, uint32_t part)
{
	memset(r, 0, sizeof *r);
	r->type = CU_DEV_RESOURCE_TYPE_SM;
	r->sm.smCount = sms;
	struct res_priv p = {.magic = GS_MAGIC_RES, .dev = dev, .split = split, .part = part};
	memcpy(r->_internal_padding, &p, sizeof p);
}

/* res_read checks that r is an SM resource this driver made and returns its notes */
static CUresult res_read(const CUdevResource *r, struct res_priv *p)
{
	if (r->type != CU_DEV_RESOURCE_TYPE_SM)
		return CUDA_ERROR_INVALID_RESOURCE_TYPE;
	memcpy(p, r->_internal_padding, sizeof *p);
	/* a resource filled in by hand names no device the driver knows of */
	if (p->magic != GS_MAGIC_RES)
		return CUDA_ERROR_INVALID_VALUE;
	if (p->dev < 0 || p->dev >= gs_ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	if (r->sm.smCount > gs_devs[p->dev].info.sms)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDeviceGetDevResource(CUdevice dev, CUdevResource *res, CUdevResourceType type)
{
	CUresult r = gs_dev_ok(dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (res == NULL || type != CU_DEV_RESOURCE_TYPE_SM)
		return CUDA_ERROR_INVALID_VALUE;
	res_make(res, dev, gs_devs[dev].info.sms, 0, 0);
	return CUDA_SUCCESS;
}

/* group_size is the SMs of each group a split by minCount makes on dev: minCount
 * rounded up to the minimum and alignment NVIDIA documents per architecture
 * (compute capability 9.x: at least 8, a multiple of 8; 8.x: at least 4, a
 * multiple of 2; 7.x: at least 2, a multiple of 2 — gpusim has nothing older).
 * Newer than 9.x is taken as 9.x. */
static unsigned int group_size(int dev, unsigned int min_count)
{
	unsigned int cc = gs_devs[dev].info.cc_major, least = 2, step = 2;
	if (cc >= 9)
		least = step = 8;
	else if (cc == 8)
		least = 4;
	unsigned int n = min_count > least ? min_count : least;
	return (n + step - 1) / step * step;
}

GS_EXPORT CUresult cuDevSmResourceSplitByCount(CUdevResource *result, unsigned int *nbGroups,
					       const CUdevResource *input, CUdevResource *remaining,
					       unsigned int useFlags, unsigned int minCount)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	/* CUDA 12.4 defines no flags (12.5's coscheduling flags are not simulated) */
	if (nbGroups == NULL || input == NULL || useFlags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (result != NULL && *nbGroups == 0)
		return CUDA_ERROR_INVALID_VALUE;
	/* the outputs may overlap the input: read it first */
	CUdevResource in = *input;
	struct res_priv p;
	CUresult r = res_read(&in, &p);
	if (r != CUDA_SUCCESS)
		return r;
	/* NVIDIA: a split's results cannot be split again before a green context is made of them */
	if (p.split != 0)
		return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
	unsigned int size = group_size(p.dev, minCount);
	if (size > in.sm.smCount)
		return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
	unsigned int fit = in.sm.smCount / size;
	unsigned int n = result != NULL && *nbGroups < fit ? *nbGroups : fit;
	uint32_t split = atomic_fetch_add(&split_seq, 1) + 1;
	if (split == 0) /* wrapped: 0 means a whole device */
		split = atomic_fetch_add(&split_seq, 1) + 1;
	if (result != NULL)
		for (unsigned int i = 0; i < n; i++)
			res_make(&result[i], p.dev, size, split, i + 1);
	*nbGroups = n;
	if (remaining != NULL)
		res_make(remaining, p.dev, in.sm.smCount - n * size, split, RES_REMAINDER);
	return CUDA_SUCCESS;
}

/* descs_check: resources[0..n) can make one descriptor: SM resources of one
 * device, several only as distinct outputs of one split (NVIDIA: "from the same
 * split"), holding at least one SM together. *sms gets their total. */
static CUresult descs_check(const CUdevResource *res, unsigned int n, int *dev, unsigned int *sms)
{
	struct res_priv first = {0};
	*sms = 0;
	for (unsigned int i = 0; i < n; i++) {
		struct res_priv p;
		CUresult r = res_read(&res[i], &p);
		if (r != CUDA_SUCCESS)
			return r;
		if (i == 0)
			first = p;
		else if (p.dev != first.dev)
			return CUDA_ERROR_INVALID_VALUE;
		else if (p.split == 0 || p.split != first.split)
			return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
		for (unsigned int j = 0; j < i; j++) {
			struct res_priv q;
			memcpy(&q, res[j]._internal_padding, sizeof q);
			if (q.part == p.part)
				return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION; /* the same SMs twice */
		}
		*sms += res[i].sm.smCount;
	}
	if (*sms == 0 || *sms > gs_devs[first.dev].info.sms)
		return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
	*dev = first.dev;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuDevResourceGenerateDesc(CUdevResourceDesc *phDesc, CUdevResource *resources,
					     unsigned int nbResources)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (phDesc == NULL || resources == NULL || nbResources == 0)
		return CUDA_ERROR_INVALID_VALUE;
	int dev;
	unsigned int sms;
	CUresult r = descs_check(resources, nbResources, &dev, &sms);
	if (r != CUDA_SUCCESS)
		return r;
	/* the API has no destroy for descriptors: the driver owns them for the process's life */
	struct CUdevResourceDesc_st *d = malloc(sizeof *d);
	if (d == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*d = (struct CUdevResourceDesc_st){.magic = GS_MAGIC_DESC, .dev = dev, .sms = sms};
	*phDesc = d;
	return CUDA_SUCCESS;
}

static int green_valid(CUgreenCtx g) { return g != NULL && g->magic == GS_MAGIC_GREEN; }

/* green_open asks gpusimd for context c, a green child of primary with sms SMs,
 * and takes the limits in effect from its answer */
static CUresult green_open(struct CUctx_st *c, struct CUctx_st *primary, unsigned int sms)
{
	struct gs_green_ctx_create m = {.ctx = c->id, .parent = primary->id, .default_stream = c->def.id,
					.sm_count = sms};
	gs_hdr_fill(&m.h, GS_GREEN_CTX_CREATE, sizeof m);
	struct gs_ctx_create_reply rep;
	CUresult r = gs_call(&m, sizeof m, &rep, sizeof rep);
	if (r != CUDA_SUCCESS)
		return r;
	c->mps = primary->mps;
	c->atp = rep.atp;
	c->sm_cap = rep.sm_cap;
	return CUDA_SUCCESS;
}

/* green_new makes green context g on dev under primary: its context in gpusimd */
static CUresult green_new(struct CUgreenCtx_st **out, CUdevice dev, struct CUctx_st *primary, unsigned int sms)
{
	struct CUgreenCtx_st *g = calloc(1, sizeof *g);
	struct CUctx_st *c = g != NULL ? gs_ctx_alloc(dev) : NULL;
	if (c == NULL) {
		free(g);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	CUresult r = green_open(c, primary, sms);
	if (r != CUDA_SUCCESS) {
		gs_ctx_unalloc(c);
		free(g);
		return r;
	}
	c->green = g;
	*g = (struct CUgreenCtx_st){.magic = GS_MAGIC_GREEN, .dev = dev, .ctx = c, .primary = primary};
	*out = g;
	return CUDA_SUCCESS;
}

/* Flags: NVIDIA's 12.4 documentation calls CU_GREEN_CTX_DEFAULT_STREAM required;
 * the fake takes 0 as well, and the context has its default stream either way
 * (gpusimd's contexts always do). */
GS_EXPORT CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags)
{
	CUresult r = gs_dev_ok(dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (phCtx == NULL || desc == NULL || desc->magic != GS_MAGIC_DESC || (flags & ~(unsigned)CU_GREEN_CTX_DEFAULT_STREAM))
		return CUDA_ERROR_INVALID_VALUE;
	if (desc->dev != dev) /* the descriptor's SMs are another device's */
		return CUDA_ERROR_INVALID_VALUE;
	/* a green context lives inside the primary context: retained for its life */
	CUcontext primary;
	if ((r = cuDevicePrimaryCtxRetain(&primary, dev)) != CUDA_SUCCESS)
		return r;
	if ((r = gs_ctx_ok(primary)) == CUDA_SUCCESS)
		r = green_new(phCtx, dev, primary, desc->sms);
	if (r != CUDA_SUCCESS)
		(void)gs_primary_release(dev, primary);
	return r;
}

GS_EXPORT CUresult cuGreenCtxDestroy(CUgreenCtx g)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!green_valid(g))
		return CUDA_ERROR_INVALID_HANDLE;
	g->magic = 0;
	gs_ctx_unstack(g->ctx);
	gs_ctx_destroy(g->ctx); /* waits for its work, as cuCtxDestroy */
	/* a primary context reset meanwhile took the retain with it */
	(void)gs_primary_release(g->dev, g->primary);
	/* never freed, as contexts: a stale handle fails the magic check */
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx g)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (pContext == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!green_valid(g))
		return CUDA_ERROR_INVALID_HANDLE;
	*pContext = g->ctx;
	return CUDA_SUCCESS;
}

/* The priority is accepted and not modelled, as cuStreamCreateWithPriority's. */
GS_EXPORT CUresult cuGreenCtxStreamCreate(CUstream *phStream, CUgreenCtx g, unsigned int flags, int priority)
{
	(void)priority;
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	/* NVIDIA requires a non-blocking stream: a green context's streams do not
	 * synchronise with the legacy NULL stream */
	if (phStream == NULL || flags != CU_STREAM_NON_BLOCKING)
		return CUDA_ERROR_INVALID_VALUE;
	if (!green_valid(g))
		return CUDA_ERROR_INVALID_HANDLE;
	return gs_stream_create_in(g->ctx, phStream);
}
