// Package profile defines what the matcher knows about workloads and GPUs: a
// workload's solo profile, the report a node daemon (muxd) serves about each of
// its GPUs at GET /v1/node, and the co-location records a cluster gathers about
// itself, which are the predictor's training data. The types carry JSON tags
// because muxd serves and records them; the CSV form of co-location records is
// what `muxmatch train` reads.
package profile

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrInvalid classifies every validation failure in this package.
var ErrInvalid = errors.New("invalid profile data")

// Profile describes a workload measured while it ran alone on a GPU. Utilisation
// figures are percentages in [0, 100] as NVML and DCGM report them.
type Profile struct {
	// Name identifies the workload configuration (e.g. "ResNet18/CIFAR-10/bs32").
	// Optional; used in logs and plans.
	Name string `json:"name,omitempty"`
	// Model is the model family (e.g. "ResNet18"). Optional; the predictor's
	// evaluation groups by it to measure how it generalises to unseen families.
	Model string `json:"model,omitempty"`
	// GPUUtil is NVML utilisation: the share of time at least one kernel ran.
	// Required.
	GPUUtil float64 `json:"gpu_util"`
	// MemBWUtil is memory-bandwidth activity (NVML memory utilisation or DCGM
	// DRAM activity). Required.
	MemBWUtil float64 `json:"mem_bw_util"`
	// MemoryMiB is the GPU memory the workload holds. Required.
	MemoryMiB float64 `json:"memory_mib"`
	// SMActivity is DCGM-style SM activity (fraction of SMs busy, as a
	// percentage). Optional: nil when the node cannot measure it; it differs
	// from GPUUtil in the way the hardware makes them differ, so the predictor
	// never substitutes one for the other silently.
	SMActivity *float64 `json:"sm_activity,omitempty"`
	// AMP is true when the workload uses mixed precision (tensor cores).
	AMP bool `json:"amp,omitempty"`
	// BatchSize is the per-iteration batch size; 0 when unknown.
	BatchSize int `json:"batch_size,omitempty"`
	// Speed is the solo throughput in iterations per second; 0 when unknown.
	Speed float64 `json:"speed,omitempty"`
	// GPUType is the GPU model the profile was measured on; empty when unknown.
	GPUType string `json:"gpu_type,omitempty"`
	// KernelUS is, for an offline workload, how long (µs) its kernel in flight at a
	// random moment runs, as muxd measured it beside online work (its launches' GPU time
	// squared over their GPU time): what an online request arriving then waits for.
	// 0: unknown.
	KernelUS float64 `json:"kernel_us,omitempty"`
	// RequestUS is, for an online workload, the mean length (µs) of its busy periods on
	// the GPU, from the launch that starts one to the synchronisation that ends it: a
	// request, for a service that synchronises once a request. 0: unknown.
	RequestUS float64 `json:"request_us,omitempty"`
	// WidthPct is an online workload's widest kernel lately, in percent of the SMs its
	// blocks need at once. 0: unknown.
	WidthPct float64 `json:"width_pct,omitempty"`
}

// Validate reports whether every figure is finite and in range.
func (p Profile) Validate() error {
	if err := percent("gpu_util", p.GPUUtil); err != nil {
		return err
	}
	if err := percent("mem_bw_util", p.MemBWUtil); err != nil {
		return err
	}
	if p.SMActivity != nil {
		if err := percent("sm_activity", *p.SMActivity); err != nil {
			return err
		}
	}
	if !finite(p.MemoryMiB) || p.MemoryMiB < 0 {
		return fmt.Errorf("%w: memory_mib %v must be a non-negative number", ErrInvalid, p.MemoryMiB)
	}
	if p.BatchSize < 0 {
		return fmt.Errorf("%w: batch_size %d must not be negative", ErrInvalid, p.BatchSize)
	}
	if !finite(p.Speed) || p.Speed < 0 {
		return fmt.Errorf("%w: speed %v must be a non-negative number", ErrInvalid, p.Speed)
	}
	for _, f := range [...]struct {
		name string
		v    float64
	}{{"kernel_us", p.KernelUS}, {"request_us", p.RequestUS}} {
		if !finite(f.v) || f.v < 0 || f.v > MaxKernel.Seconds()*1e6 {
			return fmt.Errorf("%w: %s %v must be between 0 and %.0f", ErrInvalid, f.name, f.v, MaxKernel.Seconds()*1e6)
		}
	}
	if err := percent("width_pct", p.WidthPct); err != nil {
		return err
	}
	return nil
}

func percent(name string, v float64) error {
	if !finite(v) || v < 0 || v > 100 {
		return fmt.Errorf("%w: %s %v must be a percentage in [0, 100]", ErrInvalid, name, v)
	}
	return nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Health is a GPU's state as SysMonitor classifies it. Only Healthy GPUs take
// new offline work; the other states exist so the matcher can tell why not.
type Health string

// Health states. The monitor may report finer states; anything but Healthy is
// treated as "no new offline work here".
const (
	Healthy   Health = "Healthy"
	Warning   Health = "Warning"
	Unhealthy Health = "Unhealthy"
)

// Workload is a running or pending workload with its solo profile.
type Workload struct {
	// ID identifies the workload cluster-wide: a pod "namespace/name" or a
	// container id. Required.
	ID string `json:"id"`
	// Profile is the workload's solo profile. Required.
	Profile Profile `json:"profile"`
}

// Validate checks the id and the profile.
func (w Workload) Validate() error {
	if w.ID == "" {
		return fmt.Errorf("%w: workload without id", ErrInvalid)
	}
	if err := w.Profile.Validate(); err != nil {
		return fmt.Errorf("workload %q: %w", w.ID, err)
	}
	return nil
}

// GPUReport is what muxd says about one GPU.
type GPUReport struct {
	// UUID is the GPU's NVML UUID; unique cluster-wide. Required.
	UUID string `json:"uuid"`
	// Index is the NVML device index on its node.
	Index int `json:"index"`
	// Type is the GPU model as the cluster names it (e.g. "H200", "T4"); jobs
	// may require one. Required.
	Type string `json:"type"`
	// MemoryTotalMiB and MemoryFreeMiB are the device memory totals. Both 0
	// when the node could not read them yet (a GPU whose memory is unknown
	// is not offered to offline work).
	MemoryTotalMiB float64 `json:"memory_total_mib"`
	MemoryFreeMiB  float64 `json:"memory_free_mib"`
	// Health is SysMonitor's state for the GPU. Required.
	Health Health `json:"health"`
	// Online is the online workload the GPU serves; nil for a GPU without one.
	Online *Workload `json:"online,omitempty"`
	// Offline lists the offline workloads currently co-located on the GPU.
	Offline []Workload `json:"offline,omitempty"`
}

// MemoryKnown reports whether the node could read the GPU's memory.
func (g GPUReport) MemoryKnown() bool { return g.MemoryTotalMiB > 0 }

// Validate checks identity, memory figures and the workloads.
func (g GPUReport) Validate() error {
	if g.UUID == "" {
		return fmt.Errorf("%w: gpu without uuid", ErrInvalid)
	}
	if g.Type == "" {
		return fmt.Errorf("%w: gpu %s without type", ErrInvalid, g.UUID)
	}
	if !finite(g.MemoryTotalMiB) || g.MemoryTotalMiB < 0 {
		return fmt.Errorf("%w: gpu %s memory_total_mib %v must not be negative", ErrInvalid, g.UUID, g.MemoryTotalMiB)
	}
	if !finite(g.MemoryFreeMiB) || g.MemoryFreeMiB < 0 || g.MemoryFreeMiB > g.MemoryTotalMiB {
		return fmt.Errorf("%w: gpu %s memory_free_mib %v must be within [0, %v]", ErrInvalid, g.UUID, g.MemoryFreeMiB, g.MemoryTotalMiB)
	}
	if g.Health == "" {
		return fmt.Errorf("%w: gpu %s without health state", ErrInvalid, g.UUID)
	}
	if g.Online != nil {
		if err := g.Online.Validate(); err != nil {
			return fmt.Errorf("gpu %s online: %w", g.UUID, err)
		}
	}
	for _, w := range g.Offline {
		if err := w.Validate(); err != nil {
			return fmt.Errorf("gpu %s offline: %w", g.UUID, err)
		}
	}
	return nil
}

// NodeInfo identifies the node a report comes from.
type NodeInfo struct {
	// Name is the Kubernetes node name. Required: the scheduler extender
	// answers in node names.
	Name string `json:"name"`
	// Time is when muxd produced the report.
	Time time.Time `json:"time,omitzero"`
}

// NodeReport is the body of muxd's GET /v1/node. Fields other muxd parts add
// to the same object are ignored by the matcher.
type NodeReport struct {
	Node NodeInfo    `json:"node"`
	GPUs []GPUReport `json:"gpus"`
	// Colocations are the co-locations this node hosted since it last
	// reported them; optional.
	Colocations []Colocation `json:"colocations,omitempty"`
}

// Validate checks the node name, every GPU, and that GPU UUIDs are unique.
func (r NodeReport) Validate() error {
	if r.Node.Name == "" {
		return fmt.Errorf("%w: node report without node name", ErrInvalid)
	}
	seen := make(map[string]bool, len(r.GPUs))
	for _, g := range r.GPUs {
		if err := g.Validate(); err != nil {
			return fmt.Errorf("node %s: %w", r.Node.Name, err)
		}
		if seen[g.UUID] {
			return fmt.Errorf("%w: node %s reports gpu %s twice", ErrInvalid, r.Node.Name, g.UUID)
		}
		seen[g.UUID] = true
	}
	for i, c := range r.Colocations {
		if err := c.Validate(); err != nil {
			return fmt.Errorf("node %s colocation %d: %w", r.Node.Name, i, err)
		}
	}
	return nil
}

// Colocation records two workloads that shared a GPU: both solo profiles and
// each one's measured normalised throughput (speed shared / speed alone).
type Colocation struct {
	A Profile `json:"a"`
	B Profile `json:"b"`
	// ANormTput and BNormTput are the measured normalised throughputs of A
	// and B. Required; a slowdown gives a value below 1, measurement noise can
	// push it slightly above.
	ANormTput float64 `json:"a_norm_tput"`
	BNormTput float64 `json:"b_norm_tput"`
	// GPUType is where the co-location ran; optional.
	GPUType string `json:"gpu_type,omitempty"`
	// Time is when the measurement ended; optional.
	Time time.Time `json:"time,omitzero"`
}

// MaxNormTput bounds accepted normalised throughputs: sharing cannot make a
// job much faster than alone, so larger values are measurement errors.
const MaxNormTput = 2.0

// Validate checks both profiles and throughputs.
func (c Colocation) Validate() error {
	if err := c.A.Validate(); err != nil {
		return fmt.Errorf("a: %w", err)
	}
	if err := c.B.Validate(); err != nil {
		return fmt.Errorf("b: %w", err)
	}
	for _, t := range []struct {
		name string
		v    float64
	}{{"a_norm_tput", c.ANormTput}, {"b_norm_tput", c.BNormTput}} {
		if !finite(t.v) || t.v < 0 || t.v > MaxNormTput {
			return fmt.Errorf("%w: %s %v must be within [0, %v]", ErrInvalid, t.name, t.v, MaxNormTput)
		}
	}
	return nil
}
