package ctlblock

// The container side of the mount contract, mirrored from libxcuda/include/xcuda_env.h
// (the source; TestEnvMatchesHeader compiles it and compares). muxd/wiring writes specs
// with these names; libxcuda reads them.
const (
	// ContainerRoot holds what muxflow mounts under the container runtime's /run.
	ContainerRoot = "/run/muxflow"
	// ContainerMPSDir is where the node's MPS pipe directory appears in a container.
	ContainerMPSDir = ContainerRoot + "/mps"

	// EnvFailPolicy says what libxcuda does without a usable control block:
	// EnvFailPolicyClosed refuses GPU work, anything else passes it through.
	EnvFailPolicy = "XCUDA_FAIL_POLICY"
	// EnvFailPolicyClosed is EnvFailPolicy's value for "refuse GPU work" (FailClosed in the limits page).
	EnvFailPolicyClosed = "closed"

	// EnvDrainTimeout bounds libxcuda's drain after SIGINT/SIGTERM, in whole seconds;
	// values outside [1, DrainTimeoutMax] are ignored.
	EnvDrainTimeout = "XCUDA_DRAIN_TIMEOUT"
	// DrainTimeoutMax is the largest EnvDrainTimeout libxcuda honours, in seconds.
	DrainTimeoutMax = 3600

	// EnvMPSPipe, EnvMPSThreadPercentage and EnvMPSPinnedMem are NVIDIA's MPS client
	// variables: the pipe directory, and the limits libxcuda can only tighten.
	EnvMPSPipe             = "CUDA_MPS_PIPE_DIRECTORY"
	EnvMPSThreadPercentage = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	EnvMPSPinnedMem        = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	// EnvMPSClientPriority is the MPS client priority level; offline processes run at
	// MPSPriorityBelowNormal so that the GPU dispatches pending online blocks first.
	EnvMPSClientPriority   = "CUDA_MPS_CLIENT_PRIORITY"
	MPSPriorityBelowNormal = "1"
)
