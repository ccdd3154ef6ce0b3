/* graph.c — CUDA graphs: their launches, and long graphs of an offline process
 * launched in chunks.
 *
 * The gate sees a cuGraphLaunch as one launch, so the hold and the bounded queue act
 * only between graphs: a job whose step is one graph of 25 ms kept its kernels queued
 * through every online request that arrived meanwhile (docs/results.md,
 * t4-graph-fill). So when an offline process (signal role follow) instantiates a graph
 * whose nodes are kernels, copies and memsets (or empty), libxcuda also instantiates it
 * in chunks of consecutive nodes, in a topological order, each a clone of the graph with
 * the other nodes destroyed. While online work is recent on its GPU (xc_signal_bounds) a
 * launch of that graph is its chunks, in order on the same stream and in groups of about
 * the queue budget of GPU time, each group held and bounded by the gate as a launch is;
 * otherwise it is the whole graph, as before.
 *
 * What the whole graph promises is kept: the chunks run in an order its edges allow,
 * a launch of the graph is ordered after the previous one even on another stream (an
 * event recorded where it ran), and once anything changes the instantiated graph
 * (cuGraphExecUpdate, node parameters or enabling) its chunks are no longer used. Graphs
 * with other nodes (host calls, memory, events, child graphs, conditionals),
 * device-launchable ones and graphs of one node are never split. Until a process has a
 * split graph, a graph launch's fast path is what it was. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "xcuda.h"

/* At most this many chunks: a graph of more kernels gets chunks of several. */
#define XC_GRAPH_CHUNKS 32u

_Atomic unsigned xc_graph_splits;

struct split {
    CUgraphExec exec;
    CUgraphExec *chunks;
    unsigned n;
    unsigned *kernels; /* kernel nodes in each chunk */
    unsigned all;      /* in the whole graph */
    int stale;   /* the exec was changed: launch it whole */
    unsigned group; /* chunks per launch: about the queue budget of GPU time */
    CUstream last;
    int launched;
    CUevent ev; /* orders a launch on another stream after the last one */
    struct split *next;
};

static pthread_mutex_t splits_mu = PTHREAD_MUTEX_INITIALIZER;
static struct split *splits;

static struct split *find_locked(CUgraphExec e)
{
    for (struct split *s = splits; s != NULL; s = s->next)
        if (s->exec == e)
            return s;
    return NULL;
}

static void destroy_chunks(CUgraphExec *chunks, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        if (chunks[i] != NULL)
            xc_real.cuGraphExecDestroy(chunks[i]);
    free(chunks);
}

struct node_at {
    CUgraphNode node;
    size_t i;
};

static int by_node(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const struct node_at *)a)->node;
    uintptr_t y = (uintptr_t)((const struct node_at *)b)->node;
    return x < y ? -1 : x > y;
}

/* index_of is node's index in nodes (sorted by_node), or n when it is not there. */
static size_t index_of(const struct node_at *at, size_t n, CUgraphNode node)
{
    struct node_at key = {node, 0};
    const struct node_at *f = bsearch(&key, at, n, sizeof *at, by_node);
    return f != NULL ? f->i : n;
}

/* order puts the graph's n nodes in a topological order (Kahn's); 0 on success. */
static int order(CUgraph g, CUgraphNode *nodes, size_t n, CUgraphNode *out)
{
    size_t ne = 0;
    if (xc_real.cuGraphGetEdges(g, NULL, NULL, &ne) != CUDA_SUCCESS)
        return -1;
    CUgraphNode *from = calloc(ne + 1, sizeof *from), *to = calloc(ne + 1, sizeof *to);
    struct node_at *at = calloc(n, sizeof *at);
    /* the edges as arrays of indexes, grouped by their tail (first[i]..first[i+1]) */
    size_t *first = calloc(n + 1, sizeof *first), *succ = calloc(ne + 1, sizeof *succ);
    size_t *tail = calloc(ne + 1, sizeof *tail), *head = calloc(ne + 1, sizeof *head);
    size_t *indeg = calloc(n, sizeof *indeg), *queue = calloc(n, sizeof *queue);
    int rc = -1;
    if (from == NULL || to == NULL || at == NULL || first == NULL || succ == NULL ||
        tail == NULL || head == NULL || indeg == NULL || queue == NULL)
        goto out;
    size_t got = ne;
    if (ne > 0 && (xc_real.cuGraphGetEdges(g, from, to, &got) != CUDA_SUCCESS || got != ne))
        goto out;
    for (size_t i = 0; i < n; i++)
        at[i] = (struct node_at){nodes[i], i};
    qsort(at, n, sizeof *at, by_node);
    for (size_t k = 0; k < ne; k++) {
        tail[k] = index_of(at, n, from[k]);
        head[k] = index_of(at, n, to[k]);
        if (tail[k] == n || head[k] == n)
            goto out;
        first[tail[k] + 1]++;
        indeg[head[k]]++;
    }
    for (size_t i = 0; i < n; i++)
        first[i + 1] += first[i];
    /* queue is free until the search: it counts each tail's successors placed so far */
    for (size_t k = 0; k < ne; k++)
        succ[first[tail[k]] + queue[tail[k]]++] = head[k];
    memset(queue, 0, n * sizeof *queue);
    size_t qh = 0, qt = 0;
    for (size_t i = 0; i < n; i++)
        if (indeg[i] == 0)
            queue[qt++] = i;
    while (qh < qt) {
        size_t i = queue[qh++];
        out[qh - 1] = nodes[i];
        for (size_t k = first[i]; k < first[i + 1]; k++)
            if (--indeg[succ[k]] == 0)
                queue[qt++] = succ[k];
    }
    rc = qh == n ? 0 : -1;
out:
    free(from);
    free(to);
    free(at);
    free(first);
    free(succ);
    free(tail);
    free(head);
    free(indeg);
    free(queue);
    return rc;
}

/* chunk instantiates the nodes [lo, hi) of ord: a clone of g without the others. */
static CUresult chunk(CUgraph g, CUgraphNode *ord, size_t n, size_t lo, size_t hi,
                      unsigned long long flags, CUgraphExec *out)
{
    CUgraph c;
    CUresult r = xc_real.cuGraphClone(&c, g);
    if (r != CUDA_SUCCESS)
        return r;
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
        if (i >= lo && i < hi)
            continue;
        CUgraphNode cn;
        r = xc_real.cuGraphNodeFindInClone(&cn, ord[i], c);
        if (r == CUDA_SUCCESS)
            r = xc_real.cuGraphDestroyNode(cn);
    }
    if (r == CUDA_SUCCESS)
        r = xc_real.cuGraphInstantiateWithFlags(out, c, flags);
    xc_real.cuGraphDestroy(c);
    return r;
}

/* splittable: a node of type t may run in a chunk of its own graph. Copies and memsets
 * (a training step's inputs, its zeroed gradients) only wait for what comes before them
 * in the stream, which includes everything their edges asked for. Not so: event waits,
 * external semaphores and host calls (a node after them in the order, which they did not
 * wait for, could be what they wait on), event records (they would fire later than the
 * graph says), memory nodes (their allocation belongs to the one graph), child graphs and
 * conditionals. */
static int splittable(CUgraphNodeType t)
{
    return t == CU_GRAPH_NODE_TYPE_EMPTY || t == CU_GRAPH_NODE_TYPE_MEMCPY ||
           t == CU_GRAPH_NODE_TYPE_MEMSET;
}

/* split instantiates g in chunks for exec e, when this process follows online work
 * and g is a graph of kernels (and splittable nodes); nothing happens otherwise or when
 * any step fails. */
static void split(CUgraphExec e, CUgraph g, unsigned long long flags)
{
    if (xc_sig.pub || xc_sig.n == 0 || (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH))
        return;
    if (xc_real.cuGraphGetNodes == NULL || xc_real.cuGraphGetEdges == NULL ||
        xc_real.cuGraphNodeGetType == NULL || xc_real.cuGraphClone == NULL ||
        xc_real.cuGraphNodeFindInClone == NULL || xc_real.cuGraphDestroyNode == NULL ||
        xc_real.cuGraphDestroy == NULL || xc_real.cuGraphInstantiateWithFlags == NULL ||
        xc_real.cuGraphExecDestroy == NULL || xc_real.cuStreamWaitEvent == NULL)
        return;
    size_t n = 0;
    if (xc_real.cuGraphGetNodes(g, NULL, &n) != CUDA_SUCCESS || n < 2)
        return;
    CUgraphNode *nodes = calloc(n, sizeof *nodes), *ord = calloc(n, sizeof *ord);
    struct split *s = calloc(1, sizeof *s);
    size_t got = n, kernels = 0;
    if (nodes == NULL || ord == NULL || s == NULL ||
        xc_real.cuGraphGetNodes(g, nodes, &got) != CUDA_SUCCESS || got != n)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        CUgraphNodeType t;
        if (xc_real.cuGraphNodeGetType(nodes[i], &t) != CUDA_SUCCESS)
            goto fail;
        if (t == CU_GRAPH_NODE_TYPE_KERNEL)
            kernels++;
        else if (!splittable(t))
            goto fail;
    }
    if (kernels < 2 || order(g, nodes, n, ord) != 0)
        goto fail;
    size_t per = (n + XC_GRAPH_CHUNKS - 1) / XC_GRAPH_CHUNKS;
    s->n = (unsigned)((n + per - 1) / per);
    if ((s->chunks = calloc(s->n, sizeof *s->chunks)) == NULL)
        goto fail;
    if ((s->kernels = calloc(s->n, sizeof *s->kernels)) == NULL)
        goto fail;
    s->all = (unsigned)kernels;
    flags &= ~(unsigned long long)CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
    for (unsigned i = 0; i < s->n; i++) {
        size_t lo = i * per, hi = lo + per < n ? lo + per : n;
        for (size_t j = lo; j < hi; j++) {
            CUgraphNodeType t;
            if (xc_real.cuGraphNodeGetType(ord[j], &t) == CUDA_SUCCESS &&
                t == CU_GRAPH_NODE_TYPE_KERNEL)
                s->kernels[i]++;
        }
        CUresult r = chunk(g, ord, n, lo, hi, flags, &s->chunks[i]);
        if (r != CUDA_SUCCESS) {
            xc_log("graph %p: chunk %u of %u not instantiated (%d): launched whole", (void *)e,
                   i, s->n, (int)r);
            goto fail;
        }
    }
    s->exec = e;
    s->group = 1;
    pthread_mutex_lock(&splits_mu);
    s->next = splits;
    splits = s;
    atomic_fetch_add_explicit(&xc_graph_splits, 1, memory_order_relaxed);
    pthread_mutex_unlock(&splits_mu);
    xc_log("graph %p: %zu nodes in %u chunks while online work is recent", (void *)e, n, s->n);
    free(nodes);
    free(ord);
    return;
fail:
    if (s != NULL) {
        destroy_chunks(s->chunks, s->n);
        free(s->kernels);
    }
    free(s);
    free(nodes);
    free(ord);
}

/* forget drops exec e's chunks, if it has any. */
static void forget(CUgraphExec e)
{
    if (atomic_load_explicit(&xc_graph_splits, memory_order_relaxed) == 0)
        return;
    pthread_mutex_lock(&splits_mu);
    struct split **pp = &splits;
    while (*pp != NULL && (*pp)->exec != e)
        pp = &(*pp)->next;
    struct split *s = *pp;
    if (s != NULL) {
        *pp = s->next;
        atomic_fetch_sub_explicit(&xc_graph_splits, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&splits_mu);
    if (s != NULL) {
        destroy_chunks(s->chunks, s->n);
        if (s->ev != NULL)
            xc_real.cuEventDestroy(s->ev);
        free(s->kernels);
        free(s);
    }
}

/* instantiated: the driver made exec e from g. An exec at the same address as one
 * libxcuda split is a new one (the old one was destroyed some way libxcuda did not see). */
static void instantiated(CUgraphExec e, CUgraph g, unsigned long long flags)
{
    if (xc_tls_inside)
        return;
    forget(e);
    split(e, g, flags);
}

/* ---- instantiation: every ABI ---- */

/* The two ABIs of CUDA 11 (a log buffer, no flags). */
#define INSTANTIATE_V1(name, field)                                                       \
    XC_EXPORT CUresult name(CUgraphExec *pe, CUgraph g, CUgraphNode *err, char *log,      \
                            size_t logsz)                                                 \
    {                                                                                     \
        __typeof__(xc_real.field) real_ = XC_REAL(field);                                 \
        if (real_ == NULL)                                                                \
            return CUDA_ERROR_NOT_FOUND;                                                  \
        CUresult r_ = real_(pe, g, err, log, logsz);                                      \
        if (r_ == CUDA_SUCCESS && pe != NULL)                                             \
            instantiated(*pe, g, 0);                                                      \
        return r_;                                                                        \
    }

INSTANTIATE_V1(xc_graph_instantiate_v1, cuGraphInstantiate_v1)
INSTANTIATE_V1(cuGraphInstantiate_v2, cuGraphInstantiate_v2)

XC_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *pe, CUgraph g,
                                               unsigned long long flags)
{
    __typeof__(xc_real.cuGraphInstantiateWithFlags) real = XC_REAL(cuGraphInstantiateWithFlags);
    if (real == NULL)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = real(pe, g, flags);
    if (r == CUDA_SUCCESS && pe != NULL)
        instantiated(*pe, g, flags);
    return r;
}

static CUresult instantiate_params(__typeof__(xc_real.cuGraphInstantiateWithParams) real,
                                   CUgraphExec *pe, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    if (real == NULL)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = real(pe, g, p);
    if (r == CUDA_SUCCESS && pe != NULL && p != NULL)
        instantiated(*pe, g, p->flags);
    return r;
}

XC_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *pe, CUgraph g,
                                                CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    return instantiate_params(XC_REAL(cuGraphInstantiateWithParams), pe, g, p);
}

XC_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *pe, CUgraph g,
                                                     CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
    return instantiate_params(XC_REAL(cuGraphInstantiateWithParams_ptsz), pe, g, p);
}

/* ---- what changes an instantiated graph: its chunks are no longer used ---- */

static void stale(CUgraphExec e)
{
    if (atomic_load_explicit(&xc_graph_splits, memory_order_relaxed) == 0)
        return;
    pthread_mutex_lock(&splits_mu);
    struct split *s = find_locked(e);
    if (s != NULL && !s->stale) {
        s->stale = 1;
        xc_log("graph %p changed: launched whole from now on", (void *)e);
    }
    pthread_mutex_unlock(&splits_mu);
}

/* CHANGES(name, field, (params...), (args...)): the exported wrapper `name` over
 * xc_real.field, a call that changes the instantiated graph e. */
#define CHANGES(name, field, params, args)                                               \
    XC_EXPORT CUresult name params                                                       \
    {                                                                                    \
        __typeof__(xc_real.field) real_ = XC_REAL(field);                                \
        if (real_ == NULL)                                                               \
            return CUDA_ERROR_NOT_FOUND;                                                 \
        stale(e);                                                                        \
        return real_ args;                                                               \
    }

CHANGES(xc_graph_exec_update_v1, cuGraphExecUpdate_v1,
        (CUgraphExec e, CUgraph g, CUgraphNode *err, void *res), (e, g, err, res))
CHANGES(xc_graph_exec_update_v2, cuGraphExecUpdate_v2, (CUgraphExec e, CUgraph g, void *info),
        (e, g, info))
CHANGES(xc_graph_kernel_params_v1, cuGraphExecKernelNodeSetParams_v1,
        (CUgraphExec e, CUgraphNode n, const void *p), (e, n, p))
CHANGES(xc_graph_kernel_params_v2, cuGraphExecKernelNodeSetParams_v2,
        (CUgraphExec e, CUgraphNode n, const void *p), (e, n, p))
CHANGES(xc_graph_memcpy_params, cuGraphExecMemcpyNodeSetParams,
        (CUgraphExec e, CUgraphNode n, const void *p, CUcontext c), (e, n, p, c))
CHANGES(xc_graph_memset_params, cuGraphExecMemsetNodeSetParams,
        (CUgraphExec e, CUgraphNode n, const void *p, CUcontext c), (e, n, p, c))
CHANGES(xc_graph_node_params, cuGraphExecNodeSetParams,
        (CUgraphExec e, CUgraphNode n, void *p), (e, n, p))
CHANGES(cuGraphNodeSetEnabled, cuGraphNodeSetEnabled,
        (CUgraphExec e, CUgraphNode n, unsigned int on), (e, n, on))

XC_EXPORT CUresult cuGraphExecDestroy(CUgraphExec e)
{
    __typeof__(xc_real.cuGraphExecDestroy) real = XC_REAL(cuGraphExecDestroy);
    if (real == NULL)
        return CUDA_ERROR_NOT_FOUND;
    forget(e);
    return real(e);
}

void xc_graph_atfork_child(void)
{
    /* The parent's graphs are not the child's to launch (CUDA does not survive a fork):
     * forget them, leaving their memory be. */
    pthread_mutex_init(&splits_mu, NULL);
    splits = NULL;
    atomic_store(&xc_graph_splits, 0);
}

/* ---- launches ---- */

/* launch_all launches g[0..k) into s, or into a green context when this process is
 * confined (confine.c), in order; the first error stops it. */
static CUresult launch_all(xc_graph_launch_fn real, CUgraphExec *g, unsigned k, CUstream s,
                           int ptsz)
{
    CUresult r = CUDA_SUCCESS;
    struct xc_confined c;
    unsigned i = 0;
    if (xc_confine_enter(s == NULL && ptsz ? CU_STREAM_PER_THREAD : s, 1, &c)) {
        for (; i < k && r == CUDA_SUCCESS; i++)
            r = real(g[i], c.to);
        if (xc_confine_leave(&c, r)) { /* refused in the green context: that one again, in s */
            i--;
            r = CUDA_SUCCESS;
        }
    }
    for (; i < k && r == CUDA_SUCCESS; i++)
        r = real(g[i], s);
    return r;
}

/* one gated launch of the k execs g[0..k), which run `kernels` kernels (1 where unknown):
 * what launch.c's slow path does for a kernel */
static CUresult gated(xc_graph_launch_fn real, CUgraphExec *g, unsigned k, CUstream s, int ptsz,
                      unsigned kernels)
{
    xc_confine_refresh();
    struct xc_ticket t = {0, 0, kernels};
    if (!xc_gate_open() || xc_signal_bounds()) {
        CUresult gr = xc_gate_slow(s, &t);
        if (gr != CUDA_SUCCESS)
            return gr;
    }
    xc_tls_inside = 1;
    CUresult r = launch_all(real, g, k, s, ptsz);
    xc_tls_inside = 0;
    xc_gate_done(s, &t, r);
    return xc_note_sticky(r);
}

/* regroup sets how many chunks the next launch of sp takes at a time: about the queue
 * budget of GPU time, from the gate's measured time per launch of the groups so far
 * (splitting finer only adds launches the host must wait for). Lock held. */
static void regroup(struct split *sp)
{
    uint64_t per = xc_gate_per_launch_ns(), k = sp->group;
    if (per == 0)
        return;
    uint64_t chunk_ns = per / k, want = chunk_ns > 0 ? xc_gate_queue_ns() / chunk_ns : sp->n;
    sp->group = (unsigned)(want < 1 ? 1 : want > sp->n ? sp->n : want);
}

/* follows puts stream s after the last launch of a split exec that ran elsewhere
 * (launches of one graph are ordered, and its chunks are other graphs); lock held. */
static void follows(struct split *sp, CUstream s)
{
    if (!sp->launched || sp->last == s)
        return;
    if (sp->ev == NULL &&
        xc_real.cuEventCreate(&sp->ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
        sp->ev = NULL;
        return;
    }
    if (xc_real.cuEventRecord(sp->ev, sp->last) == CUDA_SUCCESS)
        xc_real.cuStreamWaitEvent(s, sp->ev, 0);
}

static int capturing(CUstream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return xc_real.cuStreamIsCapturing == NULL ||
           xc_real.cuStreamIsCapturing(s, &st) != CUDA_SUCCESS ||
           st != CU_STREAM_CAPTURE_STATUS_NONE;
}

__attribute__((noinline)) static CUresult graph_slow(xc_graph_launch_fn real, CUgraphExec g,
                                                     CUstream s, int ptsz)
{
    if (real == NULL)
        return CUDA_ERROR_NOT_INITIALIZED;
    if ((xc_tls_launches & XC_FLUSH_MASK) == 0)
        xc_flush_launches();
    if (xc_tls_inside)
        return xc_note_sticky(real(g, s));
    xc_signal_launch();
    if (atomic_load_explicit(&xc_graph_splits, memory_order_relaxed) == 0)
        return gated(real, &g, 1, s, ptsz, 1);
    /* Launches of a split graph are serialised here: they are a step's, not a kernel's. */
    pthread_mutex_lock(&splits_mu);
    struct split *sp = find_locked(g);
    if (sp == NULL) {
        pthread_mutex_unlock(&splits_mu);
        return gated(real, &g, 1, s, ptsz, 1);
    }
    xc_tls_inside = 1;
    follows(sp, s);
    xc_signal_note_ended();
    int chunks = !sp->stale && xc_signal_bounds() && !capturing(s);
    xc_tls_inside = 0;
    CUresult r = CUDA_SUCCESS;
    if (!chunks) {
        r = gated(real, &g, 1, s, ptsz, sp->all);
    } else {
        unsigned k = sp->group;
        for (unsigned i = 0; i < sp->n && r == CUDA_SUCCESS; i += k) {
            if (i > 0)
                xc_signal_launch();
            unsigned m = sp->n - i < k ? sp->n - i : k, kernels = 0;
            for (unsigned j = i; j < i + m; j++)
                kernels += sp->kernels[j];
            r = gated(real, sp->chunks + i, m, s, ptsz, kernels);
        }
        regroup(sp);
    }
    sp->last = s;
    sp->launched = 1;
    pthread_mutex_unlock(&splits_mu);
    return r;
}

/* The fast path is launch.c's, with one more relaxed load: no split graph yet. */
#define GRAPH_LAUNCH(name, field, ptsz)                                                    \
    XC_FAST_EXPORT(name, field, (CUgraphExec g, CUstream s), (g, s),                       \
                   (++xc_tls_launches & XC_FLUSH_MASK) != 0 &&                             \
                       atomic_load_explicit(&xc_graph_splits, memory_order_relaxed) == 0 && \
                       xc_gate_open() && xc_signal_quiet(),                                \
                   graph_slow(XC_REAL(field), g, s, ptsz))

GRAPH_LAUNCH(cuGraphLaunch, cuGraphLaunch, 0)
GRAPH_LAUNCH(cuGraphLaunch_ptsz, cuGraphLaunch_ptsz, 1)
