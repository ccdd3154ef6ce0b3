// Package policy is muxflow's configuration: the TOML schema of /etc/muxflow/policy.toml,
// the embedded default (the same file the packages ship), strict decoding that names the
// key and line of every mistake, and validation of every value's range.
package policy

import (
	_ "embed"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// DefaultTOML is the default policy, commented field by field. It is also installed as
// /etc/muxflow/policy.toml by the packages.
//
//go:embed default.toml
var DefaultTOML string

// DefaultPath is where muxd looks for its policy unless told otherwise.
const DefaultPath = "/etc/muxflow/policy.toml"

// minDayPeriods is the fewest allocator periods a day may have: the learned pattern needs
// a period in each of its buckets (see guard.AllocConfig), and a day of fewer than ten
// has too few of them to say anything.
const minDayPeriods = 10

// MinDayLength is the shortest alloc.day_length accepted at the given alloc.period.
func MinDayLength(period time.Duration) time.Duration {
	return minDayPeriods * period
}

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
	Hold     Hold     `toml:"hold"`
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
	// Fit sizes a GPU's offline MPS active-thread percentage so that its online kernels
	// (their width as libxcuda measures it) fit in the SMs the offline contexts leave,
	// when that leaves offline at least FitMin; offline processes created so need not
	// hold their launches for online work.
	Fit    bool    `toml:"fit"`
	FitMin Percent `toml:"fit_min"`
	// Confine is the share of a GPU's SMs an offline container is confined to (a green
	// context, through libxcuda) while muxd names it for kernels too long beside the
	// online requests, with blocks that may take the SMs those need, where the online
	// kernels leave less than FitMin (else it gets what they leave); split evenly among
	// the containers confined on one GPU; 0 = never.
	Confine Percent `toml:"confine"`
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
	// KernelRisk evicts an offline container muxd has named this long, without a break,
	// for kernels that keep the online requests waiting for SMs, where no confinement
	// leaves the online kernels theirs (they need more than the job's confinement leaves,
	// or the job could not be confined). 0: never; it stays named, and confined where it
	// can be.
	KernelRisk Duration `toml:"kernel_risk"`
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

// Hold configures online-aware gating: offline launches wait while online work is
// pending on their GPU, bounded (libxcuda, through the node's GPU signal page).
type Hold struct {
	// Enabled gives GPU containers a role in the signal page (online publish, offline
	// follow); off, libxcuda ignores the page.
	Enabled bool `toml:"enabled"`
	// Window: an offline launch waits while online work was published within it.
	Window Duration `toml:"window"`
	// Period and Max bound the waiting: at most Max of every Period is spent holding.
	Period Duration `toml:"period"`
	Max    Percent  `toml:"max"`
	// Queue bounds what an offline process keeps outstanding on the GPU while online
	// work was active there within the last 100ms: launches in flight times its measured
	// GPU time per launch stay within Queue (one launch always goes). Held launches
	// cannot take back SMs, so this is what an online request can find ahead of it.
	// It is also what a throttled offline process keeps in flight otherwise (at least
	// 4 launches), so that short kernels do not leave the GPU idle (libxcuda's gate).
	Queue Duration `toml:"queue"`
	// Ahead: when the online requests on a GPU arrive at a regular pace, an offline
	// launch that would still run when the next one is due waits for it (within the
	// same budget).
	Ahead bool `toml:"ahead"`
	// Linger: an offline process whose kernels would take SMs the online kernels need
	// keeps holding for this long after online work on its GPU ends, so that an online
	// service with requests queued starts the next one first. 0: off.
	Linger Duration `toml:"linger"`
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
		} else if msg := printable(v); msg != "" {
			add(key, "%s, got %q", msg, v)
		}
	}
	// program names a binary: a name looked up in PATH, or a clean absolute path.
	program := func(key, v, what string) {
		switch msg := printable(v); {
		case v == "":
			add(key, "must name %s", what)
		case msg != "":
			add(key, "%s, got %q", msg, v)
		case strings.ContainsAny(v, " "):
			add(key, "must name %s without spaces or arguments, got %q", what, v)
		case strings.Contains(v, "/") && (!filepath.IsAbs(v) || filepath.Clean(v) != v):
			add(key, "must be a name looked up in PATH or a clean absolute path, got %q", v)
		}
	}
	positive := func(key string, d Duration, why string) {
		if d.D() <= 0 {
			add(key, "must be above 0 (%s), got %v", why, d.D())
		}
	}
	if p.Node.Name != "" {
		if msg := printable(p.Node.Name); msg != "" {
			add("node.name", "%s, got %q", msg, p.Node.Name)
		} else if len(p.Node.Name) > 253 || strings.Contains(p.Node.Name, " ") {
			add("node.name", "must be a node name (at most 253 characters, no spaces) or empty for the hostname, got %q", p.Node.Name)
		}
	}
	if a := p.Node.MetricsAddress; a != "" {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" || printable(a) != "" {
			add("node.metrics_address", "must be host:port (\":9400\", \"127.0.0.1:9400\") or empty, got %q", a)
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
	program("mps.control", p.MPS.Control, "the nvidia-cuda-mps-control binary")
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
		if msg := annotationKey(v); msg != "" {
			add(key, "must be an annotation key like \"muxflow.io/class\" (%s), got %q", msg, v)
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
	positive("monitor.recovery", p.Monitor.Recovery, "a GPU back from a fault cools down before offline work returns")
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
	if d, least := p.Alloc.DayLength.D(), MinDayLength(p.Alloc.Period.D()); d < least {
		add("alloc.day_length", "must be at least %d alloc periods (%v), got %v", minDayPeriods, least, d)
	}
	if p.Alloc.GiveBack <= 0 {
		add("alloc.give_back", "must be above 0%%")
	}
	if p.Alloc.Confine < 0 || p.Alloc.Confine >= 100 {
		add("alloc.confine", "must be at least 0%% (never) and below 100%%, got %v%%", float64(p.Alloc.Confine))
	}
	if p.Alloc.FitMin < 1 || p.Alloc.FitMin > 100 {
		add("alloc.fit_min", "must be between 1%% and 100%%, got %v%%", float64(p.Alloc.FitMin))
	}
	positive("evict.grace", p.Evict.Grace, "with none, SIGKILL follows SIGTERM at once and offline work cannot drain, which is what keeps online work safe")
	if p.Evict.Grace.D() > 10*60e9 {
		add("evict.grace", "must be at most 10m, got %v", p.Evict.Grace.D())
	}
	if p.Evict.KernelRisk.D() > 24*3600e9 {
		add("evict.kernel_risk", "must be at most 24h (0s: never), got %v", p.Evict.KernelRisk.D())
	}
	if p.Evict.ContainerdAddress != "" {
		abs("evict.containerd_address", p.Evict.ContainerdAddress)
	}
	program("hook.runtime", p.Hook.Runtime, "the OCI runtime (runc or crun)")
	abs("hook.libxcuda", p.Hook.LibXCUDA)
	for key, v := range map[string]string{"hook.online_when_down": p.Hook.OnlineWhenDown, "hook.offline_when_down": p.Hook.OfflineWhenDown} {
		if v != "unshared" && v != "refuse" {
			add(key, "must be unshared or refuse, got %q", v)
		}
	}
	if p.Hook.Timeout.D() <= 0 || p.Hook.Timeout.D() > 60e9 {
		add("hook.timeout", "must be above 0 and at most 1m, got %v", p.Hook.Timeout.D())
	}
	// The bounds are libxcuda's (libxcuda/include/xcuda_ctl.h), which clamps anyway.
	if w := p.Hold.Window.D(); w < 1e3 || w > 100e6 {
		add("hold.window", "must be between 1us and 100ms, got %v", w)
	}
	if d := p.Hold.Period.D(); d < 1e6 || d > 1e9 {
		add("hold.period", "must be between 1ms and 1s, got %v", d)
	}
	if p.Hold.Max < 0 || p.Hold.Max > 95 {
		add("hold.max", "must be between 0%% and 95%% (offline work must keep progressing), got %v%%", float64(p.Hold.Max))
	}
	if q := p.Hold.Queue.D(); q < 1e3 || q > 100e6 {
		add("hold.queue", "must be between 1us and 100ms, got %v", q)
	}
	if l := p.Hold.Linger.D(); l != 0 && (l < 1e3 || l > 10e6) {
		add("hold.linger", "must be 0 (off) or between 1us and 10ms, got %v", l)
	}
	if len(errs) == 0 {
		return nil
	}
	return validationErrors(errs)
}

// printable returns "" if s is valid UTF-8 made of printable characters (no control or
// format characters: NUL, newline, tab, a bidi override...), else what is wrong.
func printable(s string) string {
	if !utf8.ValidString(s) {
		return "must be valid UTF-8"
	}
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return fmt.Sprintf("must be printable (it holds %U)", r)
		}
	}
	return ""
}

// annotationKey checks a Kubernetes annotation key: an optional DNS-subdomain prefix and
// "/", then a name of 1..63 letters, digits, '-', '_' or '.', starting and ending with a
// letter or digit. It returns "" or what is wrong.
func annotationKey(k string) string {
	if k == "" {
		return "it is empty"
	}
	for _, r := range k {
		if r == utf8.RuneError || !unicode.IsPrint(r) || r > unicode.MaxASCII {
			return fmt.Sprintf("it holds %U; only printable ASCII is allowed", r)
		}
	}
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		prefix, name = "", k
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	if hasPrefix {
		if prefix == "" || len(prefix) > 253 {
			return "the prefix before '/' must be 1..253 characters"
		}
		for _, label := range strings.Split(prefix, ".") {
			if label == "" || len(label) > 63 || !alnum(label[0]) || !alnum(label[len(label)-1]) {
				return "the prefix must be a DNS name (lower-case letters, digits, '-' and '.')"
			}
			for i := 0; i < len(label); i++ {
				if c := label[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
					return "the prefix must be a DNS name (lower-case letters, digits, '-' and '.')"
				}
			}
		}
	}
	if name == "" || len(name) > 63 || !alnum(name[0]) || !alnum(name[len(name)-1]) {
		return "the name must be 1..63 characters, starting and ending with a letter or digit"
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !alnum(c) && c != '-' && c != '_' && c != '.' {
			return "the name may hold only letters, digits, '-', '_' and '.'"
		}
	}
	return ""
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
