// Package policy is muxflow's configuration: the TOML schema of /etc/muxflow/policy.toml,
// the embedded default (the same file the packages ship), strict decoding that names the
// key and line of every mistake, and validation of every value's range.
package policy

import (
	_ "embed"
	"fmt"
	"path/filepath"
	"strings"
)

// DefaultTOML is the default policy, commented field by field. It is also installed as
// /etc/muxflow/policy.toml by the packages.
//
//go:embed default.toml
var DefaultTOML string

// DefaultPath is where muxd looks for its policy unless told otherwise.
const DefaultPath = "/etc/muxflow/policy.toml"

// Policy is the whole configuration of a muxflow node.
type Policy struct {
	Node     Node     `toml:"node"`
	MPS      MPS      `toml:"mps"`
	Classes  Classes  `toml:"classes"`
	Classify Classify `toml:"classify"`
	Monitor  Monitor  `toml:"monitor"`
	Alloc    Alloc    `toml:"alloc"`
	Errors   Errors   `toml:"errors"`
	Evict    Evict    `toml:"evict"`
	Hook     Hook     `toml:"hook"`
}

// Node holds where muxd keeps its state and how it is reached.
type Node struct {
	// Name is the node's name in the cluster (the Kubernetes node name) in reports to
	// the matcher; empty means the hostname.
	Name string `toml:"name"`
	// StateDir holds the persistent container registry. Absolute.
	StateDir string `toml:"state_dir"`
	// RunDir holds per-container control blocks and other volatile files (tmpfs). Absolute.
	RunDir string `toml:"run_dir"`
	// Socket is the API's unix socket (mode 0600). Absolute.
	Socket string `toml:"socket"`
	// AllowUIDs may use the API besides root. Peer credentials are checked on every connection.
	AllowUIDs []int `toml:"allow_uids"`
	// MetricsAddress serves Prometheus metrics (/metrics) and the read-only node report
	// for muxmatch (/v1/node) over TCP; empty turns it off.
	MetricsAddress string `toml:"metrics_address"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `toml:"log_level"`
}

// MPS configures the node's MPS control daemon.
type MPS struct {
	// Enabled makes muxd start and supervise an MPS control daemon.
	Enabled bool `toml:"enabled"`
	// Control is the nvidia-cuda-mps-control binary (name looked up in PATH, or absolute).
	Control string `toml:"control"`
	// PipeDir is CUDA_MPS_PIPE_DIRECTORY; it is bind-mounted into GPU containers. Absolute.
	PipeDir string `toml:"pipe_dir"`
	// LogDir is CUDA_MPS_LOG_DIRECTORY. Absolute.
	LogDir string `toml:"log_dir"`
	// DefaultActiveThreadPercentage is the server default; clients can only tighten it.
	DefaultActiveThreadPercentage Percent `toml:"default_active_thread_percentage"`
	// DefaultPinnedMemory is the server's default device memory limit; "0" means none.
	DefaultPinnedMemory Bytes `toml:"default_pinned_memory"`
}

// Classes holds the per-class limits.
type Classes struct {
	Online  Class `toml:"online"`
	Offline Class `toml:"offline"`
}

// Class bounds what one class of container may get.
type Class struct {
	// MemoryLimit caps device memory per GPU per container; "0" means no cap.
	MemoryLimit Bytes `toml:"memory_limit"`
	// SMMin is the share never taken away from this class while it runs.
	SMMin Percent `toml:"sm_min"`
	// SMMax is the most this class may get (and the MPS active-thread percentage ceiling).
	SMMax Percent `toml:"sm_max"`
	// Priority orders containers of the same class when splitting a share; higher first.
	Priority int `toml:"priority"`
}

// Classify decides a GPU container's class and limits from its annotations.
type Classify struct {
	// ClassAnnotation names the annotation holding "online" or "offline".
	ClassAnnotation string `toml:"class_annotation"`
	// MemoryAnnotation names the annotation holding a memory cap like "8GiB".
	MemoryAnnotation string `toml:"memory_annotation"`
	// SMAnnotation names the annotation holding an SM share like "30" (percent).
	SMAnnotation string `toml:"sm_annotation"`
	// Default is the class of a GPU container without the class annotation.
	Default string `toml:"default"`
}

// Monitor configures SysMonitor's sampling and the health state machine's thresholds.
type Monitor struct {
	Period Duration `toml:"period"`
	// Soft thresholds: crossing one moves a GPU to Throttled (offline cut to its floor).
	SoftTemperature float64 `toml:"soft_temperature"`
	SoftMemory      Percent `toml:"soft_memory"`
	SoftSMClock     Percent `toml:"soft_sm_clock"`
	// Hard thresholds: crossing one moves a GPU to Unhealthy (offline evicted).
	HardTemperature float64 `toml:"hard_temperature"`
	HardMemory      Percent `toml:"hard_memory"`
	// ThrottledMax is how long a GPU may stay Throttled before it is declared Unhealthy.
	ThrottledMax Duration `toml:"throttled_max"`
	// Hysteresis is how many consecutive samples must agree before a state changes.
	Hysteresis int `toml:"hysteresis"`
	// Recovery is the cool-down a GPU spends Recovering before it is Healthy again.
	Recovery Duration `toml:"recovery"`
}

// Alloc configures dynamic SM allocation.
type Alloc struct {
	// Mode is "dynamic" (offline gets the complement of online demand) or "static"
	// (offline keeps StaticShare).
	Mode string `toml:"mode"`
	// Period is how often shares are recomputed.
	Period Duration `toml:"period"`
	// Headroom is kept free above the online workload's estimated demand.
	Headroom Percent `toml:"headroom"`
	// StaticShare is offline's share in static mode.
	StaticShare Percent `toml:"static_share"`
	// GiveBack is how fast (per period) the offline share may grow back after a cut.
	GiveBack Percent `toml:"give_back"`
	// DayLength is the period of the online workload's daily pattern, which the
	// allocator learns; experiments on compressed time shorten it.
	DayLength Duration `toml:"day_length"`
}

// Errors configures the mixed error handler.
type Errors struct {
	// RestartMPS restarts the MPS server of a faulted GPU once its clients are gone.
	RestartMPS bool `toml:"restart_mps"`
}

// Evict configures how offline work is removed from a GPU at risk.
type Evict struct {
	// Grace is the time between SIGTERM and SIGKILL.
	Grace Duration `toml:"grace"`
	// Backoff keeps offline work off a GPU that evicted recently.
	Backoff Duration `toml:"backoff"`
	// Kubernetes evicts pods through the Eviction API so they are rescheduled elsewhere.
	Kubernetes bool `toml:"kubernetes"`
	// ContainerdAddress is containerd's socket, used to stop containers.
	ContainerdAddress string `toml:"containerd_address"`
}

// Hook configures muxflow-runtime and muxflow-hook.
type Hook struct {
	// Runtime is the real OCI runtime (runc or crun, a name in PATH or an absolute path).
	Runtime string `toml:"runtime"`
	// LibXCUDA is the host path of libxcuda.so, bind-mounted read-only into GPU containers.
	LibXCUDA string `toml:"libxcuda"`
	// OnlineWhenDown is "unshared" (start without muxflow, warn) or "refuse", for online
	// containers created while muxd is not reachable.
	OnlineWhenDown string `toml:"online_when_down"`
	// OfflineWhenDown is "refuse" or "unshared", for offline containers.
	OfflineWhenDown string `toml:"offline_when_down"`
	// FailClosed makes libxcuda refuse GPU work when its control block is missing.
	FailClosed bool `toml:"fail_closed"`
	// Timeout bounds each call to muxd from the runtime and the hook.
	Timeout Duration `toml:"timeout"`
}

// Validate checks every value's range and the relations between values. Errors name the
// key as written in the file (section.key).
func (p *Policy) Validate() error {
	var errs []fieldError
	add := func(key, format string, args ...any) {
		errs = append(errs, fieldError{key: key, msg: fmt.Sprintf(format, args...)})
	}
	abs := func(key, v string) {
		if v == "" || !filepath.IsAbs(v) || filepath.Clean(v) != v {
			add(key, "must be a clean absolute path, got %q", v)
		}
	}
	abs("node.state_dir", p.Node.StateDir)
	abs("node.run_dir", p.Node.RunDir)
	abs("node.socket", p.Node.Socket)
	for _, u := range p.Node.AllowUIDs {
		if u < 0 {
			add("node.allow_uids", "uid %d is negative", u)
		}
	}
	switch p.Node.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		add("node.log_level", "must be debug, info, warn or error, got %q", p.Node.LogLevel)
	}
	if p.MPS.Control == "" {
		add("mps.control", "must name the nvidia-cuda-mps-control binary")
	}
	abs("mps.pipe_dir", p.MPS.PipeDir)
	abs("mps.log_dir", p.MPS.LogDir)
	if p.MPS.DefaultActiveThreadPercentage < 1 {
		add("mps.default_active_thread_percentage", "must be at least 1%%")
	}
	for name, c := range map[string]Class{"online": p.Classes.Online, "offline": p.Classes.Offline} {
		if c.SMMin > c.SMMax {
			add("classes."+name+".sm_min", "%v is above sm_max %v", float64(c.SMMin), float64(c.SMMax))
		}
		if c.SMMax < 1 {
			add("classes."+name+".sm_max", "must be at least 1%%")
		}
	}
	for key, v := range map[string]string{
		"classify.class_annotation":  p.Classify.ClassAnnotation,
		"classify.memory_annotation": p.Classify.MemoryAnnotation,
		"classify.sm_annotation":     p.Classify.SMAnnotation,
	} {
		if v == "" || len(v) > 253 || strings.ContainsAny(v, " \t\n=") {
			add(key, "must be an annotation key like \"muxflow.io/class\", got %q", v)
		}
	}
	if p.Classify.Default != "online" && p.Classify.Default != "offline" {
		add("classify.default", "must be online or offline, got %q", p.Classify.Default)
	}
	if p.Monitor.Period.D() < 10e6 || p.Monitor.Period.D() > 60e9 {
		add("monitor.period", "must be between 10ms and 1m, got %v", p.Monitor.Period.D())
	}
	for key, v := range map[string]float64{"monitor.soft_temperature": p.Monitor.SoftTemperature, "monitor.hard_temperature": p.Monitor.HardTemperature} {
		if v < 30 || v > 120 {
			add(key, "must be between 30 and 120 °C, got %v", v)
		}
	}
	if p.Monitor.SoftTemperature >= p.Monitor.HardTemperature {
		add("monitor.soft_temperature", "%v must be below hard_temperature %v", p.Monitor.SoftTemperature, p.Monitor.HardTemperature)
	}
	if p.Monitor.SoftMemory > p.Monitor.HardMemory {
		add("monitor.soft_memory", "%v%% must not be above hard_memory %v%%", float64(p.Monitor.SoftMemory), float64(p.Monitor.HardMemory))
	}
	if p.Monitor.Hysteresis < 1 || p.Monitor.Hysteresis > 100 {
		add("monitor.hysteresis", "must be between 1 and 100 samples, got %d", p.Monitor.Hysteresis)
	}
	if p.Monitor.ThrottledMax.D() < p.Monitor.Period.D() {
		add("monitor.throttled_max", "must be at least one monitor.period")
	}
	if p.Alloc.Mode != "dynamic" && p.Alloc.Mode != "static" {
		add("alloc.mode", "must be dynamic or static, got %q", p.Alloc.Mode)
	}
	if p.Alloc.Period.D() < 10e6 || p.Alloc.Period.D() > 60e9 {
		add("alloc.period", "must be between 10ms and 1m, got %v", p.Alloc.Period.D())
	}
	if p.Alloc.Headroom > 50 {
		add("alloc.headroom", "must be at most 50%%, got %v%%", float64(p.Alloc.Headroom))
	}
	if p.Alloc.DayLength.D() < 10e9 {
		add("alloc.day_length", "must be at least 10s, got %v", p.Alloc.DayLength.D())
	}
	if p.Alloc.GiveBack <= 0 {
		add("alloc.give_back", "must be above 0%%")
	}
	if p.Evict.Grace.D() > 10*60e9 {
		add("evict.grace", "must be at most 10m, got %v", p.Evict.Grace.D())
	}
	if p.Evict.ContainerdAddress != "" {
		abs("evict.containerd_address", p.Evict.ContainerdAddress)
	}
	if p.Hook.Runtime == "" {
		add("hook.runtime", "must name the OCI runtime (runc or crun)")
	}
	abs("hook.libxcuda", p.Hook.LibXCUDA)
	for key, v := range map[string]string{"hook.online_when_down": p.Hook.OnlineWhenDown, "hook.offline_when_down": p.Hook.OfflineWhenDown} {
		if v != "unshared" && v != "refuse" {
			add(key, "must be unshared or refuse, got %q", v)
		}
	}
	if p.Hook.Timeout.D() <= 0 || p.Hook.Timeout.D() > 60e9 {
		add("hook.timeout", "must be above 0 and at most 1m, got %v", p.Hook.Timeout.D())
	}
	if len(errs) == 0 {
		return nil
	}
	return validationErrors(errs)
}

// ClassLimits returns the limits of a class by name.
func (p *Policy) ClassLimits(class string) (Class, bool) {
	switch class {
	case "online":
		return p.Classes.Online, true
	case "offline":
		return p.Classes.Offline, true
	}
	return Class{}, false
}
