/* gsproto.h — the wire protocol between the fake libcuda and gpusimd.
 *
 * One unix-socket connection per process. The client first writes the 8-byte
 * magic GS_MAGIC, then messages: a gs_hdr followed by an op-specific payload,
 * little-endian, naturally aligned. Messages with id == 0 get no reply
 * (launches, copies, stream and event bookkeeping: they are pipelined); a
 * message with id != 0 gets exactly one GS_REPLY with the same id, carrying a
 * CUresult first. gpusimd may also send GS_NOTIFY at any time when a context
 * takes a sticky error, and GS_EVENT_DONE when a record of one of the
 * process's events completes (so that cuEventQuery and cuEventElapsedTime
 * answer from what the driver was told, as a real driver reads what the GPU
 * wrote). Each is queued before the reply to any sync that waited for it; a
 * process that does not read its socket may miss some (gpusimd queues at most
 * 1024), and then asks. The Go side mirrors this file in gpusim/simd/proto.go.
 */
#ifndef GPUSIM_GSPROTO_H
#define GPUSIM_GSPROTO_H

#include <stdint.h>

#define GS_MAGIC "GSIMBIN1"
#define GS_VERSION 1u
#define GS_DEFAULT_SOCKET "/tmp/gpusim/gpusimd.sock"
#define GS_MAX_MSG (64u << 20)

enum gs_op {
	GS_HELLO = 1,
	GS_DEV_INFO = 2,
	GS_CTX_CREATE = 3,
	GS_CTX_DESTROY = 4,
	GS_STREAM_CREATE = 5,
	GS_STREAM_DESTROY = 6,
	GS_MODULE_LOAD = 7,
	GS_MODULE_UNLOAD = 8,
	GS_FUNC_GET = 9,
	GS_LAUNCH = 10,
	GS_COPY = 11,
	GS_EVENT_CREATE = 12,
	GS_EVENT_DESTROY = 13,
	GS_EVENT_RECORD = 14,
	GS_STREAM_WAIT_EVENT = 15,
	GS_SYNC = 16,
	GS_QUERY = 17,
	GS_EVENT_ELAPSED = 18,
	GS_MEM_ALLOC = 19,
	GS_MEM_FREE = 20,
	GS_MEM_INFO = 21,
	GS_GREEN_CTX_CREATE = 22,
	GS_REPLY = 0x8000,
	GS_NOTIFY = 0x8001,
	GS_EVENT_DONE = 0x8002,
};

enum gs_sync_kind { GS_SYNC_STREAM = 1, GS_SYNC_CONTEXT = 2, GS_SYNC_EVENT = 3 };
enum gs_copy_kind { GS_COPY_H2D = 1, GS_COPY_D2H = 2, GS_COPY_D2D = 3, GS_COPY_MEMSET = 4 };

struct gs_hdr {
	uint32_t len; /* whole message, header included */
	uint16_t op;
	uint16_t flags;
	uint64_t id; /* request id; 0 = no reply wanted */
};

struct gs_reply {
	struct gs_hdr h;
	int32_t result;
	uint32_t pad;
};

struct gs_notify {
	struct gs_hdr h;
	uint32_t ctx;
	int32_t code;
};

/* Record number gen (1 for the first) of event completed at at_ns on gpusimd's clock. */
struct gs_event_done {
	struct gs_hdr h;
	uint32_t event, pad;
	uint64_t gen;
	double at_ns;
};

/* pid and uid are what the process says about itself (inside a container, its pid
 * there); gpusimd knows it by its socket's peer credential (host pid and uid) and uses
 * these only where the kernel does not tell. */
struct gs_hello {
	struct gs_hdr h;
	uint32_t pid, uid, version, pad;
};
struct gs_hello_reply {
	struct gs_reply r;
	uint32_t ndev, pad;
};

struct gs_dev_info {
	struct gs_hdr h;
	uint32_t dev, pad;
};
struct gs_dev_info_reply {
	struct gs_reply r;
	char name[96];
	char uuid[64]; /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
	uint64_t total_mem;
	uint32_t sms, cc_major, cc_minor, max_clock_khz;
	uint32_t mem_clock_khz, bus_width, l2_bytes, max_threads_per_sm;
	uint32_t max_blocks_per_sm, pci_bus;
};

struct gs_ctx_create {
	struct gs_hdr h;
	uint32_t ctx, dev, default_stream, mps_pid;
	double atp;         /* requested active thread percentage, 0 = none */
	uint64_t mem_limit; /* requested pinned memory limit, 0 = none */
	int32_t priority;   /* time-slicing priority: 1 high, 0 normal, -1 low */
	uint32_t pad;
};
struct gs_ctx_create_reply {
	struct gs_reply r;
	double atp;
	uint32_t sm_cap, pad;
	uint64_t mem_limit;
};

/* A green context (cuGreenCtxCreate): context ctx, a child of the process's context
 * parent (its primary context), confined to sm_count SMs. The reply is a
 * gs_ctx_create_reply whose sm_cap is the cap in effect: the parent's when its
 * active-thread percentage is below 100 (gpusim/sim/green.go). */
struct gs_green_ctx_create {
	struct gs_hdr h;
	uint32_t ctx, parent, default_stream, sm_count;
};

struct gs_u32x2 { /* ctx destroy, stream create/destroy, event ops, sync, query, elapsed, module unload */
	struct gs_hdr h;
	uint32_t a, b;
};

struct gs_module_load {
	struct gs_hdr h;
	uint32_t module, size;
	/* followed by size bytes of image */
};

struct gs_func_get {
	struct gs_hdr h;
	uint32_t module, func;
	uint32_t name_len, pad;
	/* followed by name_len bytes of name (no NUL) */
};

struct gs_launch {
	struct gs_hdr h;
	uint32_t stream, func;
	uint32_t grid[3], block[3];
};

struct gs_copy {
	struct gs_hdr h;
	uint32_t stream, kind;
	uint64_t bytes;
};

struct gs_elapsed_reply {
	struct gs_reply r;
	float ms;
	uint32_t pad;
};

struct gs_mem_alloc {
	struct gs_hdr h;
	uint32_t ctx, pad;
	uint64_t bytes;
};
struct gs_mem_alloc_reply {
	struct gs_reply r;
	uint64_t ptr;
};

struct gs_mem_free {
	struct gs_hdr h;
	uint64_t ptr;
};

struct gs_mem_info_reply {
	struct gs_reply r;
	uint64_t free, total;
};

#endif
