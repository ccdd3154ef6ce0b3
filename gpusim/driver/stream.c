/* stream.c — streams, events, stream capture and graphs. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static CUresult stream_create(CUstream *ph, unsigned int flags)
{
	if (ph == NULL || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	struct CUctx_st *c;
	CUresult r = gs_need_ctx(&c);
	if (r != CUDA_SUCCESS)
		return r;
	return gs_stream_create_in(c, ph);
}

CUresult gs_stream_create_in(struct CUctx_st *c, CUstream *ph)
{
	CUresult r = gs_ctx_ok(c);
	if (r != CUDA_SUCCESS)
		return r;
	struct CUstream_st *s = calloc(1, sizeof *s);
	if (s == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	s->magic = GS_MAGIC_STREAM;
	s->id = gs_next_id();
	s->ctx = c;
	if ((r = gs_send_ids(GS_STREAM_CREATE, c->id, s->id)) != CUDA_SUCCESS) {
		free(s);
		return r;
	}
	*ph = s;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuStreamCreate(CUstream *ph, unsigned int flags) { return stream_create(ph, flags); }

GS_EXPORT CUresult cuStreamCreateWithPriority(CUstream *ph, unsigned int flags, int priority)
{
	(void)priority; /* priorities are accepted but not modelled */
	return stream_create(ph, flags);
}

GS_EXPORT CUresult cuStreamDestroy(CUstream hs)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (hs == NULL || hs == CU_STREAM_LEGACY || hs == CU_STREAM_PER_THREAD || hs->magic != GS_MAGIC_STREAM)
		return CUDA_ERROR_INVALID_HANDLE;
	hs->magic = 0;
	return gs_send_ids(GS_STREAM_DESTROY, hs->id, 0);
}

GS_EXPORT CUresult cuStreamSynchronize(CUstream hs)
{
	struct CUstream_st *s;
	CUresult r = gs_resolve_stream(hs, &s);
	if (r != CUDA_SUCCESS)
		return r;
	if ((r = gs_ctx_ok(s->ctx)) != CUDA_SUCCESS)
		return r;
	if (s->capture != NULL)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	return gs_call_ids(GS_SYNC, GS_SYNC_STREAM, s->id);
}

GS_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hs) { return cuStreamSynchronize(hs); }

GS_EXPORT CUresult cuStreamQuery(CUstream hs)
{
	struct CUstream_st *s;
	CUresult r = gs_resolve_stream(hs, &s);
	if (r != CUDA_SUCCESS)
		return r;
	if ((r = gs_ctx_ok(s->ctx)) != CUDA_SUCCESS)
		return r;
	return gs_call_ids(GS_QUERY, GS_SYNC_STREAM, s->id);
}

GS_EXPORT CUresult cuStreamWaitEvent(CUstream hs, CUevent ev, unsigned int flags)
{
	struct CUstream_st *s;
	CUresult r = gs_resolve_stream(hs, &s);
	if (r != CUDA_SUCCESS)
		return r;
	if (ev == NULL || ev->magic != GS_MAGIC_EVENT || flags > 1)
		return CUDA_ERROR_INVALID_HANDLE;
	if (s->capture != NULL)
		return CUDA_SUCCESS; /* dependencies inside a capture are implicit in node order */
	return gs_send_ids(GS_STREAM_WAIT_EVENT, s->id, ev->id);
}

GS_EXPORT CUresult cuEventCreate(CUevent *ph, unsigned int flags)
{
	if (ph == NULL || (flags & ~0xfu))
		return CUDA_ERROR_INVALID_VALUE;
	struct CUctx_st *c;
	CUresult r = gs_need_ctx(&c);
	if (r != CUDA_SUCCESS)
		return r;
	struct CUevent_st *e = calloc(1, sizeof *e);
	if (e == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->magic = GS_MAGIC_EVENT;
	e->id = gs_next_id();
	e->ctx = c;
	e->flags = flags;
	if ((r = gs_send_ids(GS_EVENT_CREATE, c->id, e->id)) != CUDA_SUCCESS) {
		free(e);
		return r;
	}
	gs_event_claim(e);
	*ph = e;
	return CUDA_SUCCESS;
}

static CUresult event_ok(CUevent ev)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (ev == NULL || ev->magic != GS_MAGIC_EVENT)
		return CUDA_ERROR_INVALID_HANDLE;
	return gs_ctx_ok(ev->ctx);
}

GS_EXPORT CUresult cuEventRecord(CUevent ev, CUstream hs)
{
	CUresult r = event_ok(ev);
	if (r != CUDA_SUCCESS)
		return r;
	struct CUstream_st *s;
	if ((r = gs_resolve_stream(hs, &s)) != CUDA_SUCCESS)
		return r;
	if (s->capture != NULL)
		return CUDA_SUCCESS;
	gs_event_recording(ev);
	return gs_send_ids(GS_EVENT_RECORD, ev->id, s->id);
}

GS_EXPORT CUresult cuEventQuery(CUevent ev)
{
	CUresult r = event_ok(ev);
	if (r != CUDA_SUCCESS)
		return r;
	double at;
	int done = gs_event_local(ev, &at);
	if (done >= 0) /* a sticky error read meanwhile comes first */
		return (r = gs_ctx_ok(ev->ctx)) != CUDA_SUCCESS ? r : done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
	return gs_call_ids(GS_QUERY, GS_SYNC_EVENT, ev->id);
}

GS_EXPORT CUresult cuEventSynchronize(CUevent ev)
{
	CUresult r = event_ok(ev);
	if (r == CUDA_SUCCESS && (r = gs_call_ids(GS_SYNC, GS_SYNC_EVENT, ev->id)) == CUDA_SUCCESS)
		gs_event_synced(ev);
	return r;
}

GS_EXPORT CUresult cuEventDestroy(CUevent ev)
{
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (ev == NULL || ev->magic != GS_MAGIC_EVENT)
		return CUDA_ERROR_INVALID_HANDLE;
	ev->magic = 0;
	gs_event_release(ev);
	return gs_send_ids(GS_EVENT_DESTROY, ev->id, 0);
}

GS_EXPORT CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
	if (ms == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = event_ok(a);
	if (r == CUDA_SUCCESS)
		r = event_ok(b);
	if (r != CUDA_SUCCESS)
		return r;
	if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING)
		return CUDA_ERROR_INVALID_HANDLE;
	double ta, tb;
	if (gs_event_local(a, &ta) == 1 && gs_event_local(b, &tb) == 1 && gs_ctx_ok(a->ctx) == CUDA_SUCCESS) {
		*ms = (float)((tb - ta) / 1e6); /* as gpusimd computes it */
		return CUDA_SUCCESS;
	}
	struct gs_u32x2 m = {.a = a->id, .b = b->id};
	gs_hdr_fill(&m.h, GS_EVENT_ELAPSED, sizeof m);
	struct gs_elapsed_reply rep;
	r = gs_call(&m, sizeof m, &rep, sizeof rep);
	if (r == CUDA_SUCCESS)
		*ms = rep.ms;
	return r;
}

/* ---- capture and graphs ---- */

static struct CUgraph_st *graph_new(void)
{
	struct CUgraph_st *g = calloc(1, sizeof *g);
	if (g != NULL)
		g->magic = GS_MAGIC_GRAPH;
	return g;
}

static struct CUgraphNode_st *graph_append(struct CUgraph_st *g, const struct gs_node *n)
{
	if (g->n == g->cap) {
		size_t cap = g->cap ? 2 * g->cap : 16;
		struct CUgraphNode_st **p = realloc(g->nodes, cap * sizeof *p);
		if (p == NULL)
			return NULL;
		g->nodes = p;
		g->cap = cap;
	}
	struct CUgraphNode_st *nd = calloc(1, sizeof *nd);
	if (nd == NULL)
		return NULL;
	nd->magic = GS_MAGIC_NODE;
	nd->g = g;
	nd->n = *n;
	g->nodes[g->n++] = nd;
	g->live++;
	return nd;
}

int gs_graph_add(struct CUgraph_st *g, const struct gs_node *n);
int gs_graph_add(struct CUgraph_st *g, const struct gs_node *n) { return graph_append(g, n) != NULL ? 0 : -1; }

static void graph_free(struct CUgraph_st *g)
{
	g->magic = 0;
	for (size_t i = 0; i < g->n; i++) {
		g->nodes[i]->magic = 0;
		free(g->nodes[i]);
	}
	free(g->nodes);
	free(g);
}

static int graph_valid(CUgraph g) { return g != NULL && g->magic == GS_MAGIC_GRAPH; }
static int node_valid(CUgraphNode nd) { return nd != NULL && nd->magic == GS_MAGIC_NODE && !nd->dead; }

GS_EXPORT CUresult cuStreamBeginCapture(CUstream hs, CUstreamCaptureMode mode)
{
	if (mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	/* the legacy NULL stream cannot be captured */
	if (hs == NULL || hs == CU_STREAM_LEGACY)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	struct CUstream_st *s;
	CUresult r = gs_resolve_stream(hs, &s);
	if (r != CUDA_SUCCESS)
		return r;
	if (s->capture != NULL)
		return CUDA_ERROR_ILLEGAL_STATE;
	if ((s->capture = graph_new()) == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuStreamEndCapture(CUstream hs, CUgraph *pg)
{
	if (pg == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUstream_st *s;
	CUresult r = gs_resolve_stream(hs, &s);
	if (r != CUDA_SUCCESS)
		return r;
	if (s->capture == NULL)
		return CUDA_ERROR_ILLEGAL_STATE;
	*pg = s->capture;
	s->capture = NULL;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuStreamIsCapturing(CUstream hs, CUstreamCaptureStatus *st)
{
	if (st == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUstream_st *s;
	CUresult r = gs_resolve_stream(hs, &s);
	if (r != CUDA_SUCCESS)
		return r;
	*st = s->capture != NULL ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuGraphCreate(CUgraph *pg, unsigned int flags)
{
	if (pg == NULL || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!gs_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if ((*pg = graph_new()) == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuGraphDestroy(CUgraph g)
{
	if (!graph_valid(g))
		return CUDA_ERROR_INVALID_VALUE;
	graph_free(g);
	return CUDA_SUCCESS;
}

/* the live nodes in their order; with out NULL, how many (the driver's convention) */
GS_EXPORT CUresult cuGraphGetNodes(CUgraph g, CUgraphNode *out, size_t *num)
{
	if (!graph_valid(g) || num == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (out == NULL) {
		*num = g->live;
		return CUDA_SUCCESS;
	}
	size_t k = 0;
	for (size_t i = 0; i < g->n && k < *num; i++)
		if (!g->nodes[i]->dead)
			out[k++] = g->nodes[i];
	for (size_t i = k; i < *num; i++)
		out[i] = NULL;
	*num = k;
	return CUDA_SUCCESS;
}

/* each live node depends on the live node before it */
GS_EXPORT CUresult cuGraphGetEdges(CUgraph g, CUgraphNode *from, CUgraphNode *to, size_t *num)
{
	if (!graph_valid(g) || num == NULL || (from == NULL) != (to == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	size_t edges = g->live > 0 ? g->live - 1 : 0;
	if (from == NULL) {
		*num = edges;
		return CUDA_SUCCESS;
	}
	size_t k = 0;
	struct CUgraphNode_st *prev = NULL;
	for (size_t i = 0; i < g->n && k < *num; i++) {
		if (g->nodes[i]->dead)
			continue;
		if (prev != NULL) {
			from[k] = prev;
			to[k] = g->nodes[i];
			k++;
		}
		prev = g->nodes[i];
	}
	for (size_t i = k; i < *num; i++)
		from[i] = to[i] = NULL;
	*num = k;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuGraphNodeGetType(CUgraphNode nd, CUgraphNodeType *type)
{
	if (!node_valid(nd) || type == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!nd->n.is_copy)
		*type = CU_GRAPH_NODE_TYPE_KERNEL;
	else
		*type = nd->n.kind == GS_COPY_MEMSET ? CU_GRAPH_NODE_TYPE_MEMSET : CU_GRAPH_NODE_TYPE_MEMCPY;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuGraphClone(CUgraph *out, CUgraph g)
{
	if (out == NULL || !graph_valid(g))
		return CUDA_ERROR_INVALID_VALUE;
	struct CUgraph_st *c = graph_new();
	if (c == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < g->n; i++) {
		if (g->nodes[i]->dead)
			continue;
		g->nodes[i]->clone_g = c;
		if ((g->nodes[i]->clone = graph_append(c, &g->nodes[i]->n)) == NULL) {
			graph_free(c);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	*out = c;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuGraphNodeFindInClone(CUgraphNode *out, CUgraphNode orig, CUgraph clone)
{
	if (out == NULL || !node_valid(orig) || !graph_valid(clone))
		return CUDA_ERROR_INVALID_VALUE;
	/* only the latest clone is remembered, which is how clones are searched: one at a time */
	if (orig->clone == NULL || orig->clone_g != clone)
		return CUDA_ERROR_INVALID_VALUE;
	*out = orig->clone;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuGraphDestroyNode(CUgraphNode nd)
{
	if (!node_valid(nd))
		return CUDA_ERROR_INVALID_VALUE;
	nd->dead = 1;
	nd->g->live--;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuGraphInstantiate(CUgraphExec *pe, CUgraph g, unsigned long long flags)
{
	(void)flags;
	if (pe == NULL || g == NULL || g->magic != GS_MAGIC_GRAPH)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUgraphExec_st *e = calloc(1, sizeof *e);
	if (e == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->magic = GS_MAGIC_EXEC;
	if (g->live > 0) {
		e->nodes = malloc(g->live * sizeof *e->nodes);
		if (e->nodes == NULL) {
			free(e);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		for (size_t i = 0; i < g->n; i++)
			if (!g->nodes[i]->dead)
				e->nodes[e->n++] = g->nodes[i]->n;
	}
	*pe = e;
	return CUDA_SUCCESS;
}

/* The fake keeps no memory contents, so new parameters for a memset node are only checked:
 * the node must be a memset, and the parameters a memset the driver would take. */
GS_EXPORT CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec e, CUgraphNode nd,
						  const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
	(void)ctx;
	if (e == NULL || e->magic != GS_MAGIC_EXEC || !node_valid(nd) || p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!nd->n.is_copy || nd->n.kind != GS_COPY_MEMSET || p->dst == 0 || p->width == 0 ||
	    p->height == 0 || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

GS_EXPORT CUresult cuGraphExecDestroy(CUgraphExec e)
{
	if (e == NULL || e->magic != GS_MAGIC_EXEC)
		return CUDA_ERROR_INVALID_VALUE;
	e->magic = 0;
	free(e->nodes);
	free(e);
	return CUDA_SUCCESS;
}

/* a graph launch sends all its nodes in one write */
GS_EXPORT CUresult cuGraphLaunch(CUgraphExec e, CUstream hs)
{
	if (e == NULL || e->magic != GS_MAGIC_EXEC)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUstream_st *s;
	CUresult r = gs_resolve_stream(hs, &s);
	if (r != CUDA_SUCCESS)
		return r;
	if ((r = gs_ctx_ok(s->ctx)) != CUDA_SUCCESS)
		return r;
	if (e->n == 0)
		return CUDA_SUCCESS;
	size_t per = sizeof(struct gs_launch) > sizeof(struct gs_copy) ? sizeof(struct gs_launch) : sizeof(struct gs_copy);
	char *buf = malloc(e->n * per);
	if (buf == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	size_t off = 0;
	for (size_t i = 0; i < e->n; i++) {
		const struct gs_node *n = &e->nodes[i];
		if (n->is_copy) {
			struct gs_copy m = {.stream = s->id, .kind = n->kind, .bytes = n->bytes};
			gs_hdr_fill(&m.h, GS_COPY, sizeof m);
			memcpy(buf + off, &m, sizeof m);
			off += sizeof m;
		} else {
			struct gs_launch m = {.stream = s->id, .func = n->func};
			memcpy(m.grid, n->grid, sizeof m.grid);
			memcpy(m.block, n->block, sizeof m.block);
			gs_hdr_fill(&m.h, GS_LAUNCH, sizeof m);
			memcpy(buf + off, &m, sizeof m);
			off += sizeof m;
		}
	}
	r = gs_send(buf, (uint32_t)off);
	free(buf);
	return r;
}

GS_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream hs) { return cuGraphLaunch(e, hs); }
