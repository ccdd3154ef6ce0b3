/* xcuda_env.h: the container side of muxflow's mount contract as libxcuda
 * reads it: where muxd's wiring (muxd/wiring/plan.go) puts things inside a
 * GPU container, and the environment it sets there. The control block's
 * own names (XCUDA_CONTROL_BLOCK, XCUDA_FAIL_POLICY, XCUDA_SIGNAL and their
 * default paths) are in xcuda_ctl.h.
 *
 * This header is the source: libxcuda/ctlblock/env.go mirrors it, muxd/wiring
 * uses the Go mirror, and ctlblock's TestEnvMatchesHeader compiles this file
 * and fails on any difference. See docs/architecture.md (mount contract). */
#ifndef XCUDA_ENV_H
#define XCUDA_ENV_H

/* What muxflow mounts under the container runtime's /run. */
#define XCUDA_CONTAINER_ROOT "/run/muxflow"
/* The node's MPS pipe directory, bind-mounted from the policy's mps.pipe_dir. */
#define XCUDA_MPS_DIR "/run/muxflow/mps"

/* XCUDA_FAIL_POLICY (xcuda_ctl.h) holds this word when libxcuda must refuse
 * GPU work without a usable control block; anything else passes through. */
#define XCUDA_FAIL_POLICY_CLOSED "closed"

/* Whole seconds libxcuda drains after SIGINT/SIGTERM before the signal's
 * own action; values outside [1, XCUDA_DRAIN_TIMEOUT_MAX] are ignored. */
#define XCUDA_ENV_DRAIN_TIMEOUT "XCUDA_DRAIN_TIMEOUT"
#define XCUDA_DRAIN_TIMEOUT_MAX 3600

/* NVIDIA's MPS client variables, which libxcuda tightens from the limits
 * page (they are read at context creation and can only lower the server's
 * limits). */
#define XCUDA_ENV_MPS_PIPE "CUDA_MPS_PIPE_DIRECTORY"
#define XCUDA_ENV_MPS_THREAD_PERCENTAGE "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
#define XCUDA_ENV_MPS_PINNED_MEM "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
/* An MPS client's priority level: offline processes run at BELOW_NORMAL, so
 * the GPU dispatches pending online blocks before theirs (no preemption). */
#define XCUDA_ENV_MPS_CLIENT_PRIORITY "CUDA_MPS_CLIENT_PRIORITY"
#define XCUDA_MPS_PRIORITY_BELOW_NORMAL "1"

#endif
