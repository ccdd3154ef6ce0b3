package monitor

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)

const period = 100 * time.Millisecond

// reading describes one sample for the tests; zero fields take calm values.
type obs struct {
	temp     uint32  // °C; 0 → 60
	memPct   float64 // 0 → 50
	clockPct float64 // 0 → 100
	reasons  uint64
	powerPct float64 // 0 → 50
	lost     bool
	blind    bool // no core metric readable
}

func (o obs) sample(at time.Time) *Sample {
	if o.lost {
		return &Sample{Time: at, Lost: true}
	}
	if o.blind {
		return &Sample{Time: at, Errors: map[string]string{MetricUtilization: "Unknown Error"}}
	}
	def := func(v, d float64) float64 {
		if v == 0 {
			return d
		}
		return v
	}
	temp := o.temp
	if temp == 0 {
		temp = 60
	}
	const total = 80 << 30
	return &Sample{
		Time:                 at,
		GPUUtilPercent:       ptr[uint32](70),
		TemperatureC:         ptr(temp),
		MemoryTotalBytes:     ptr[uint64](total),
		MemoryUsedBytes:      ptr(uint64(def(o.memPct, 50) / 100 * total)),
		SMClockMaxMHz:        ptr[uint32](2000),
		SMClockMHz:           ptr(uint32(def(o.clockPct, 100) / 100 * 2000)),
		ClockEventReasons:    ptr(o.reasons),
		PowerLimitMilliwatts: ptr[uint32](700000),
		PowerMilliwatts:      ptr(uint32(def(o.powerPct, 50) / 100 * 700000)),
	}
}

// script builds a sequence of machine inputs on a timeline.
type script struct {
	now time.Time
	ins []Input
}

// samples appends n samples of o, one per period.
func (s *script) samples(n int, o obs) *script {
	for range n {
		s.now = s.now.Add(period)
		s.ins = append(s.ins, Input{Time: s.now, Sample: o.sample(s.now)})
	}
	return s
}

// for_ appends samples of o for duration d.
func (s *script) for_(d time.Duration, o obs) *script {
	return s.samples(int(d/period), o)
}

func (s *script) xid(x uint64) *script {
	s.ins = append(s.ins, Input{Time: s.now, Faults: []Fault{ClassifyXid(x, s.now)}})
	return s
}

func (s *script) clearFault() *script {
	s.ins = append(s.ins, Input{Time: s.now, ClearFault: true})
	return s
}

func newScript() *script { return &script{now: t0} }

var (
	calm     = obs{}
	warm     = obs{temp: 84} // soft
	lukewarm = obs{temp: 82} // between clear (80) and soft (83)
	scorch   = obs{temp: 91} // hard
)

func TestMachineTransitions(t *testing.T) {
	tests := []struct {
		name  string
		cfg   func(*Config)
		steps *script
		// want lists transitions as "from->to@seconds:metric".
		want  []string
		final State
	}{
		{
			name:  "calm GPU stays healthy",
			steps: newScript().for_(time.Minute, calm),
			final: Healthy,
		},
		{
			name:  "one warm sample is debounced",
			steps: newScript().samples(5, calm).samples(1, warm).samples(5, calm),
			final: Healthy,
		},
		{
			name:  "two warm samples throttle",
			steps: newScript().samples(1, calm).samples(2, warm),
			want:  []string{"healthy->throttled@0.3:temperature"},
			final: Throttled,
		},
		{
			name:  "clock under 85% with power cap throttles",
			steps: newScript().samples(2, obs{clockPct: 80, reasons: nvml.ClocksEventReasonSwPowerCap}),
			want:  []string{"healthy->throttled@0.2:sm_clock"},
			final: Throttled,
		},
		{
			name:  "clock under 85% with hw thermal slowdown throttles",
			steps: newScript().samples(2, obs{clockPct: 50, reasons: nvml.ClocksThrottleReasonHwThermalSlowdown}),
			want:  []string{"healthy->throttled@0.2:sm_clock"},
			final: Throttled,
		},
		{
			name:  "idle clock drop is not a risk",
			steps: newScript().for_(10*time.Second, obs{clockPct: 20, reasons: nvml.ClocksEventReasonGpuIdle}),
			final: Healthy,
		},
		{
			name:  "power cap at full clock is not a risk",
			steps: newScript().for_(10*time.Second, obs{clockPct: 95, reasons: nvml.ClocksEventReasonSwPowerCap}),
			final: Healthy,
		},
		{
			name:  "memory at 96% throttles",
			steps: newScript().samples(2, obs{memPct: 96}),
			want:  []string{"healthy->throttled@0.2:memory"},
			final: Throttled,
		},
		{
			name:  "memory at 99.5% is unhealthy at once",
			steps: newScript().samples(1, obs{memPct: 99.5}),
			want:  []string{"healthy->unhealthy@0.1:memory"},
			final: Unhealthy,
		},
		{
			name:  "hard temperature is unhealthy at once",
			steps: newScript().samples(1, scorch),
			want:  []string{"healthy->unhealthy@0.1:temperature"},
			final: Unhealthy,
		},
		{
			name:  "power at the limit is ignored by default",
			steps: newScript().for_(5*time.Second, obs{powerPct: 100}),
			final: Healthy,
		},
		{
			name:  "power soft threshold when enabled",
			cfg:   func(c *Config) { c.PowerSoftPercent, c.PowerClearPercent = 98, 90 },
			steps: newScript().samples(2, obs{powerPct: 99}),
			want:  []string{"healthy->throttled@0.2:power"},
			final: Throttled,
		},
		{
			name:  "throttled clears after 5 s clear",
			steps: newScript().samples(2, warm).for_(5*time.Second+period, calm),
			want:  []string{"healthy->throttled@0.2:temperature", "throttled->healthy@5.3:throttled_time"},
			final: Healthy,
		},
		{
			name: "hysteresis: between clear and soft thresholds stays throttled, no escalation",
			steps: newScript().samples(2, warm).
				for_(time.Minute, lukewarm),
			want:  []string{"healthy->throttled@0.2:temperature"},
			final: Throttled,
		},
		{
			name: "no flapping: a metric oscillating around the soft threshold never throttles",
			steps: func() *script {
				s := newScript()
				for range 300 {
					s.samples(1, warm).samples(1, lukewarm)
				}
				return s
			}(),
			final: Healthy,
		},
		{
			name: "no flapping: once throttled, oscillation never clears",
			steps: func() *script {
				s := newScript().samples(2, warm)
				for range 100 {
					s.samples(1, obs{temp: 81}).samples(1, calm).samples(1, calm).samples(1, calm)
				}
				return s
			}(),
			want:  []string{"healthy->throttled@0.2:temperature"},
			final: Throttled,
		},
		{
			name:  "a clear interval shorter than 5 s does not clear",
			steps: newScript().samples(2, warm).for_(4*time.Second, calm).samples(1, lukewarm).for_(4*time.Second, calm),
			want:  []string{"healthy->throttled@0.2:temperature"},
			final: Throttled,
		},
		{
			name:  "throttled for 30 s and still breached escalates",
			steps: newScript().for_(31*time.Second, warm),
			want:  []string{"healthy->throttled@0.2:temperature", "throttled->unhealthy@30.2:temperature"},
			final: Unhealthy,
		},
		{
			name:  "throttled then hard goes unhealthy",
			steps: newScript().samples(2, warm).samples(1, scorch),
			want:  []string{"healthy->throttled@0.2:temperature", "throttled->unhealthy@0.3:temperature"},
			final: Unhealthy,
		},
		{
			name:  "unhealthy stays while hot, recovers when clear, healthy after 30 s",
			steps: newScript().samples(1, scorch).for_(10*time.Second, warm).for_(31*time.Second, calm),
			want: []string{"healthy->unhealthy@0.1:temperature", "unhealthy->recovering@10.2:",
				"recovering->healthy@40.2:throttled_time"},
			final: Healthy,
		},
		{
			name:  "unhealthy in the hysteresis band does not recover",
			steps: newScript().samples(1, scorch).for_(time.Minute, lukewarm),
			want:  []string{"healthy->unhealthy@0.1:temperature"},
			final: Unhealthy,
		},
		{
			name: "a breach while recovering restarts the cool-down",
			steps: newScript().samples(1, scorch).samples(1, calm).
				for_(20*time.Second, calm).samples(1, warm).for_(30*time.Second+period, calm),
			want: []string{"healthy->unhealthy@0.1:temperature", "unhealthy->recovering@0.2:",
				"recovering->healthy@50.4:throttled_time"},
			final: Healthy,
		},
		{
			name:  "a soft breach lasting 30 s while recovering is unhealthy",
			steps: newScript().samples(1, scorch).samples(1, calm).for_(31*time.Second, warm),
			want: []string{"healthy->unhealthy@0.1:temperature", "unhealthy->recovering@0.2:",
				"recovering->unhealthy@30.3:temperature"},
			final: Unhealthy,
		},
		{
			name:  "a hard breach while recovering is unhealthy",
			steps: newScript().samples(1, scorch).samples(1, calm).samples(5, calm).samples(1, scorch),
			want: []string{"healthy->unhealthy@0.1:temperature", "unhealthy->recovering@0.2:",
				"recovering->unhealthy@0.8:temperature"},
			final: Unhealthy,
		},
		{
			name:  "application Xid faults, clears itself after the hold, then recovers",
			steps: newScript().samples(10, calm).xid(13).for_(41*time.Second, calm),
			want: []string{"healthy->faulted@1.0:fault", "faulted->recovering@11.0:fault",
				"recovering->healthy@41.0:throttled_time"},
			final: Healthy,
		},
		{
			name:  "another fault while faulted extends the hold",
			steps: newScript().samples(1, calm).xid(31).for_(8*time.Second, calm).xid(43).for_(9*time.Second, calm).samples(11, calm),
			want:  []string{"healthy->faulted@0.1:fault", "faulted->recovering@18.1:fault"},
			final: Recovering,
		},
		{
			name:  "reset-class Xid holds faulted until cleared",
			steps: newScript().samples(1, calm).xid(79).for_(2*time.Minute, calm).clearFault().samples(1, calm),
			want:  []string{"healthy->faulted@0.1:fault", "faulted->recovering@120.2:fault"},
			final: Recovering,
		},
		{
			name:  "double-bit ECC Xid 48 is reset-class",
			steps: newScript().samples(1, calm).xid(48).for_(time.Minute, calm),
			want:  []string{"healthy->faulted@0.1:fault"},
			final: Faulted,
		},
		{
			name:  "clear before the hold has passed waits for the hold",
			steps: newScript().samples(1, calm).xid(95).clearFault().for_(10*time.Second, calm).samples(1, calm),
			want:  []string{"healthy->faulted@0.1:fault", "faulted->recovering@10.1:fault"},
			final: Recovering,
		},
		{
			name:  "informational Xid changes nothing",
			steps: newScript().samples(1, calm).xid(63).xid(92).for_(time.Second, calm),
			final: Healthy,
		},
		{
			name:  "unknown critical Xid is treated as an application fault",
			steps: newScript().samples(1, calm).xid(999).for_(11*time.Second, calm),
			want:  []string{"healthy->faulted@0.1:fault", "faulted->recovering@10.1:fault"},
			final: Recovering,
		},
		{
			name:  "a hot GPU leaving faulted goes unhealthy",
			steps: newScript().samples(1, calm).xid(13).for_(11*time.Second, scorch),
			want:  []string{"healthy->faulted@0.1:fault", "faulted->unhealthy@10.1:temperature"},
			final: Unhealthy,
		},
		{
			name:  "lost GPU faults and stays faulted while lost",
			steps: newScript().samples(1, calm).for_(time.Minute, obs{lost: true}),
			want:  []string{"healthy->faulted@0.2:fault"},
			final: Faulted,
		},
		{
			name:  "a GPU that comes back after loss recovers after the hold",
			steps: newScript().samples(1, calm).for_(time.Second, obs{lost: true}).for_(11*time.Second, calm),
			want:  []string{"healthy->faulted@0.2:fault", "faulted->recovering@11.1:fault"},
			final: Recovering,
		},
		{
			name:  "telemetry lost for 5 s is unhealthy, back is recovering",
			steps: newScript().samples(1, calm).for_(6*time.Second, obs{blind: true}).samples(1, calm),
			want:  []string{"healthy->unhealthy@5.1:telemetry", "unhealthy->recovering@6.2:"},
			final: Recovering,
		},
		{
			name:  "short telemetry gaps are tolerated",
			steps: newScript().samples(1, calm).for_(4*time.Second, obs{blind: true}).samples(1, calm).for_(4*time.Second, obs{blind: true}),
			final: Healthy,
		},
		{
			name:  "blind samples do not count towards clearing",
			steps: newScript().samples(2, warm).samples(1, calm).for_(4900*time.Millisecond, obs{blind: true}).samples(1, calm),
			want:  []string{"healthy->throttled@0.2:temperature"},
			final: Throttled,
		},
		{
			name: "disabled thresholds never fire",
			cfg: func(c *Config) {
				c.TempSoftC, c.TempHardC, c.MemSoftPercent, c.MemHardPercent, c.ClockSoftPercent = 0, 0, 0, 0, 0
			},
			steps: newScript().for_(time.Minute, obs{temp: 99, memPct: 100, clockPct: 10, reasons: nvml.ClocksEventReasonSwPowerCap}),
			final: Healthy,
		},
		{
			name:  "debounce is configurable",
			cfg:   func(c *Config) { c.SoftEnterSamples = 5 },
			steps: newScript().samples(4, warm).samples(1, calm).samples(5, warm),
			want:  []string{"healthy->throttled@1.0:temperature"},
			final: Throttled,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("test config invalid: %v", err)
			}
			m := NewMachine(cfg, t0)
			var got []string
			for _, in := range tc.steps.ins {
				tr, ok := m.Step(in)
				if !ok {
					continue
				}
				if tr.From == tr.To {
					t.Errorf("self transition %v at %v", tr, in.Time)
				}
				if tr.Reason.Text == "" {
					t.Errorf("transition %s->%s has no reason text", tr.From, tr.To)
				}
				got = append(got, fmt.Sprintf("%s->%s@%.1f:%s", tr.From, tr.To, in.Time.Sub(t0).Seconds(), tr.Reason.Metric))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("transitions (-want +got):\n%s", diff)
			}
			if m.State() != tc.final {
				t.Errorf("final state %s, want %s", m.State(), tc.final)
			}
		})
	}
}

func TestMachineReasonExplainsCause(t *testing.T) {
	m := NewMachine(DefaultConfig(), t0)
	s := newScript().samples(1, obs{temp: 93})
	tr, ok := m.Step(s.ins[0])
	if !ok {
		t.Fatal("93 °C did not change state")
	}
	want := Reason{Metric: MetricTemperature, Value: 93, Threshold: 90, Text: "temperature 93 °C ≥ hard limit 90 °C"}
	if diff := cmp.Diff(want, tr.Reason); diff != "" {
		t.Errorf("reason (-want +got):\n%s", diff)
	}

	m = NewMachine(DefaultConfig(), t0)
	s = newScript().for_(31*time.Second, warm)
	var last Transition
	for _, in := range s.ins {
		if tr, ok := m.Step(in); ok {
			last = tr
		}
	}
	if last.To != Unhealthy || !strings.HasPrefix(last.Reason.Text, "throttled for 30s and still temperature 84") {
		t.Errorf("escalation reason = %+v, want one naming the throttled time and the metric", last)
	}
}

func TestAdmitsOffline(t *testing.T) {
	for _, s := range States {
		if got, want := s.AdmitsOffline(), s == Healthy; got != want {
			t.Errorf("%s.AdmitsOffline() = %v, want %v", s, got, want)
		}
	}
}

func TestClassifyXid(t *testing.T) {
	tests := []struct {
		xid  uint64
		want FaultClass
	}{
		{13, FaultApplication}, {31, FaultApplication}, {43, FaultApplication}, {94, FaultApplication},
		{48, FaultReset}, {79, FaultReset}, {95, FaultReset}, {64, FaultReset}, {74, FaultReset}, {119, FaultReset},
		{63, FaultInformational}, {92, FaultInformational},
		{12345, FaultApplication},
	}
	for _, tc := range tests {
		f := ClassifyXid(tc.xid, t0)
		if f.Class != tc.want || f.Kind != FaultXid || f.Xid != tc.xid || !strings.Contains(f.Description, fmt.Sprint(tc.xid)) {
			t.Errorf("ClassifyXid(%d) = %+v, want class %s with the number in its description", tc.xid, f, tc.want)
		}
	}
}
