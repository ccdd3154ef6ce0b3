package monitor

import (
	"fmt"
	"time"
)

// State is the health of one GPU, and with it what muxd may do with
// offline work on that GPU.
type State string

const (
	// Healthy: offline work runs at its allocated share; new work admitted.
	Healthy State = "healthy"
	// Throttled: a soft threshold was crossed; offline work is cut to its
	// floor (or paused) and no new offline work is admitted.
	Throttled State = "throttled"
	// Unhealthy: a hard threshold was crossed or Throttled lasted too long;
	// offline work is evicted and none admitted.
	Unhealthy State = "unhealthy"
	// Faulted: an error event hit the GPU; error handling runs, no offline
	// work is admitted.
	Faulted State = "faulted"
	// Recovering: cool-down after Unhealthy or Faulted; no new offline work
	// until the GPU has stayed clear for Config.RecoverAfter.
	Recovering State = "recovering"
)

// States lists every state in a stable order (for metrics and docs).
var States = []State{Healthy, Throttled, Unhealthy, Faulted, Recovering}

// AdmitsOffline reports whether new offline work may be placed on the GPU.
func (s State) AdmitsOffline() bool { return s == Healthy }

// Reason explains a transition: which metric, its value and the threshold
// it was compared with, and one sentence for humans.
type Reason struct {
	Metric    string  `json:"metric"`
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	Text      string  `json:"text"`
}

// Transition is one change of state made by Machine.Step.
type Transition struct {
	From   State  `json:"from"`
	To     State  `json:"to"`
	Reason Reason `json:"reason"`
}

// Input is what the machine sees in one step. Sample is nil for a step that
// only carries error events; Faults holds the error events that arrived since
// the previous step; ClearFault says muxd's error handler has reset the GPU,
// which releases a Faulted state held by a reset-class fault.
type Input struct {
	Time       time.Time
	Sample     *Sample
	Faults     []Fault
	ClearFault bool
}

// Machine is the health state machine of one GPU. It is a plain value with
// no goroutines or clock: each Step is a pure function of the previous
// value and the input, so behaviour is table-testable.
type Machine struct {
	cfg   Config
	state State
	since time.Time

	softRun, hardRun int       // consecutive samples breaching soft / hard thresholds
	softBreachSince  time.Time // start of the current run of soft breaches; zero when none
	clearSince       time.Time // start of the current run of clear samples; zero when not clear
	lastTelemetry    time.Time // last sample with a core metric
	lastFault        time.Time // latest fault that is not informational
	needsReset       bool      // a reset-class fault awaits ClearFault
	lost             bool      // the latest sample said the GPU is lost
}

// NewMachine returns a machine in Healthy at time now. Until evidence says
// otherwise a GPU is presumed usable; the first sample that breaches a
// threshold moves it.
func NewMachine(cfg Config, now time.Time) *Machine {
	return &Machine{cfg: cfg, state: Healthy, since: now, lastTelemetry: now}
}

// State returns the current state.
func (m *Machine) State() State { return m.state }

// Since returns when the current state was entered.
func (m *Machine) Since() time.Time { return m.since }

// assessment is what one sample says against the thresholds.
type assessment struct {
	hard  *Reason // first hard breach
	soft  *Reason // first soft breach
	clear bool    // every metric back on the safe side of its clear threshold
}

func (m *Machine) assess(s *Sample) assessment {
	c := m.cfg
	var a assessment
	dirty := false

	if t := s.TemperatureC; t != nil {
		v := float64(*t)
		if c.TempHardC > 0 && v >= c.TempHardC && a.hard == nil {
			a.hard = &Reason{MetricTemperature, v, c.TempHardC, fmt.Sprintf("temperature %.0f °C ≥ hard limit %.0f °C", v, c.TempHardC)}
		}
		if c.TempSoftC > 0 {
			if v >= c.TempSoftC && a.soft == nil {
				a.soft = &Reason{MetricTemperature, v, c.TempSoftC, fmt.Sprintf("temperature %.0f °C ≥ soft limit %.0f °C", v, c.TempSoftC)}
			}
			dirty = dirty || v > c.TempClearC
		}
	}
	if v, ok := s.MemoryUsedPercent(); ok {
		if c.MemHardPercent > 0 && v >= c.MemHardPercent && a.hard == nil {
			a.hard = &Reason{MetricMemory, v, c.MemHardPercent, fmt.Sprintf("memory used %.1f%% ≥ hard limit %.0f%%", v, c.MemHardPercent)}
		}
		if c.MemSoftPercent > 0 {
			if v >= c.MemSoftPercent && a.soft == nil {
				a.soft = &Reason{MetricMemory, v, c.MemSoftPercent, fmt.Sprintf("memory used %.1f%% ≥ soft limit %.0f%%", v, c.MemSoftPercent)}
			}
			dirty = dirty || v > c.MemClearPercent
		}
	}
	if pct, ok := s.SMClockPercent(); ok && c.ClockSoftPercent > 0 && s.ClockEventReasons != nil {
		if throttling := *s.ClockEventReasons & throttleReasonMask; throttling != 0 {
			if pct < c.ClockSoftPercent && a.soft == nil {
				a.soft = &Reason{MetricSMClock, pct, c.ClockSoftPercent, fmt.Sprintf("SM clock %.0f%% of max < %.0f%% with %v", pct, c.ClockSoftPercent, ClockReasonNames(throttling))}
			}
			dirty = dirty || pct < c.ClockClearPercent
		}
	}
	if v, ok := s.PowerPercent(); ok && c.PowerSoftPercent > 0 {
		if v >= c.PowerSoftPercent && a.soft == nil {
			a.soft = &Reason{MetricPower, v, c.PowerSoftPercent, fmt.Sprintf("power %.0f%% of limit ≥ %.0f%%", v, c.PowerSoftPercent)}
		}
		dirty = dirty || v > c.PowerClearPercent
	}
	// A sample that shows nothing proves nothing: it is not a breach, but
	// it must not count towards the clear dwell either.
	a.clear = !dirty && a.hard == nil && a.soft == nil && s.hasCoreTelemetry()
	return a
}

// Step feeds one input to the machine and returns the transition it made,
// if any. At most one transition happens per step.
func (m *Machine) Step(in Input) (Transition, bool) {
	now := in.Time

	// Error events first: they pre-empt every metric rule.
	var fault *Fault
	for i := range in.Faults {
		f := in.Faults[i]
		if f.Class == FaultInformational {
			continue
		}
		m.lastFault = now
		// A lost GPU proves its own reset by answering again; other
		// reset-class faults leave no trace in the metrics, so only the
		// error handler can say they are over.
		if f.Class == FaultReset && f.Kind != FaultGPULost {
			m.needsReset = true
		}
		if fault == nil || (fault.Class != FaultReset && f.Class == FaultReset) {
			fault = &f
		}
	}
	if in.ClearFault {
		m.needsReset = false
	}

	var a assessment
	sampled := in.Sample != nil
	if sampled {
		s := in.Sample
		m.lost = s.Lost
		if s.Lost {
			m.lastFault = now
			if fault == nil {
				fault = &Fault{Time: now, Kind: FaultGPULost, Class: FaultReset, Description: "NVML reports the GPU is lost or needs a reset"}
			}
		} else {
			a = m.assess(s)
			if s.hasCoreTelemetry() {
				m.lastTelemetry = now
			} else if lost := now.Sub(m.lastTelemetry); lost >= m.cfg.TelemetryLostAfter && a.hard == nil {
				a.hard = &Reason{MetricTelemetry, lost.Seconds(), m.cfg.TelemetryLostAfter.Seconds(),
					fmt.Sprintf("no core metric could be read for %v", lost.Round(time.Millisecond))}
				a.clear = false
			}
			m.count(now, a)
		}
	}

	if fault != nil {
		if m.state == Faulted {
			return Transition{}, false
		}
		return m.enter(now, Faulted, Reason{Metric: MetricFault, Value: float64(fault.Xid), Text: fault.Description}), true
	}
	if !sampled || m.lost {
		return Transition{}, false
	}

	switch m.state {
	case Healthy:
		if m.hardRun >= m.cfg.HardEnterSamples {
			return m.enter(now, Unhealthy, *a.hard), true
		}
		if m.softRun >= m.cfg.SoftEnterSamples {
			return m.enter(now, Throttled, *a.soft), true
		}
	case Throttled:
		if m.hardRun >= m.cfg.HardEnterSamples {
			return m.enter(now, Unhealthy, *a.hard), true
		}
		if in := now.Sub(m.since); a.soft != nil && in >= m.cfg.ThrottledMax {
			r := *a.soft
			r.Text = fmt.Sprintf("throttled for %v and still %s", in.Round(time.Second), r.Text)
			return m.enter(now, Unhealthy, r), true
		}
		if d := m.clearFor(now); d >= m.cfg.SoftClearAfter {
			return m.enter(now, Healthy, Reason{Metric: MetricThrottleTime, Value: d.Seconds(), Threshold: m.cfg.SoftClearAfter.Seconds(),
				Text: fmt.Sprintf("every metric clear for %v", d.Round(time.Millisecond))}), true
		}
	case Unhealthy:
		if a.clear {
			return m.enter(now, Recovering, Reason{Text: "every metric back under its clear threshold; cooling down"}), true
		}
	case Faulted:
		// Once the fault is over, hand the GPU to the metric rules: a hard
		// breach still evicts, anything else cools down in Recovering.
		held := now.Sub(m.lastFault)
		if held < m.cfg.FaultHold || m.needsReset {
			break
		}
		if a.hard != nil {
			return m.enter(now, Unhealthy, *a.hard), true
		}
		return m.enter(now, Recovering, Reason{Metric: MetricFault, Value: held.Seconds(), Threshold: m.cfg.FaultHold.Seconds(),
			Text: fmt.Sprintf("no error event for %v; cooling down", held.Round(time.Millisecond))}), true
	case Recovering:
		if m.hardRun >= m.cfg.HardEnterSamples {
			return m.enter(now, Unhealthy, *a.hard), true
		}
		if a.soft != nil && now.Sub(m.softBreachSince) >= m.cfg.ThrottledMax {
			r := *a.soft
			r.Text = fmt.Sprintf("breached for %v while recovering: %s", now.Sub(m.softBreachSince).Round(time.Second), r.Text)
			return m.enter(now, Unhealthy, r), true
		}
		if d := m.clearFor(now); d >= m.cfg.RecoverAfter {
			return m.enter(now, Healthy, Reason{Metric: MetricThrottleTime, Value: d.Seconds(), Threshold: m.cfg.RecoverAfter.Seconds(),
				Text: fmt.Sprintf("stable for %v", d.Round(time.Millisecond))}), true
		}
	}
	return Transition{}, false
}

// count updates the consecutive-sample counters from one assessment.
func (m *Machine) count(now time.Time, a assessment) {
	if a.hard != nil {
		m.hardRun++
	} else {
		m.hardRun = 0
	}
	if a.soft != nil {
		m.softRun++
		if m.softBreachSince.IsZero() {
			m.softBreachSince = now
		}
	} else {
		m.softRun = 0
		m.softBreachSince = time.Time{}
	}
	if a.clear {
		if m.clearSince.IsZero() {
			m.clearSince = now
		}
	} else {
		m.clearSince = time.Time{}
	}
}

// clearFor is how long the GPU has been continuously clear within the
// current state; zero when the latest sample was not clear.
func (m *Machine) clearFor(now time.Time) time.Duration {
	if m.clearSince.IsZero() {
		return 0
	}
	start := m.clearSince
	if m.since.After(start) {
		start = m.since
	}
	return now.Sub(start)
}

func (m *Machine) enter(now time.Time, to State, r Reason) Transition {
	t := Transition{From: m.state, To: to, Reason: r}
	m.state = to
	m.since = now
	return t
}
