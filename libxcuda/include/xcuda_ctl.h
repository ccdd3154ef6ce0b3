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

#define XCUDA_CTL_VERSION 10u
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
/* The node's GPU signal page (version 3; see xcuda_signal below). */
#define XCUDA_ENV_SIGNAL "XCUDA_SIGNAL"              /* path of the signal file */
#define XCUDA_DEFAULT_SIGNAL "/run/muxflow/signal"
#define XCUDA_SIGNAL_FILE "signal"                   /* name under muxd's run directory */
#define XCUDA_SIGNAL_MAGIC 0x3147495358554d58ull     /* "XMUXSIG1" little-endian */
#define XCUDA_SIGNAL_SLOTS 64                        /* GPUs of a node (NVML index) */

/* signal_role: what a container's processes do with the signal page. */
#define XCUDA_SIGNAL_NONE 0u    /* nothing (no page, or not mapped) */
#define XCUDA_SIGNAL_PUBLISH 1u /* online: publish "launched, not yet synchronised" */
#define XCUDA_SIGNAL_FOLLOW 2u  /* offline: hold launches while online work is published */

/* Defaults for the hold policy (0 in the limits page) and the bounds libxcuda
 * enforces whatever the page says. */
#define XCUDA_DEFAULT_HOLD_WINDOW_NS 10000000ull /* 10 ms */
#define XCUDA_DEFAULT_HOLD_PERIOD_NS 200000000ull /* 200 ms */
#define XCUDA_DEFAULT_HOLD_MAX_BP 8000u          /* at most 80% of each period held */
#define XCUDA_HOLD_WINDOW_MAX_NS 100000000ull    /* 100 ms */
#define XCUDA_HOLD_PERIOD_MIN_NS 1000000ull      /* 1 ms */
#define XCUDA_HOLD_PERIOD_MAX_NS 1000000000ull   /* 1 s */
#define XCUDA_HOLD_MAX_BP_CAP 9500u              /* offline keeps >= 5% of every period */
/* Version 4: while online work was seen on its GPUs within XCUDA_SHRINK_NS, an offline
 * process keeps at most queue_ns of estimated GPU time outstanding (in-flight launches
 * x its measured GPU time per launch; one launch always goes), and, when the online
 * requests arrive at a regular pace, holds a launch that would still run when the next
 * one is due (hold_ahead). */
#define XCUDA_DEFAULT_QUEUE_NS 300000ull          /* 300 us */
#define XCUDA_QUEUE_MAX_NS 100000000ull           /* 100 ms */
#define XCUDA_AHEAD_DEFAULT 0u                    /* hold_ahead: 0 = default (on) */
#define XCUDA_AHEAD_ON 1u
#define XCUDA_AHEAD_OFF 2u
/* Version 5: online processes publish how wide their kernels are (usage online_width,
 * see below), muxd sizes the offline contexts' MPS active-thread percentage so that the
 * online kernels fit beside them, and tells offline processes up to which percentage
 * they leave that room (limits online_fit_pct): such a process need not bound its
 * outstanding work for online work, which no longer waits for its SMs (it still holds
 * new launches while online work is in flight). */
#define XCUDA_WIDTH_BP_MASK 0xffffu   /* online_width: low 16 bits, basis points */
#define XCUDA_WIDTH_EPOCH_SHIFT 16u    /* high 16 bits: CLOCK_MONOTONIC / WIDTH_EPOCH_NS */
#define XCUDA_WIDTH_EPOCH_NS 8000000000ull /* 8 s: the widest launch of each epoch */
/* Version 7: an offline process that does not leave the online kernels room keeps
 * holding for hold_linger_ns after an online process of its GPU last synchronised
 * (slot idle_ns), so that an online service with requests queued starts the next one
 * before an offline kernel takes the SMs it needs. 0 = default; any value under 1 us:
 * no linger. */
#define XCUDA_DEFAULT_LINGER_NS 500000ull /* 500 us */
#define XCUDA_LINGER_MAX_NS 10000000ull   /* 10 ms */

/* Version 10: confining an offline process's kernels to part of the SMs (limits
 * confine_pct). MPS fixes a process's active-thread percentage when it creates its
 * context; a green context (CUDA 12.4) is a set of SMs a process can launch into at any
 * time, so muxd can confine a job whose kernels it has measured too long beside the
 * online requests, and release it, while the job runs. usage confine_state says how it
 * went: */
#define XCUDA_CONFINE_NONE 0u      /* not asked, or not launched since */
#define XCUDA_CONFINE_ON 1u        /* kernels go to a green context of confined_sms SMs */
#define XCUDA_CONFINE_NO_DRIVER 2u /* the driver has no green contexts */
#define XCUDA_CONFINE_MPS_PCT 3u   /* an MPS active-thread percentage below 100 overrides them */
#define XCUDA_CONFINE_FAILED 4u    /* the driver refused the green context or a launch in it */
#define XCUDA_CONFINE_STATE_MAX 4u

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
    /* Version 3: online-aware gating through the node's signal page. Read once at
     * load (role, mask); the hold policy is re-read on every hold. */
    uint32_t signal_role;           /* XCUDA_SIGNAL_NONE / _PUBLISH / _FOLLOW */
    uint32_t hold_max_bp;           /* most of each hold period held, bp; 0 = default */
    uint64_t signal_mask;           /* signal slots (node GPU indexes) of the container's GPUs */
    uint64_t hold_window_ns;        /* hold while online published within this; 0 = default */
    uint64_t hold_period_ns;        /* the period hold_max_bp applies to; 0 = default */
    /* Version 4: bounding offline concurrency next to online work (re-read on every
     * gated launch). */
    uint64_t queue_ns;              /* outstanding GPU time while online is active; 0 = default */
    uint32_t hold_ahead;            /* XCUDA_AHEAD_*: hold before a regular online arrival */
    /* Version 5: an offline process created with an MPS active-thread percentage at
     * most this leaves room for the online kernels of its GPUs and need not bound its
     * outstanding work for them (0: none does). Re-read every 32nd launch. */
    uint32_t online_fit_pct;
    /* Version 7: see XCUDA_DEFAULT_LINGER_NS. Re-read on every hold. */
    uint64_t hold_linger_ns;
    /* Version 10: while non-zero, an offline process launches its kernels into a green
     * context holding this percentage of its device's SMs (XCUDA_CONFINE_*; re-read
     * every 32nd launch). */
    uint32_t confine_pct;
    uint32_t reserved32;
    uint64_t reserved[8];
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
    /* Version 3: time launches waited because online work was published on the
     * container's GPUs (also counted in throttled_ns), all processes. */
    uint64_t online_held_ns;
    /* Version 4: the part of online_held_ns spent holding ahead of a predicted online
     * arrival (hold_ahead), all processes. */
    uint64_t ahead_held_ns;
    /* Version 5: per device ordinal, the widest sampled launch of an online process in
     * the current epoch: (epoch << XCUDA_WIDTH_EPOCH_SHIFT) | basis points of the
     * device's SMs its blocks need when resident (by threads and blocks per SM; the
     * register and shared-memory limits are not counted). Raised with a CAS by every
     * process of the container; a new epoch starts over. 0 = none seen. */
    uint32_t online_width[XCUDA_MAX_DEVICES];
    /* Version 9: how many launches the gate measured (the launches gpu_time_ns is the
     * GPU time of), and the sum of each one's GPU time squared, in square microseconds,
     * all processes: over gpu_time_ns it is how long the launch in flight at a random
     * moment runs, what an online request arriving then meets, which muxd compares with
     * the online busy periods (the signal page's busy_ns). A graph launch's square counts
     * as its kernels' equal parts (t^2/k for k kernels): a request meets one kernel of
     * it, not the graph. Wraps, like any counter. */
    uint64_t measured_launches;
    uint64_t gpu_time_sq_us2;
    /* Version 10: what became of limits confine_pct, written by the process that last
     * launched: the SMs its confined kernels may use (0: none) and an XCUDA_CONFINE_*
     * state. */
    uint32_t confined_sms;
    uint32_t confine_state;
    xcuda_proc procs[XCUDA_MAX_PROCS];
} xcuda_usage;

/* The node's GPU signal page: one file per node (<run_dir>/signal), created by
 * muxd (root, 0644), bind-mounted at XCUDA_DEFAULT_SIGNAL read-write into online
 * containers and read-only into offline ones. Slot i belongs to the GPU whose
 * NVML index is i; each container's limits page says which slots are its GPUs
 * (signal_mask) and what it does with them (signal_role).
 *
 * online_ns is 0 when no online work is known to be pending on the GPU; an
 * online process stores CLOCK_MONOTONIC ns there when it launches (only if the
 * slot is 0, and again at most every XCUDA_SIGNAL_REFRESH_NS while it keeps
 * launching) and stores 0 when a synchronisation returns and when it exits.
 * An offline process holds a launch while now - online_ns < hold window,
 * within its hold budget. Every value is untrusted: an online container can
 * write anything here, and the budget bounds what that costs offline work. */
#define XCUDA_SIGNAL_REFRESH_NS 100000ull /* 100 us */

/* Version 6: idle_seq lets a holding offline process sleep until the online work is
 * done instead of polling. An online process that clears online_ns then, when
 * followers is not 0, increments idle_seq and wakes the futex on it (FUTEX_WAKE,
 * shared: the page is one file for every container); an offline process reads idle_seq before it
 * checks online_ns and waits on it with FUTEX_WAIT (read-only mappings allow that),
 * with a timeout bounded by its hold budget, the hold window and 1 ms, so a publisher
 * that never wakes (an older libxcuda, a killed or hostile process) costs what polling
 * cost before. muxd keeps followers at the number of offline containers following the
 * GPU, so that an online service alone on its GPU makes no system call for it.
 *
 * Version 7: an online process that clears online_ns while followers is not 0 first
 * stores the time of the clear in idle_ns; followers that do not leave the online
 * kernels room keep holding for their limits' hold_linger_ns after it (an online
 * service with queued requests starts the next one within that time).
 *
 * Version 8: an online thread that enters cuCtxSynchronize, cuStreamSynchronize or
 * cuEventSynchronize while a slot is set stores the time in sync_ns, and the clear
 * that follows its return stores 0 there before it clears online_ns. While sync_ns is
 * within XCUDA_SIGNAL_SYNC_MAX_NS of now, a set slot is busy however old online_ns is:
 * online work is under way until that synchronisation returns (one 50 ms kernel would
 * otherwise go stale after the hold window), and a process killed inside one costs
 * followers at most that long, within their hold budget.
 *
 * Version 9: an online process that clears a slot some offline container follows, after
 * it set the slot from 0 itself, adds the time since then to busy_ns and 1 to busy_spans:
 * muxd's mean length of the online busy periods (a request, for a service that
 * synchronises once a request), which it compares with the offline kernels'. */
#define XCUDA_SIGNAL_SYNC_MAX_NS 1000000000ull /* 1 s */
typedef struct xcuda_signal_slot {
    uint64_t online_ns;   /* see above; 0 = idle */
    uint32_t idle_seq;    /* version 6: bumped after every clear of online_ns */
    uint32_t followers;   /* version 6: offline containers following this GPU (muxd) */
    uint64_t idle_ns;     /* version 7: CLOCK_MONOTONIC ns of the last clear (see below) */
    uint64_t sync_ns;     /* version 8: when a synchronisation began (see above); 0 = none */
    uint64_t busy_ns;     /* version 9: the online busy periods' total length (see below) */
    uint64_t busy_spans;  /* version 9: and how many */
    uint64_t reserved[2]; /* one 64-byte line per GPU */
} xcuda_signal_slot;

typedef struct xcuda_signal {
    xcuda_header hdr;     /* XCUDA_SIGNAL_MAGIC */
    uint64_t reserved[6]; /* the slots start on their own line */
    xcuda_signal_slot slot[XCUDA_SIGNAL_SLOTS];
} xcuda_signal;

#endif /* XCUDA_CTL_H */
