/* internal.h — state shared by the files of gpusim's fake libcuda.
 *
 * Handles are small structs owned by this library; ids travel to gpusimd,
 * which runs the model. Launches, copies and stream/event bookkeeping are
 * pipelined (written to the socket, no reply); syncs, allocations and
 * queries are round trips.
 */
#ifndef GPUSIM_DRIVER_INTERNAL_H
#define GPUSIM_DRIVER_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#include "gsproto.h"

#define GS_EXPORT __attribute__((visibility("default")))
#define GS_MAX_DEVICES 64
#define GS_MAX_CTX 4096
#define GS_DRIVER_VERSION 12060

#define GS_MAGIC_CTX 0x47534358u
#define GS_MAGIC_STREAM 0x47535354u
#define GS_MAGIC_EVENT 0x47534556u
#define GS_MAGIC_MODULE 0x47534d4fu
#define GS_MAGIC_FUNC 0x47534655u
#define GS_MAGIC_GRAPH 0x47534752u
#define GS_MAGIC_EXEC 0x47534745u
#define GS_MAGIC_POOL 0x4753504fu
#define GS_MAGIC_NODE 0x47534e44u
#define GS_MAGIC_GREEN 0x47534743u
#define GS_MAGIC_DESC 0x47534453u
#define GS_MAGIC_RES 0x47535253u

struct gs_device {
	struct gs_dev_info_reply info;
	int sim_index; /* gpusimd's index (CUDA_VISIBLE_DEVICES may remap) */
	struct CUctx_st *primary;
	int primary_refs;
	unsigned int primary_flags;
};

/* a captured graph node: a launch or a copy */
struct gs_node {
	int is_copy;
	uint32_t func, kind;
	uint32_t grid[3], block[3];
	uint64_t bytes;
};

/* A graph is the list of its nodes in the order they were added, each after the one
 * before (a captured stream is a chain). A destroyed node stays in the list, dead, until
 * the graph goes: handles stay valid and destroying one costs nothing. */
struct CUgraphNode_st {
	uint32_t magic;
	int dead;
	struct CUgraph_st *g;
	struct CUgraphNode_st *clone; /* its copy in the latest clone of its graph, */
	struct CUgraph_st *clone_g;   /* that clone (compared, never followed: it may be gone) */
	struct gs_node n;
};

struct CUgraph_st {
	uint32_t magic;
	struct CUgraphNode_st **nodes;
	size_t n, cap, live;
};

struct CUgraphExec_st {
	uint32_t magic;
	struct gs_node *nodes;
	size_t n;
};

struct CUstream_st {
	uint32_t magic;
	uint32_t id;
	struct CUctx_st *ctx;
	struct CUgraph_st *capture; /* non-NULL while capturing */
};

struct CUctx_st {
	uint32_t magic;
	uint32_t id;
	int dev;
	int primary;
	_Atomic int err; /* sticky error from gpusimd */
	int mps;
	double atp;
	uint32_t sm_cap;
	struct CUgreenCtx_st *green; /* the green context this is the CUcontext of (green.c), or NULL */
	struct CUstream_st def; /* the context's default (NULL) stream */
};

struct CUevent_st {
	uint32_t magic;
	uint32_t id;
	struct CUctx_st *ctx;
	unsigned int flags;
	int local;                 /* owns a slot of the completion table (event.c) */
	_Atomic uint64_t rec_gen;  /* records sent */
	_Atomic uint64_t rec_ns;   /* CLOCK_MONOTONIC of the last record */
	_Atomic uint64_t rec_syncs; /* gs_syncs at the last record */
	_Atomic uint64_t rec_seq;   /* the last record's place among the process's records */
};

struct CUmod_st {
	uint32_t magic;
	uint32_t id;
};

struct CUfunc_st {
	uint32_t magic;
	uint32_t id;
	struct CUmod_st *mod;
};

struct CUmemPoolHandle_st {
	uint32_t magic;
	int dev;
};

/* global state (conn.c) */
extern int gs_ndev;
extern struct gs_device gs_devs[GS_MAX_DEVICES];
extern int gs_initialized;
extern int gs_mps_server_pid; /* 0: not an MPS client */
extern struct CUctx_st *_Atomic gs_ctx_by_id[GS_MAX_CTX];

uint32_t gs_next_id(void);
CUresult gs_init(void);
/* CUDA_SUCCESS, or what the driver says of a device ordinal before or past init (device.c). */
CUresult gs_dev_ok(CUdevice dev);
CUresult gs_send(void *msg, uint32_t len);        /* pipelined, no reply */
CUresult gs_call(void *msg, uint32_t len, void *reply, uint32_t reply_cap); /* round trip */
void gs_hdr_fill(struct gs_hdr *h, uint16_t op, uint32_t len);
/* Most messages carry two ids (struct gs_u32x2): sent pipelined, or as a
 * round trip whose plain reply carries the result. */
CUresult gs_send_ids(uint16_t op, uint32_t a, uint32_t b);
CUresult gs_call_ids(uint16_t op, uint32_t a, uint32_t b);
/* Successful stream, context and device synchronisations so far: a sync may return
 * before the completions it waited for reach the table (gpusimd answers at once what
 * already finished). An event synchronisation covers less (gs_event_synced). */
extern _Atomic uint64_t gs_syncs;
int gs_poll(void); /* non-blocking: pick up a pending notification; 1 if one was read */
void gs_drain(void); /* non-blocking: pick up every pending notification */
/* The completion table (event.c): what GS_EVENT_DONE said about each event. */
void gs_event_claim(struct CUevent_st *e);
void gs_event_release(struct CUevent_st *e);
void gs_event_done(uint32_t id, uint64_t gen, double at_ns);
/* Notes a record of e that is about to be sent. */
void gs_event_recording(struct CUevent_st *e);
/* Notes that a synchronisation on e's last record returned. */
void gs_event_synced(struct CUevent_st *e);
/* 1: the event's last record completed (*at_ns: when), 0: not yet, -1: ask gpusimd. */
int gs_event_local(struct CUevent_st *e, double *at_ns);

/* context.c */
struct CUctx_st *gs_current(void);
/* A context struct with its id slot claimed and its default stream named, not yet
 * known to gpusimd; gs_ctx_unalloc gives it back (creation failed). NULL: out of
 * memory or of slots. */
struct CUctx_st *gs_ctx_alloc(CUdevice dev);
void gs_ctx_unalloc(struct CUctx_st *c);
/* Waits for the context's work (as cuCtxDestroy does) and releases it. */
void gs_ctx_destroy(struct CUctx_st *c);
/* Takes c off the calling thread's current-context stack. */
void gs_ctx_unstack(struct CUctx_st *c);
/* cuDevicePrimaryCtxRelease; which non-NULL releases only if dev's primary context
 * is still that one (a reset may have replaced it). */
CUresult gs_primary_release(CUdevice dev, struct CUctx_st *which);
CUresult gs_need_ctx(struct CUctx_st **out);
CUresult gs_resolve_stream(CUstream s, struct CUstream_st **out);
CUresult gs_ctx_ok(struct CUctx_st *c);

/* memory.c */
void gs_alloc_track(uint64_t ptr, uint64_t size);
int gs_alloc_lookup(uint64_t ptr, uint64_t *base, uint64_t *size);
int gs_alloc_untrack(uint64_t ptr);

/* stream.c */
/* A stream of context c: cuStreamCreate's work once the context is known. */
CUresult gs_stream_create_in(struct CUctx_st *c, CUstream *ph);

/* module.c */
CUresult gs_launch(struct CUfunc_st *f, const uint32_t grid[3], const uint32_t block[3], CUstream hs);
CUresult gs_copy(CUstream hs, uint32_t kind, uint64_t bytes, int sync);

#endif
