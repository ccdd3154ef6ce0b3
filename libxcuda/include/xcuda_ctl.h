/*
 * xcuda_ctl.h — the control-block ABI between muxd (writer of limits) and
 * libxcuda (reader of limits, writer of usage). This header is the source
 * of truth: the Go mirror (libxcuda/ctlblock) is checked against it by a
 * test that compiles this file and compares every size and offset.
 *
 * A block is two files so that the container can write its usage but never
 * its limits (see libxcuda/README.md for the mount contract):
 *   <dir>/limits  xcuda_limits, written by muxd only, mounted read-only;
 *   <dir>/usage   xcuda_usage, written by libxcuda, mounted read-write.
 *
 * Rules: layout is append-only (new fields go into the reserved tails and
 * bump XCUDA_CTL_VERSION); every field is naturally aligned and accessed
 * with single atomic loads/stores, so a reader never sees a torn value.
 * muxd brackets a multi-field change with `generation` (odd while writing,
 * seqlock style) so a reader that wants a consistent set can retry.
 */
#ifndef XCUDA_CTL_H
#define XCUDA_CTL_H

#include <stdint.h>

#define XCUDA_CTL_VERSION 2u
#define XCUDA_LIMITS_MAGIC 0x314d494c58554d58ull /* "XMUXLIM1" little-endian */
#define XCUDA_USAGE_MAGIC 0x3147535558554d58ull  /* "XMUXUSG1" little-endian */

#define XCUDA_MAX_DEVICES 16
#define XCUDA_MAX_PROCS 64

/* share_bp is a GPU-time share in basis points; FULL means "not throttled". */
#define XCUDA_SHARE_FULL 10000u

#define XCUDA_DEFAULT_MAX_INFLIGHT 4u
#define XCUDA_MAX_INFLIGHT_CAP 64u
#define XCUDA_DEFAULT_BURST_NS 50000000ull /* 50 ms of GPU time */

/* fail_policy: what libxcuda does when the block is missing or invalid. */
#define XCUDA_FAIL_OPEN 0u   /* pass everything through to the driver */
#define XCUDA_FAIL_CLOSED 1u /* refuse cuInit with CUDA_ERROR_NOT_PERMITTED */

/* Environment overrides (read once, at library load, never on a hot path). */
#define XCUDA_ENV_CONTROL_BLOCK "XCUDA_CONTROL_BLOCK" /* directory of the two files */
#define XCUDA_ENV_FAIL_POLICY "XCUDA_FAIL_POLICY"     /* "open" or "closed" when no block */
#define XCUDA_DEFAULT_DIR "/run/muxflow/ctl"
#define XCUDA_LIMITS_FILE "limits"
#define XCUDA_USAGE_FILE "usage"

typedef struct xcuda_header {
    uint64_t magic;   /* XCUDA_LIMITS_MAGIC or XCUDA_USAGE_MAGIC */
    uint32_t version; /* XCUDA_CTL_VERSION of the creator */
    uint32_t size;    /* sizeof the struct the creator knew */
} xcuda_header;

typedef struct xcuda_limits {
    xcuda_header hdr;
    uint64_t generation;            /* seqlock: odd while muxd writes */
    uint32_t paused;                /* 1: no new kernel launches start */
    uint32_t share_bp;              /* GPU-time share, 0..10000 basis points */
    uint32_t max_inflight;          /* launches in flight while throttled; 0 = default */
    uint32_t fail_policy;           /* XCUDA_FAIL_OPEN / XCUDA_FAIL_CLOSED */
    uint32_t mps_active_thread_pct; /* CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, 0 = unset */
    uint32_t device_count;          /* devices described below (informational) */
    uint64_t burst_ns;              /* token-bucket depth in GPU ns; 0 = default */
    uint64_t mem_limit[XCUDA_MAX_DEVICES];     /* bytes per device ordinal, 0 = no cap */
    uint64_t mps_pinned_limit[XCUDA_MAX_DEVICES]; /* CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, 0 = unset */
    uint64_t reserved[16];
} xcuda_limits;

/* One slot per live process of the container, claimed with a CAS on pid. */
typedef struct xcuda_proc {
    int32_t pid;                                /* 0 = free */
    uint32_t flags;                             /* XCUDA_PROC_* */
    uint64_t heartbeat_ns;                      /* CLOCK_REALTIME ns of last activity */
    uint64_t launches;                          /* intercepted kernel/graph launches */
    uint64_t throttled_ns;                      /* time launches waited in the gate */
    uint64_t reserved_bytes[XCUDA_MAX_DEVICES]; /* this process's share of the totals */
    uint64_t reserved[4];
} xcuda_proc;

#define XCUDA_PROC_DRAINING 0x1u /* got SIGINT/SIGTERM, draining before exit */

typedef struct xcuda_usage {
    xcuda_header hdr;
    uint64_t heartbeat_ns;   /* CLOCK_REALTIME ns, any process */
    uint64_t launches;       /* all processes, flushed periodically */
    uint64_t throttled_ns;   /* all processes */
    uint64_t gpu_time_ns;    /* GPU time measured by the gate while throttled */
    int64_t bucket_tokens_ns;  /* shared token bucket (GPU ns); may go negative */
    uint64_t bucket_refill_ns; /* CLOCK_MONOTONIC ns of the last refill */
    uint32_t inflight;         /* launches in flight, all processes */
    uint32_t oom_denials;      /* allocations refused at the cap */
    uint64_t reserved_bytes[XCUDA_MAX_DEVICES]; /* the CAS counters, per device */
    uint64_t peak_bytes[XCUDA_MAX_DEVICES];
    /* Sticky (context-destroying) errors the driver returned to any process of the
     * container, seen at synchronisation: muxd attributes them to the GPU and runs the
     * node side of the error handling. */
    uint32_t sticky_errors;    /* how many */
    uint32_t last_sticky;      /* the latest CUresult */
    uint64_t last_sticky_ns;   /* CLOCK_REALTIME ns when it was seen */
    /* Version 2: the memory-accounting lock. Every change of reserved_bytes (the
     * shared counters and the per-process ones) happens while holding it, so a
     * process killed mid-change leaves the lock held by a dead pid; whoever takes
     * it next recomputes each shared counter as the sum of the per-process ones
     * (which are the truth) before going on. Never taken on the launch path. */
    uint32_t mem_lock;         /* pid of the holder, 0 = free */
    uint32_t mem_recoveries;   /* locks taken over from a dead holder */
    uint64_t reserved[13];
    xcuda_proc procs[XCUDA_MAX_PROCS];
} xcuda_usage;

#endif /* XCUDA_CTL_H */
