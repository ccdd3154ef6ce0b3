// Package api defines the wire types of muxd's HTTP/JSON API (served on a unix socket under
// the versioned prefix /v1) and the validation rules every request passes through. It is
// shared by muxd, muxctl, muxflow-wrapper and muxmatch so that all of them agree on one
// schema. muxflow-runtime and muxflow-hook (C, hook/native) speak the runtime endpoints
// without this package; docs/architecture.md describes the whole API.
//
// Endpoints (registered in muxd/daemon/server.go and muxd/daemon/runtime.go):
//
//	GET    /v1/node                      NodeReport
//	GET    /v1/gpus                      []GPU
//	GET    /v1/events                    []monitor.Event
//	GET    /v1/containers                []Container
//	POST   /v1/containers                RegisterRequest   -> Container (201; 200 if identical)
//	GET    /v1/containers/{id}           Container
//	POST   /v1/containers/{id}/start     StartRequest      -> Container
//	DELETE /v1/containers/{id}                             -> 204
//	GET    /v1/policy                    PolicyInfo
//	POST   /v1/policy/reload                               -> PolicyInfo
//	POST   /v1/runtime/create?id=&bundle=[&hook=]  config.json -> 204, or 200 + the wired config.json
//	POST   /v1/runtime/hooks/{hook}      OCI state (create-runtime, poststop) -> 204
//
// Request bodies are read by DecodeStrict: exact-case keys, no unknown or repeated key,
// valid UTF-8, one value. Names (namespace, pod) must be printable. Errors are returned as
// an Error body with a 4xx/5xx status whose message says what is wrong; a refused request
// changes nothing.
package api

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/muxflow/muxflow/matcher/profile"
)

// Prefix is the versioned path prefix of every endpoint.
const Prefix = "/v1"

// Paths that muxflow-runtime and muxflow-hook (C, hook/native/src/muxdcall.h) call too;
// hook/wrapper's TestNativeConstants compares the two.
const (
	// RuntimeCreatePath is muxflow-runtime's create request (POST, config.json).
	RuntimeCreatePath = Prefix + "/runtime/create"
	// RuntimeHooksPath, followed by create-runtime or poststop, takes an OCI state (POST).
	RuntimeHooksPath = Prefix + "/runtime/hooks/"
	// ContainersPath, followed by a container id, is one registered container.
	ContainersPath = Prefix + "/containers/"
)

// DefaultSocket is where muxd listens unless the policy says otherwise.
const DefaultSocket = "/run/muxflow/muxd.sock"

// Class is the kind of workload a container runs.
type Class string

const (
	// Online is latency-critical inference: it gets the GPU first.
	Online Class = "online"
	// Offline is best-effort training or batch work: it gets what online leaves.
	Offline Class = "offline"
)

// ContainerState is where a registered container is in its life.
type ContainerState string

const (
	// StateCreated: the runtime registered it at create time; no process yet.
	StateCreated ContainerState = "created"
	// StateRunning: its host pid was reported (by muxflow-runtime's reporter, the
	// createRuntime hook, or POST /v1/containers/{id}/start).
	StateRunning ContainerState = "running"
)

// Limits are what muxd enforces on one container through its control block and MPS.
type Limits struct {
	// GPUMemory caps device memory per GPU, in bytes; 0 means no cap. Optional.
	GPUMemory uint64 `json:"gpu_memory,omitempty"`
	// SMPercent is the container's own SM ceiling, a whole percentage within its class's
	// sm_min..sm_max: its launch-gate share and MPS active-thread percentage never go above
	// it. 0 means the class's sm_max. Optional.
	SMPercent int `json:"sm_percent,omitempty"`
}

// RegisterRequest registers a container before it has a process (muxd builds one from the
// spec for muxflow-runtime's create request; other clients send it to POST /v1/containers).
type RegisterRequest struct {
	// ID is the container id as the runtime knows it. Required, immutable; see ValidateID.
	ID string `json:"id"`
	// Class decides the container's protection and share. Required.
	Class Class `json:"class"`
	// GPUs lists the GPUs the container may use, as NVIDIA_VISIBLE_DEVICES writes them
	// (indexes, UUIDs or "all"). Required, non-empty.
	GPUs []string `json:"gpus"`
	// Limits the container asks for (0: the class default), checked against the class
	// bounds by policy/classify.
	Limits Limits `json:"limits"`
	// Namespace is the containerd namespace (k8s.io, moby, default...). Optional.
	Namespace string `json:"namespace,omitempty"`
	// Pod names the Kubernetes pod as "namespace/name", when known. Optional.
	Pod string `json:"pod,omitempty"`
}

// StartRequest reports a container's host pid once its init process exists (POST
// /v1/containers/{id}/start; the runtime endpoints carry the same fact in the OCI state).
type StartRequest struct {
	// PID is the container's init process as seen from the host. Required, > 1: it must
	// be a live process that is not muxd, an ancestor of muxd or a kernel thread.
	PID int `json:"pid"`
}

// ControlPaths tells the runtime which host files to mount into the container.
type ControlPaths struct {
	// Dir is the container's private directory under the state directory.
	Dir string `json:"dir"`
	// Limits is the control-block file muxd writes (mounted read-only).
	Limits string `json:"limits,omitempty"`
	// Usage is the file libxcuda writes (mounted read-write).
	Usage string `json:"usage,omitempty"`
}

// Container is one registered container as muxd stores and reports it.
type Container struct {
	RegisterRequest
	State      ContainerState `json:"state"`
	PID        int            `json:"pid,omitempty"`
	Registered time.Time      `json:"registered"`
	Started    time.Time      `json:"started,omitzero"`
	Control    ControlPaths   `json:"control"`
	// Usage is read live from the control block when the container is reported;
	// it is never stored.
	Usage *Usage `json:"usage,omitempty"`
	// Ceiling is an offline container's effective SM ceiling as the guard last set it
	// (absent before its first period, and for online containers).
	Ceiling *Ceiling `json:"ceiling,omitempty"`
}

// Ceiling is an offline container's effective SM ceiling and where it comes from. Its
// GPUs' offline ceilings are budgets that all their offline containers split; its own
// sm-percent is a ceiling of its own.
type Ceiling struct {
	// Percent is the share of GPU time its launch gate allows now: min(Own, Part).
	Percent float64 `json:"percent"`
	// Own is its own ceiling: its sm-percent, or the offline class's sm_max.
	Own float64 `json:"own"`
	// Part is its part of its GPUs' offline ceilings (the smallest over its GPUs).
	Part float64 `json:"part"`
	// MPSThreadPercent is the MPS active-thread percentage its new processes get: its
	// part of its GPUs' MPS budgets (the class's sm_max, or less so that the online
	// kernels fit), split the same way.
	MPSThreadPercent uint32 `json:"mps_thread_percent"`
	// FitPercent, when set, is the MPS percentage up to which its processes leave the
	// online kernels of its GPUs room to run at once (their GPUs' MPS budgets were sized
	// for that): their launches need not be bounded for online work.
	FitPercent uint32 `json:"fit_percent,omitempty"`
	// BoundBy names the limit that binds: "own sm-percent", "own sm-percent, many
	// launches" (it fits, but launches too many kernels for its own ceiling to count in
	// SM time: guard.FewLaunches), "SM-time cap" (it fits and launches few, but running
	// more would take more than guard.FitSMTime of the GPU's SM time), "GPU budget",
	// "paused" or "waiting for its turn" (alloc.FitHeld's turns: it launches nothing
	// until then).
	BoundBy string `json:"bound_by"`
	// ConfinePercent, when set, is the share of its GPU's SMs its kernels are confined to
	// (KernelRisk.ConfinePercent).
	ConfinePercent uint32 `json:"confine_percent,omitempty"`
}

// Usage is what a container's processes report through libxcuda's control block.
type Usage struct {
	// ReservedBytes is device memory held now, summed over the container's GPUs.
	ReservedBytes uint64        `json:"reserved_bytes"`
	Launches      uint64        `json:"launches"`
	GPUTime       time.Duration `json:"gpu_time_ns"`
	Throttled     time.Duration `json:"throttled_ns"`
	InFlight      uint32        `json:"inflight"`
	OOMDenials    uint32        `json:"oom_denials"`
	// StickyErrors counts context-destroying CUDA errors the container's processes saw.
	StickyErrors uint32 `json:"sticky_errors,omitempty"`
	Processes    int    `json:"processes"`
	// SharePercent is the GPU-time share muxd currently allows (100 = not throttled).
	SharePercent float64 `json:"share_percent"`
	Paused       bool    `json:"paused,omitempty"`
	// Confine is what its processes' libxcuda made of a confinement (Ceiling.
	// ConfinePercent): "confined" to ConfinedSMs SMs, or why not; empty when none was
	// asked or reported.
	Confine     string    `json:"confine,omitempty"`
	ConfinedSMs uint32    `json:"confined_sms,omitempty"`
	Heartbeat   time.Time `json:"heartbeat,omitzero"`
}

// GPU is one device in muxd's inventory.
type GPU struct {
	Index       int    `json:"index"`
	UUID        string `json:"uuid"`
	Name        string `json:"name"`
	MemoryTotal uint64 `json:"memory_total"`
	MemoryUsed  uint64 `json:"memory_used,omitempty"`
	// Health is the monitor's state for this GPU: healthy, throttled, unhealthy, faulted
	// or recovering.
	Health        string    `json:"health"`
	HealthReason  string    `json:"health_reason,omitempty"`
	HealthSince   time.Time `json:"health_since,omitzero"`
	AdmitsOffline bool      `json:"admits_offline"`
	// Utilization is NVML's GPU utilisation (percent of time a kernel ran).
	Utilization float64 `json:"utilization"`
	// SMActivity is the percent of SMs busy, where the GPU reports it.
	SMActivity *float64 `json:"sm_activity,omitempty"`
	// OfflineCeiling is the GPU's offline ceiling (percent of GPU time), never more than
	// the class's sm_max: the budget its offline containers split, except that each one
	// that fits the MPS budget (OfflineMPSFitted) may use all of it.
	OfflineCeiling float64 `json:"offline_ceiling"`
	// OfflineShare is the same value, under its older name.
	OfflineShare float64 `json:"offline_share"`
	// OfflineContainers is how many running offline containers the GPU has.
	OfflineContainers int `json:"offline_containers"`
	// OnlineDemand is the allocator's estimate of the online workload's need (percent).
	OnlineDemand float64 `json:"online_demand"`
	// OnlineWidth is the widest online kernel libxcuda saw lately, in percent of the SMs
	// (0: none seen); OfflineMPS is the MPS active-thread budget (percent) its offline
	// contexts split, and OfflineMPSFits whether it leaves the online kernels room (see
	// the policy's alloc.fit).
	OnlineWidth    float64 `json:"online_width,omitempty"`
	OfflineMPS     float64 `json:"offline_mps"`
	OfflineMPSFits bool    `json:"offline_mps_fits,omitempty"`
	// OfflineMPSPowerCapped: the budget fits, but the GPU ran at its power cap lately:
	// offline keeps its launches bounded for online work.
	OfflineMPSPowerCapped bool `json:"offline_mps_power_capped,omitempty"`
	// OfflineMPSHeld: the budget fits, but the offline processes may hold this much
	// (percent, summed: MPS fixed their percentages when they started, before their
	// neighbours came), more than the budget: they take turns of alloc.FitTurn
	// (alloc.FitHeld). OfflineMPSFitted of the offline containers fit it in this turn
	// and may use the whole offline ceiling; OfflineMPSWaiting wait for their turn
	// (paused); the rest (idle ones, which take no turn, and those on several GPUs)
	// keep their launches bounded for online work and split the ceiling. A container
	// whose part could not fit beside its neighbours was offered the whole budget
	// (alloc.TurnOffer), so the turns are equal. OfflineMPSFitted is set wherever the
	// budget fits (all of them while nothing is held above it).
	OfflineMPSHeld    float64 `json:"offline_mps_held,omitempty"`
	OfflineMPSFitted  int     `json:"offline_mps_fitted,omitempty"`
	OfflineMPSWaiting int     `json:"offline_mps_waiting,omitempty"`
	// OfflineMPSMemBound: the budget fits, but the online and offline kernels together ask
	// for more memory bandwidth than the GPU has while they run (OnlineMemBW +
	// OfflineMemBW, percent of the bus, above 90%): offline keeps its launches bounded for
	// online work, since kernels that queue for memory slow each other whatever the SM
	// split.
	OfflineMPSMemBound bool    `json:"offline_mps_mem_bound,omitempty"`
	OnlineMemBW        float64 `json:"online_mem_bw,omitempty"`
	OfflineMemBW       float64 `json:"offline_mem_bw,omitempty"`
	// KernelRisks are the offline containers whose kernels are too long beside the
	// online requests for any offline share to protect them.
	KernelRisks []KernelRisk `json:"kernel_risks,omitempty"`
	// DemandSource says where the online utilisation behind the estimate came from, and
	// why a conservative fallback was used when the online processes could not be found.
	DemandSource string `json:"demand_source,omitempty"`
	// CeilingReason is why the offline ceiling last changed, and CeilingChanged when.
	CeilingReason  string    `json:"ceiling_reason,omitempty"`
	CeilingChanged time.Time `json:"ceiling_changed,omitzero"`
	// CeilingReasonKey is the last change's reason in one word or two (calm, burst,
	// burst over, new level, pattern, give back, fallback, health, static, idle; with
	// "/fallback" while the online utilisation is a conservative stand-in).
	CeilingReasonKey string `json:"ceiling_reason_key,omitempty"`
	// Burst is set while the allocator holds a burst of the online launch rate.
	Burst bool `json:"burst,omitempty"`
	// CeilingHistory is the GPU's latest ceiling changes, oldest first (at most 64).
	CeilingHistory []CeilingChange `json:"ceiling_history,omitempty"`
}

// CeilingChange is one change of a GPU's offline ceiling.
type CeilingChange struct {
	At time.Time `json:"at"`
	// From and To are the ceiling before and after (percent of GPU time); Demand is the
	// online demand estimate it was derived from (percent).
	From   float64 `json:"from"`
	To     float64 `json:"to"`
	Demand float64 `json:"demand"`
	// Reason is the short key (as CeilingReasonKey), Detail the figures behind it.
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
}

// NodeReport is the body of GET /v1/node: the node, each GPU with its online workload's
// profile and its current offline pairing, and the co-locations the node measured since
// muxd started. It is the matcher's profile.NodeReport with muxd's own node fields.
type NodeReport struct {
	Node        NodeInfo             `json:"node"`
	GPUs        []profile.GPUReport  `json:"gpus"`
	Colocations []profile.Colocation `json:"colocations,omitempty"`
}

// NodeInfo describes the node muxd runs on.
type NodeInfo struct {
	// Name is the node's name in the cluster (policy node.name, else the hostname).
	Name string `json:"name"`
	// Time is when the report was made.
	Time       time.Time `json:"time"`
	Hostname   string    `json:"hostname"`
	Version    string    `json:"version"`
	Started    time.Time `json:"started"`
	GPUCount   int       `json:"gpu_count"`
	Containers int       `json:"containers"`
	Policy     string    `json:"policy"`
	MPS        MPSInfo   `json:"mps"`
}

// MPSInfo is the state of the node's MPS control daemon under muxd's supervision.
type MPSInfo struct {
	// State is running, down (muxd is restarting it) or disabled (by policy).
	State    string `json:"state"`
	PID      int    `json:"pid,omitempty"`
	Restarts int64  `json:"restarts"`
}

// PolicyInfo reports the policy in force.
type PolicyInfo struct {
	// Source is the file the policy was loaded from, or "embedded default".
	Source string    `json:"source"`
	Loaded time.Time `json:"loaded"`
	// TOML is the policy in force, re-encoded.
	TOML string `json:"toml"`
}

// Error is the body of every non-2xx response.
type Error struct {
	Error string `json:"error"`
}

// MaxIDLen bounds container ids; containerd and runc ids are far shorter in practice.
const MaxIDLen = 128

// The validators below are written out rather than as regexps: muxflow-wrapper links this
// package, and compiling regexps at start-up would be paid on every container start it handles.

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// validIDChars: a letter or digit, then letters, digits, '_', '.', '-'.
func validIDChars(id string) bool {
	if id == "" || !isAlnum(id[0]) {
		return false
	}
	for i := 1; i < len(id); i++ {
		if c := id[i]; !isAlnum(c) && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

// ValidGPU accepts a GPU name as NVIDIA_VISIBLE_DEVICES writes it: "all", an index of
// 1-3 digits, GPU-<8..64 hex or '-'>, or MIG-<1..80 letters, digits, '/' or '-'>.
func ValidGPU(g string) bool {
	all := func(s string, min, max int, ok func(byte) bool) bool {
		if len(s) < min || len(s) > max {
			return false
		}
		for i := 0; i < len(s); i++ {
			if !ok(s[i]) {
				return false
			}
		}
		return true
	}
	switch {
	case g == "all":
		return true
	case strings.HasPrefix(g, "GPU-"):
		return all(g[4:], 8, 64, func(c byte) bool { return isHex(c) || c == '-' })
	case strings.HasPrefix(g, "MIG-"):
		return all(g[4:], 1, 80, func(c byte) bool { return isAlnum(c) || c == '/' || c == '-' })
	}
	return all(g, 1, 3, func(c byte) bool { return c >= '0' && c <= '9' })
}

// ErrInvalid classifies request validation failures (HTTP 400).
var ErrInvalid = errors.New("invalid request")

// ValidateID accepts the ids runc accepts, minus anything that could act as a path:
// letters, digits, '_', '.', '-', not starting with a separator-like character, no "..".
func ValidateID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: container id is empty", ErrInvalid)
	case len(id) > MaxIDLen:
		return fmt.Errorf("%w: container id is %d bytes long, more than %d", ErrInvalid, len(id), MaxIDLen)
	case !validIDChars(id):
		return fmt.Errorf("%w: container id %q may hold only letters, digits, '_', '.' and '-', starting with a letter or digit", ErrInvalid, id)
	}
	return nil
}

// Validate checks the form of a registration's id, GPUs and names. Its class and limits
// are not checked here: policy/classify checks them against the policy, for the runtime's
// create request and for POST /v1/containers alike (classify.Register, classify.Request).
func (r *RegisterRequest) Validate() error {
	if err := ValidateID(r.ID); err != nil {
		return err
	}
	if len(r.GPUs) == 0 {
		return fmt.Errorf("%w: gpus is empty", ErrInvalid)
	}
	if len(r.GPUs) > 64 {
		return fmt.Errorf("%w: gpus lists %d devices, more than 64", ErrInvalid, len(r.GPUs))
	}
	for _, g := range r.GPUs {
		if !ValidGPU(g) {
			return fmt.Errorf("%w: gpu %q is not an index, a GPU-/MIG- UUID or \"all\"", ErrInvalid, truncate(g))
		}
	}
	if err := ValidateName("namespace", r.Namespace, 256); err != nil {
		return err
	}
	if err := ValidateName("pod", r.Pod, 512); err != nil {
		return err
	}
	return nil
}

// MaxPID is the kernel's largest pid (PID_MAX_LIMIT on 64-bit systems).
const MaxPID = 1 << 22

// Validate checks a start report. Pid 1 is init (the host's, or the init of the pid
// namespace a caller sees): never a container's process as muxd sees it.
func (r *StartRequest) Validate() error {
	switch {
	case r.PID == 1:
		return fmt.Errorf("%w: pid 1 is the host's init process, not a container's", ErrInvalid)
	case r.PID <= 0 || r.PID > MaxPID:
		return fmt.Errorf("%w: pid %d is not a valid process id (want 2..%d)", ErrInvalid, r.PID, MaxPID)
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// KernelRisk is an offline container whose kernels are so much longer than its online
// neighbour's requests that every request meeting one waits for it, whatever the offline
// share: its blocks may hold SMs the online kernels need (no hold removes a running
// block), or, where they leave the online kernels their SMs, the two classes together
// overfill the memory bus (MemoryBus). Confining its SMs (muxflow.io/sm-percent) or
// pairing it with another service is what helps.
type KernelRisk struct {
	ID string `json:"id"`
	// OfflineKernel is how long its kernel in flight at a random moment runs (its measured
	// launches' GPU time squared over their GPU time: what a request arriving then meets,
	// measured beside the online work, so longer than alone); OfflinePerLaunch its GPU
	// time per launch. OnlineRequest is the online busy periods' mean length (launch to
	// synchronisation: a request). Ratio is OfflineKernel ÷ OnlineRequest.
	OfflineKernel    time.Duration `json:"offline_kernel_ns"`
	OfflinePerLaunch time.Duration `json:"offline_per_launch_ns"`
	OnlineRequest    time.Duration `json:"online_request_ns"`
	Ratio            float64       `json:"ratio"`
	MemoryBus        bool          `json:"memory_bus,omitempty"`
	// ConfinePercent is the share of the GPU's SMs muxd confines its kernels to while it
	// is named (policy alloc.confine; 0: not confined).
	ConfinePercent uint32 `json:"confine_percent,omitempty"`
	// EvictAt is when muxd evicts it (policy evict.kernel_risk) if it is still named then
	// and no confinement leaves the online kernels their SMs; zero: it will not.
	EvictAt time.Time `json:"evict_at,omitzero"`
}

// String is the risk in one sentence, with what to do about it.
func (r KernelRisk) String() string {
	why := "its blocks may hold SMs the online kernels need"
	if r.MemoryBus {
		why = "the two together ask for more memory bandwidth than the GPU has"
	}
	cure := "confine it (muxflow.io/sm-percent) or pair it with another service"
	if r.ConfinePercent > 0 {
		cure = fmt.Sprintf("muxd confines its kernels to %d%% of the SMs while it is named; muxflow.io/sm-percent confines it from its start, or pair it with another service", r.ConfinePercent)
	}
	if !r.EvictAt.IsZero() {
		cure += fmt.Sprintf("; muxd evicts it at %s (evict.kernel_risk)", r.EvictAt.Format(time.TimeOnly))
	}
	return fmt.Sprintf("a request that meets one of its kernels waits for up to %v, %.0f× an online request (%v), and %s: whatever the offline share; %s",
		r.OfflineKernel.Round(time.Microsecond), r.Ratio, r.OnlineRequest.Round(time.Microsecond), why, cure)
}
