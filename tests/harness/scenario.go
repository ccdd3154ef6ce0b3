package harness

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/muxflow/muxflow/gpusim/sim"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/muxflow/muxflow/policy"
)

// Scenario is one experiment: a simulated GPU, an online service with its rate trace,
// offline jobs, how long each strategy runs and how much a day is compressed. It is read
// from a TOML file (see tests/scenarios/).
type Scenario struct {
	// Name identifies the scenario in tables; defaults to the file's base name.
	Name        string `toml:"name"`
	Description string `toml:"description"`
	// GPU is a gpusim profile: h100, h200, a100 or t4.
	GPU string `toml:"gpu"`
	// Duration is how long each strategy's shared run lasts (wall time).
	Duration policy.Duration `toml:"duration"`
	// Days is how many compressed days of the online trace fit in Duration: the
	// allocator's day length is Duration ÷ Days, and so is a diurnal trace's period.
	Days float64 `toml:"days"`
	// TimeSlice is gpusim's time slice for contexts that do not share an MPS server.
	TimeSlice policy.Duration `toml:"timeslice"`
	// Sample is how often the harness samples gpusim and muxd for the plot.
	Sample policy.Duration `toml:"sample"`
	// OfflineBaseline is how long the offline jobs run alone to measure their it/s.
	OfflineBaseline policy.Duration `toml:"offline_baseline"`

	Online  Online    `toml:"online"`
	Offline []Offline `toml:"offline"`
	// Muxflow holds the [alloc] policy keys muxd runs with in the muxflow and static
	// strategies.
	Muxflow Alloc `toml:"muxflow"`
}

// Online is the online inference service (gpusim's infer program).
type Online struct {
	// Rate is the trace's shape: constant, diurnal or bursty.
	Rate string `toml:"rate"`
	// MinQPS and MaxQPS: a diurnal trace moves between them over a day (starting at
	// the trough); a bursty one runs at MinQPS with bursts of MaxQPS; constant uses
	// MaxQPS.
	MinQPS float64 `toml:"min_qps"`
	MaxQPS float64 `toml:"max_qps"`
	// BurstOn and BurstEvery shape a bursty trace: bursts of BurstOn every BurstEvery.
	BurstOn    policy.Duration `toml:"burst_on"`
	BurstEvery policy.Duration `toml:"burst_every"`
	// Kernels per request, each KernelUS long alone, launched with Grid blocks of
	// Threads threads, using BW of the device's memory bandwidth.
	Kernels  int          `toml:"kernels"`
	KernelUS float64      `toml:"kernel_us"`
	Grid     int          `toml:"grid"`
	Threads  int          `toml:"threads"`
	BW       *float64     `toml:"bw"`
	IOBytes  policy.Bytes `toml:"io_bytes"`
	Seed     uint64       `toml:"seed"`
}

// Offline is one offline training job (gpusim's train program).
type Offline struct {
	Name     string       `toml:"name"`
	Kernels  int          `toml:"kernels"`
	KernelUS float64      `toml:"kernel_us"`
	BigShare *float64     `toml:"big_share"`
	BW       *float64     `toml:"bw"`
	Mem      policy.Bytes `toml:"mem"`
	// Batch: each step first copies this much input to the GPU and zeroes as much of
	// its gradients (train --batch); with Graph, a copy and a memset node in the graph.
	Batch policy.Bytes `toml:"batch"`
	Graph bool         `toml:"graph"`
}

// Alloc mirrors the policy's [alloc] keys a scenario may set; zero values keep muxd's
// defaults.
type Alloc struct {
	Period      policy.Duration `toml:"period"`
	Headroom    *policy.Percent `toml:"headroom"`
	GiveBack    *policy.Percent `toml:"give_back"`
	StaticShare *policy.Percent `toml:"static_share"`
	// OfflineSMMax is the policy's classes.offline.sm_max: the offline share's ceiling
	// and the MPS active-thread percentage offline contexts are created with.
	OfflineSMMax *policy.Percent `toml:"offline_sm_max"`
	// Fit is the policy's alloc.fit (default on): size the offline MPS percentage so
	// that the online kernels fit beside the offline ones.
	Fit *bool `toml:"fit"`
	// FitMin is the policy's alloc.fit_min: the least room the online kernels must leave
	// for offline to be fitted in it (below it, offline gets the whole GPU).
	FitMin *policy.Percent `toml:"fit_min"`
	// Confine is the policy's alloc.confine: the share of the SMs a job named for kernels
	// too long beside the online requests is confined to ("0%": never).
	Confine *policy.Percent `toml:"confine"`
	// KernelRisk is the policy's evict.kernel_risk: evict a job named that long for
	// kernels no confinement protects the online requests from (0s: never).
	KernelRisk *policy.Duration `toml:"kernel_risk"`
	// HoldQueue is the policy's hold.queue: the GPU time an offline process keeps
	// outstanding while online work is recent.
	HoldQueue *policy.Duration `toml:"hold_queue"`
	// HoldLinger is the policy's hold.linger: how long an offline process whose kernels
	// would take the online kernels' SMs keeps holding after online work ends.
	HoldLinger *policy.Duration `toml:"hold_linger"`
	// HoldPeriod and HoldMax are the policy's hold.period and hold.max: an offline process
	// spends at most HoldMax of every HoldPeriod holding.
	HoldPeriod *policy.Duration `toml:"hold_period"`
	HoldMax    *policy.Percent  `toml:"hold_max"`
}

// LoadScenario reads and validates a scenario file. Unknown keys are errors.
func LoadScenario(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read scenario: %w", err)
	}
	s, err := ParseScenario(data)
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	if s.Name == "" {
		base := path[strings.LastIndex(path, "/")+1:]
		s.Name = strings.TrimSuffix(base, ".toml")
	}
	return s, nil
}

// ParseScenario decodes a scenario, fills defaults and validates it.
func ParseScenario(data []byte) (*Scenario, error) {
	var s Scenario
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&s)
	if err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "toml: "))
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return nil, fmt.Errorf("unknown keys: %s", strings.Join(keys, ", "))
	}
	s.defaults()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

func f64(v float64) *float64 { return &v }

func (s *Scenario) defaults() {
	if s.GPU == "" {
		s.GPU = "h100"
	}
	if s.Days == 0 {
		s.Days = 1
	}
	if s.TimeSlice == 0 {
		s.TimeSlice = policy.Duration(sim.DefaultTimeSlice)
	}
	if s.Sample == 0 {
		s.Sample = policy.Duration(500 * time.Millisecond)
	}
	o := &s.Online
	if o.Rate == "" {
		o.Rate = "constant"
	}
	if o.Kernels == 0 {
		o.Kernels = 4
	}
	if o.KernelUS == 0 {
		o.KernelUS = 250
	}
	if o.Grid == 0 {
		o.Grid = 264
	}
	if o.Threads == 0 {
		o.Threads = 256
	}
	if o.BW == nil {
		o.BW = f64(0.3)
	}
	if o.IOBytes == 0 {
		o.IOBytes = 64 << 10
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	for i := range s.Offline {
		j := &s.Offline[i]
		if j.Name == "" {
			j.Name = "train" + strconv.Itoa(i)
		}
		if j.Kernels == 0 {
			j.Kernels = 10
		}
		if j.KernelUS == 0 {
			j.KernelUS = 500
		}
		if j.BigShare == nil {
			j.BigShare = f64(0.5)
		}
		if j.BW == nil {
			j.BW = f64(0.4)
		}
		if j.Mem == 0 {
			j.Mem = 1 << 30
		}
	}
	if s.Muxflow.Period == 0 {
		s.Muxflow.Period = policy.Duration(100 * time.Millisecond)
	}
}

// gpuProfiles are the profiles gpusimd knows.
var gpuProfiles = map[string]bool{"h100": true, "h200": true, "a100": true, "t4": true}

// Validate checks every field; the first problem is reported.
func (s *Scenario) Validate() error {
	fin := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	o := s.Online
	switch {
	case !gpuProfiles[s.GPU]:
		return fmt.Errorf("gpu %q is not a gpusim profile (h100, h200, a100, t4)", s.GPU)
	case s.Duration.D() < time.Second || s.Duration.D() > 24*time.Hour:
		return fmt.Errorf("duration %v must be between 1s and 24h", s.Duration.D())
	case !fin(s.Days) || s.Days <= 0 || s.Days > 1000:
		return fmt.Errorf("days %v must be in (0, 1000]", s.Days)
	case s.TimeSlice.D() < 100*time.Microsecond || s.TimeSlice.D() > time.Second:
		return fmt.Errorf("timeslice %v must be between 100µs and 1s", s.TimeSlice.D())
	case s.Sample.D() < 50*time.Millisecond || s.Sample.D() > s.Duration.D():
		return fmt.Errorf("sample %v must be between 50ms and the duration", s.Sample.D())
	case s.OfflineBaseline.D() != 0 && s.OfflineBaseline.D() < time.Second:
		return fmt.Errorf("offline_baseline %v must be at least 1s", s.OfflineBaseline.D())
	case o.Rate != "constant" && o.Rate != "diurnal" && o.Rate != "bursty":
		return fmt.Errorf("online.rate %q must be constant, diurnal or bursty", o.Rate)
	case !fin(o.MinQPS) || !fin(o.MaxQPS) || o.MinQPS < 0 || o.MaxQPS <= 0 || o.MaxQPS > 1e5:
		return fmt.Errorf("online.min_qps %v and max_qps %v must be ≥ 0 and in (0, 100000]", o.MinQPS, o.MaxQPS)
	case o.Rate != "constant" && o.MinQPS > o.MaxQPS:
		return fmt.Errorf("online.min_qps %v is above max_qps %v", o.MinQPS, o.MaxQPS)
	case o.Rate == "bursty" && (o.BurstOn <= 0 || o.BurstEvery < o.BurstOn):
		return fmt.Errorf("a bursty trace needs 0 < online.burst_on (%v) ≤ online.burst_every (%v)", o.BurstOn.D(), o.BurstEvery.D())
	case o.Rate != "bursty" && (o.BurstOn != 0 || o.BurstEvery != 0):
		return errors.New("online.burst_on and burst_every apply only to rate = \"bursty\"")
	case o.Kernels < 1 || o.Kernels > 10000:
		return fmt.Errorf("online.kernels %d must be in 1..10000", o.Kernels)
	case !fin(o.KernelUS) || o.KernelUS <= 0 || o.KernelUS > 1e7:
		return fmt.Errorf("online.kernel_us %v must be in (0, 1e7]", o.KernelUS)
	case o.Grid < 1 || o.Grid > 1<<24:
		return fmt.Errorf("online.grid %d must be in 1..16777216", o.Grid)
	case o.Threads < 1 || o.Threads > 1024:
		return fmt.Errorf("online.threads %d must be in 1..1024", o.Threads)
	case !fin(*o.BW) || *o.BW < 0 || *o.BW > 1:
		return fmt.Errorf("online.bw %v must be in [0, 1]", *o.BW)
	case o.IOBytes > 1<<30:
		return fmt.Errorf("online.io_bytes %v is above 1GiB", o.IOBytes)
	case len(s.Offline) == 0:
		return errors.New("at least one [[offline]] job is needed")
	case len(s.Offline) > 8:
		return fmt.Errorf("%d offline jobs; at most 8", len(s.Offline))
	}
	names := map[string]bool{}
	for i, j := range s.Offline {
		switch {
		case names[j.Name]:
			return fmt.Errorf("offline[%d]: name %q is used twice", i, j.Name)
		case !validName(j.Name):
			return fmt.Errorf("offline[%d]: name %q must be 1-32 letters, digits, '-' or '_'", i, j.Name)
		case j.Kernels < 1 || j.Kernels > 100000:
			return fmt.Errorf("offline %s: kernels %d must be in 1..100000", j.Name, j.Kernels)
		case !fin(j.KernelUS) || j.KernelUS <= 0 || j.KernelUS > 1e7:
			return fmt.Errorf("offline %s: kernel_us %v must be in (0, 1e7]", j.Name, j.KernelUS)
		case !fin(*j.BigShare) || *j.BigShare < 0 || *j.BigShare > 1:
			return fmt.Errorf("offline %s: big_share %v must be in [0, 1]", j.Name, *j.BigShare)
		case !fin(*j.BW) || *j.BW < 0 || *j.BW > 1:
			return fmt.Errorf("offline %s: bw %v must be in [0, 1]", j.Name, *j.BW)
		case j.Batch > j.Mem:
			return fmt.Errorf("offline %s: batch %d bytes is larger than mem %d", j.Name, uint64(j.Batch), uint64(j.Mem))
		}
		names[j.Name] = true
	}
	m := s.Muxflow
	if m.Period.D() < 10*time.Millisecond || m.Period.D() > 10*time.Second {
		return fmt.Errorf("muxflow.period %v must be between 10ms and 10s", m.Period.D())
	}
	if m.Headroom != nil && *m.Headroom > 50 {
		return fmt.Errorf("muxflow.headroom %v%% is above 50%%", float64(*m.Headroom))
	}
	return nil
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// WithDuration returns a copy of the scenario that runs for d, keeping the number of
// compressed days (so a shorter run compresses time more, the trace keeps its shape).
func (s *Scenario) WithDuration(d time.Duration) (*Scenario, error) {
	c := *s
	c.Offline = append([]Offline(nil), s.Offline...)
	c.Duration = policy.Duration(d)
	if c.Sample.D() > d {
		c.Sample = policy.Duration(d)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// DayLength is the compressed day: Duration ÷ Days.
func (s *Scenario) DayLength() time.Duration {
	return time.Duration(float64(s.Duration.D()) / s.Days)
}

// Compression is how many seconds of a real day one second of the run stands for.
func (s *Scenario) Compression() float64 {
	return float64(24*time.Hour) / float64(s.DayLength())
}

// RateSpec is infer's --rate argument for the online trace.
func (s *Scenario) RateSpec() string {
	o := s.Online
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	switch o.Rate {
	case "diurnal":
		return "diurnal:" + g(o.MinQPS) + ":" + g(o.MaxQPS) + ":" + g(s.DayLength().Seconds())
	case "bursty":
		ms := func(d policy.Duration) string { return g(float64(d.D()) / float64(time.Millisecond)) }
		return "bursty:" + g(o.MinQPS) + ":" + g(o.MaxQPS) + ":" + ms(o.BurstOn) + ":" + ms(o.BurstEvery)
	default:
		return "constant:" + g(o.MaxQPS)
	}
}

// RateAt is the trace's nominal request rate t into the run (mirrors infer's traces).
func (s *Scenario) RateAt(t time.Duration) float64 {
	o := s.Online
	switch o.Rate {
	case "diurnal":
		x := t.Seconds() / s.DayLength().Seconds()
		return o.MinQPS + (o.MaxQPS-o.MinQPS)*(1-math.Cos(2*math.Pi*x))/2
	case "bursty":
		if t%o.BurstEvery.D() < o.BurstOn.D() {
			return o.MaxQPS
		}
		return o.MinQPS
	default:
		return o.MaxQPS
	}
}

// InferArgs are the online program's arguments for a run of d.
func (s *Scenario) InferArgs(d time.Duration) []string {
	o := s.Online
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	return []string{
		"--rate", s.RateSpec(), "--duration", g(d.Seconds()),
		"--kernels", strconv.Itoa(o.Kernels), "--kernel-us", g(o.KernelUS),
		"--grid", strconv.Itoa(o.Grid), "--threads", strconv.Itoa(o.Threads),
		"--bw", g(*o.BW), "--io-bytes", strconv.FormatUint(uint64(o.IOBytes), 10),
		"--seed", strconv.FormatUint(o.Seed, 10),
	}
}

// TrainArgs are an offline job's arguments for a run of d.
func (j Offline) TrainArgs(d time.Duration) []string {
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	a := []string{
		"--duration", g(d.Seconds()), "--kernels", strconv.Itoa(j.Kernels),
		"--kernel-us", g(j.KernelUS), "--big-share", g(*j.BigShare), "--bw", g(*j.BW),
		"--mem", strconv.FormatUint(uint64(j.Mem), 10),
	}
	if j.Batch > 0 {
		a = append(a, "--batch", strconv.FormatUint(uint64(j.Batch), 10))
	}
	if j.Graph {
		a = append(a, "--graph")
	}
	return a
}

// offlineBaseline is how long offline jobs run alone for their baseline.
func (s *Scenario) offlineBaseline() time.Duration {
	if s.OfflineBaseline != 0 {
		return s.OfflineBaseline.D()
	}
	return min(s.Duration.D(), 8*time.Second)
}
