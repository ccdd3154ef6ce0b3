/* memory.c — device memory (accounted by gpusimd), host memory, pools,
 * virtual memory management, copies and memsets. Data is not moved: the
 * simulated GPU has no bytes, only sizes and times. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- local table of live allocations, for address lookups ---- */
struct gs_alloc {
	uint64_t ptr, size;
};
static struct gs_alloc *tab;
static size_t ntab, captab;
static pthread_mutex_t tab_mu = PTHREAD_MUTEX_INITIALIZER;

void gs_alloc_track(uint64_t ptr, uint64_t size)
{
	pthread_mutex_lock(&tab_mu);
	if (ntab == captab) {
		size_t cap = captab ? 2 * captab : 64;
		struct gs_alloc *p = realloc(tab, cap * sizeof *p);
		if (p == NULL) {
			pthread_mutex_unlock(&tab_mu);
			return;
		}
		tab = p;
		captab = cap;
	}
	tab[ntab].ptr = ptr;
	tab[ntab].size = size;
	ntab++;
	pthread_mutex_unlock(&tab_mu);
}

int gs_alloc_lookup(uint64_t ptr, uint64_t *base, uint64_t *size)
{
	int found = 0;
	pthread_mutex_lock(&tab_mu);
	for (size_t i = 0; i < ntab; i++) {
		if (ptr >= tab[i].ptr && ptr < tab[i].ptr + tab[i].size) {
			if (base)
				*base = tab[i].ptr;
			if (size)
				*size = tab[i].size;
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&tab_mu);
	return found;
}

int gs_alloc_untrack(uint64_t ptr)
{
	int found = 0;
	pthread_mutex_lock(&tab_mu);
	for (size_t i = 0; i < ntab; i++) {
		if (tab[i].ptr == ptr) {
			tab[i] = tab[--ntab];
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&tab_mu);
	return found;
}

static CUresult dev_alloc(CUdeviceptr *out, uint64_t bytes)
{
	struct CUctx_st *c;
	CUresult r = gs_need_ctx(&c);
	if (r != CUDA_SUCCESS)
		return r;
	if (bytes == 0)
		return CUDA_ERROR_INVALID_VALUE;
	struct gs_mem_alloc m = {.ctx = c->id, .bytes = bytes};
	gs_hdr_fill(&m.h, GS_MEM_ALLOC, sizeof m);
	struct gs_mem_alloc_reply rep;
	r = gs_call(&m, sizeof m, &rep, sizeof rep);
	if (r != CUDA_SUCCESS)
		return r;
	gs_alloc_track(rep.ptr, bytes);
	*out = rep.ptr;
	return CUDA_SUCCESS;
}

static CUresult dev_free(uint64_t ptr)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (ptr == 0)
		return CUDA_SUCCESS;
	struct gs_mem_free m = {.ptr = ptr};
	gs_hdr_fill(&m.h, GS_MEM_FREE, sizeof m);
	struct gs_reply rep;
	CUresult r = gs_call(&m, sizeof m, &rep, sizeof rep);
	if (r == CUDA_SUCCESS)
		gs_alloc_untrack(ptr);
	return r;
}

GS_EXPORT CUresult cuMemGetInfo(size_t *free_b, size_t *total)
{
	if (free_b == NULL || total == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUctx_st *c;
	CUresult r = gs_need_ctx(&c);
	if (r != CUDA_SUCCESS)
		return r;
	struct gs_u32x2 m = {.a = c->id};
	gs_hdr_fill(&m.h, GS_MEM_INFO, sizeof m);
	struct gs_mem_info_reply rep;
	r = gs_call(&m, sizeof m, &rep, sizeof rep);
	if (r != CUDA_SUCCESS)
		return r;
	*free_b = rep.free;
	*total = rep.total;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemAlloc(CUdeviceptr *dptr, size_t bytes)
{
	if (dptr == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return dev_alloc(dptr, bytes);
}

GS_EXPORT CUresult cuMemAllocPitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
				   unsigned int elem)
{
	if (dptr == NULL || pitch == NULL || width == 0 || height == 0 || (elem != 4 && elem != 8 && elem != 16))
		return CUDA_ERROR_INVALID_VALUE;
	size_t p = (width + 511) & ~(size_t)511;
	if (height > SIZE_MAX / p)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = dev_alloc(dptr, (uint64_t)p * height);
	if (r == CUDA_SUCCESS)
		*pitch = p;
	return r;
}

GS_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags)
{
	if (dptr == NULL || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
		return CUDA_ERROR_INVALID_VALUE;
	return dev_alloc(dptr, bytes);
}

GS_EXPORT CUresult cuMemFree(CUdeviceptr p) { return dev_free(p); }

GS_EXPORT CUresult cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	uint64_t b, s;
	if (!gs_alloc_lookup(p, &b, &s))
		return CUDA_ERROR_NOT_FOUND;
	if (base)
		*base = b;
	if (size)
		*size = s;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemAllocHost(void **pp, size_t bytes)
{
	if (pp == NULL || bytes == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	*pp = malloc(bytes);
	return *pp ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

GS_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytes, unsigned int flags)
{
	if (flags & ~0x7u)
		return CUDA_ERROR_INVALID_VALUE;
	return cuMemAllocHost(pp, bytes);
}

GS_EXPORT CUresult cuMemFreeHost(void *p)
{
	free(p);
	return CUDA_SUCCESS;
}

/* stream-ordered allocation: accounted at once (the simulated pool never
 * caches), freed at once */
GS_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream hs)
{
	if (dptr == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUstream_st *s;
	CUresult r = gs_resolve_stream(hs, &s);
	if (r != CUDA_SUCCESS)
		return r;
	return dev_alloc(dptr, bytes);
}

GS_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUstream hs)
{
	return cuMemAllocAsync(dptr, bytes, hs);
}

GS_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream hs)
{
	if (pool == NULL || pool->magic != GS_MAGIC_POOL)
		return CUDA_ERROR_INVALID_VALUE;
	return cuMemAllocAsync(dptr, bytes, hs);
}

GS_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream hs)
{
	return cuMemAllocFromPoolAsync(dptr, bytes, pool, hs);
}

GS_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream hs)
{
	struct CUstream_st *s;
	CUresult r = gs_resolve_stream(hs, &s);
	if (r != CUDA_SUCCESS)
		return r;
	return dev_free(p);
}

GS_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream hs) { return cuMemFreeAsync(p, hs); }

static struct CUmemPoolHandle_st default_pools[GS_MAX_DEVICES];

GS_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *out, CUdevice dev)
{
	if (out == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || dev >= gs_ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	default_pools[dev].magic = GS_MAGIC_POOL;
	default_pools[dev].dev = dev;
	*out = &default_pools[dev];
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *out, const CUmemPoolProps *props)
{
	if (out == NULL || props == NULL || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (props->location.id < 0 || props->location.id >= gs_ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
	if (p == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	p->magic = GS_MAGIC_POOL;
	p->dev = props->location.id;
	*out = p;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool p)
{
	if (p == NULL || p->magic != GS_MAGIC_POOL)
		return CUDA_ERROR_INVALID_VALUE;
	if (p >= default_pools && p < default_pools + GS_MAX_DEVICES)
		return CUDA_ERROR_INVALID_VALUE;
	p->magic = 0;
	free(p);
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool p, size_t keep)
{
	(void)keep;
	if (p == NULL || p->magic != GS_MAGIC_POOL)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

/* ---- virtual memory management: cuMemCreate accounts the memory, the
 * address reservations and mappings are bookkeeping only ---- */
#define GS_GRANULARITY (2u << 20)
static _Atomic uint64_t va_next = 0x600000000000ull;

static int prop_ok(const CUmemAllocationProp *prop)
{
	return prop != NULL && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
	       prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && prop->location.id >= 0 &&
	       prop->location.id < gs_ndev;
}

GS_EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
						 CUmemAllocationGranularity_flags option)
{
	if (g == NULL || option > CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
		return CUDA_ERROR_INVALID_VALUE;
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!prop_ok(prop))
		return CUDA_ERROR_INVALID_VALUE;
	*g = GS_GRANULARITY;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
			       unsigned long long flags)
{
	if (h == NULL || flags != 0 || size == 0 || size % GS_GRANULARITY != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!prop_ok(prop))
		return CUDA_ERROR_INVALID_VALUE;
	CUdeviceptr p;
	CUresult r = dev_alloc(&p, size);
	if (r == CUDA_SUCCESS)
		*h = p;
	return r;
}

GS_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
	if (h == 0)
		return CUDA_ERROR_INVALID_VALUE;
	return dev_free(h);
}

GS_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
				       unsigned long long flags)
{
	(void)addr;
	if (ptr == NULL || size == 0 || flags != 0 || size % GS_GRANULARITY != 0 ||
	    (align != 0 && (align & (align - 1)) != 0))
		return CUDA_ERROR_INVALID_VALUE;
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	uint64_t a = align > GS_GRANULARITY ? align : GS_GRANULARITY;
	uint64_t base = atomic_fetch_add(&va_next, size + a);
	*ptr = (base + a - 1) & ~(a - 1);
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	if (ptr == 0 || size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
			    unsigned long long flags)
{
	if (ptr == 0 || size == 0 || h == 0 || flags != 0 || offset != 0)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t b, s;
	if (!gs_alloc_lookup(h, &b, &s) || b != h || size > s)
		return CUDA_ERROR_INVALID_HANDLE;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	return ptr == 0 || size == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

GS_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	if (ptr == 0 || size == 0 || desc == NULL || count == 0)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

/* ---- copies and memsets ---- */

static uint32_t kind_of(CUdeviceptr dst, CUdeviceptr src)
{
	int d = gs_alloc_lookup(dst, NULL, NULL), s = gs_alloc_lookup(src, NULL, NULL);
	if (d && s)
		return GS_COPY_D2D;
	if (d)
		return GS_COPY_H2D;
	if (s)
		return GS_COPY_D2H;
	return GS_COPY_D2D;
}

GS_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return gs_copy(NULL, kind_of(dst, src), n, 1);
}

GS_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream hs)
{
	return gs_copy(hs, kind_of(dst, src), n, 0);
}

GS_EXPORT CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n)
{
	if (dst == 0 || (src == NULL && n > 0))
		return CUDA_ERROR_INVALID_VALUE;
	return gs_copy(NULL, GS_COPY_H2D, n, 1);
}

GS_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n)
{
	return cuMemcpyHtoD(dst, src, n);
}

GS_EXPORT CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n)
{
	if (src == 0 || (dst == NULL && n > 0))
		return CUDA_ERROR_INVALID_VALUE;
	return gs_copy(NULL, GS_COPY_D2H, n, 1);
}

GS_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n) { return cuMemcpyDtoH(dst, src, n); }

GS_EXPORT CUresult cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	if (dst == 0 || src == 0)
		return CUDA_ERROR_INVALID_VALUE;
	return gs_copy(NULL, GS_COPY_D2D, n, 1);
}

GS_EXPORT CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream hs)
{
	if (dst == 0 || (src == NULL && n > 0))
		return CUDA_ERROR_INVALID_VALUE;
	return gs_copy(hs, GS_COPY_H2D, n, 0);
}

GS_EXPORT CUresult cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream hs)
{
	if (src == 0 || (dst == NULL && n > 0))
		return CUDA_ERROR_INVALID_VALUE;
	return gs_copy(hs, GS_COPY_D2H, n, 0);
}

GS_EXPORT CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream hs)
{
	if (dst == 0 || src == 0)
		return CUDA_ERROR_INVALID_VALUE;
	return gs_copy(hs, GS_COPY_D2D, n, 0);
}

GS_EXPORT CUresult cuMemsetD8(CUdeviceptr p, unsigned char v, size_t n)
{
	(void)v;
	return p == 0 ? CUDA_ERROR_INVALID_VALUE : gs_copy(NULL, GS_COPY_MEMSET, n, 1);
}

GS_EXPORT CUresult cuMemsetD16(CUdeviceptr p, unsigned short v, size_t n)
{
	(void)v;
	return p == 0 ? CUDA_ERROR_INVALID_VALUE : gs_copy(NULL, GS_COPY_MEMSET, 2 * (uint64_t)n, 1);
}

GS_EXPORT CUresult cuMemsetD32(CUdeviceptr p, unsigned int v, size_t n)
{
	(void)v;
	return p == 0 ? CUDA_ERROR_INVALID_VALUE : gs_copy(NULL, GS_COPY_MEMSET, 4 * (uint64_t)n, 1);
}

GS_EXPORT CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream hs)
{
	(void)v;
	return p == 0 ? CUDA_ERROR_INVALID_VALUE : gs_copy(hs, GS_COPY_MEMSET, n, 0);
}

GS_EXPORT CUresult cuMemsetD32Async(CUdeviceptr p, unsigned int v, size_t n, CUstream hs)
{
	(void)v;
	return p == 0 ? CUDA_ERROR_INVALID_VALUE : gs_copy(hs, GS_COPY_MEMSET, 4 * (uint64_t)n, 0);
}

/* arrays are accounted as plain allocations */
static uint64_t fmt_bytes(CUarray_format f)
{
	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8: return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF: return 2;
	case CU_AD_FORMAT_UNSIGNED_INT32:
	case CU_AD_FORMAT_SIGNED_INT32:
	case CU_AD_FORMAT_FLOAT: return 4;
	}
	return 0;
}

static CUresult array_alloc(CUarray *ph, uint64_t w, uint64_t h, uint64_t d, CUarray_format f, unsigned ch)
{
	uint64_t e = fmt_bytes(f);
	if (ph == NULL || w == 0 || e == 0 || (ch != 1 && ch != 2 && ch != 4))
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t bytes = w * (h ? h : 1) * (d ? d : 1) * e * ch;
	CUdeviceptr p;
	CUresult r = dev_alloc(&p, bytes);
	if (r == CUDA_SUCCESS)
		*ph = (CUarray)(uintptr_t)p;
	return r;
}

GS_EXPORT CUresult cuArrayCreate(CUarray *ph, const CUDA_ARRAY_DESCRIPTOR *a)
{
	if (a == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return array_alloc(ph, a->Width, a->Height, 0, a->Format, a->NumChannels);
}

GS_EXPORT CUresult cuArray3DCreate(CUarray *ph, const CUDA_ARRAY3D_DESCRIPTOR *a)
{
	if (a == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return array_alloc(ph, a->Width, a->Height, a->Depth, a->Format, a->NumChannels);
}

GS_EXPORT CUresult cuArrayDestroy(CUarray h)
{
	if (h == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	return dev_free((uint64_t)(uintptr_t)h);
}
