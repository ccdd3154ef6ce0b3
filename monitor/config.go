package monitor

import (
	"errors"
	"fmt"
	"time"
)

// Config holds the sampling period and the health thresholds. muxd maps the
// TOML policy onto it (monitorConfig in muxd/daemon/gpus.go); DefaultConfig
// gives values that are safe on every datacenter GPU from T4 to H200. A zero
// threshold disables that check (documented per field); periods and durations
// must be positive.
type Config struct {
	// Period between two samples of every GPU. NVML refreshes utilisation
	// over its own window (1/6 s to 1 s depending on the GPU), so a shorter
	// period repeats values rather than adding information; 100 ms keeps the
	// reaction to a burst under a quarter of a second with 2-sample debounce.
	Period time.Duration

	// SlowPeriod is how often the metrics no decision needs at once are read:
	// temperature (it moves by degrees per second, and a GPU that overheats
	// shows it every period in the thermal clock-event reasons, which are
	// read every period), power and its limit (unless PowerSoftPercent makes
	// power a decision input) and GPM SM activity (reported, not acted on;
	// read this way it is the average over SlowPeriod). Between two reads
	// every sample carries the latest values. Utilisation, memory, SM clock,
	// clock-event reasons and the processes with their utilisation — what
	// the health machine and the SM allocator decide on — are read every
	// Period, and a lost GPU shows in any of them. 0 reads everything every
	// period; a SlowPeriod shorter than Period
	// means every period.
	SlowPeriod time.Duration

	// ClockSoftPercent: the SM clock below this percentage of the GPU's
	// maximum SM clock, while NVML reports a power or thermal clock-event
	// reason, counts as a soft breach. A clock that drops for idleness or an
	// application-clock setting is not a risk and is ignored. 0 disables.
	ClockSoftPercent float64
	// ClockClearPercent: the clock must be back at or above this percentage
	// (or the throttle reason gone) to count as clear. Must be ≥
	// ClockSoftPercent; the gap is the hysteresis band.
	ClockClearPercent float64

	// TempSoftC: GPU temperature (°C) at or above which the GPU is soft
	// breached. 83 °C sits a few degrees under the "max operating" limit
	// NVIDIA publishes for A100/H100 (85–87 °C), so offline work is cut
	// before the GPU starts slowing itself down. 0 disables.
	TempSoftC float64
	// TempClearC: temperature must fall to or below this to count as clear.
	TempClearC float64
	// TempHardC: temperature at or above which the GPU is Unhealthy at once.
	// 90 °C is at the hardware slowdown point of A100/H100 (≈ 89–90 °C):
	// beyond it the GPU halves its own clocks and online latency suffers
	// whatever the allocator does. 0 disables.
	TempHardC float64

	// MemSoftPercent: used/total device memory at or above which the GPU is
	// soft breached: one more offline allocation could make the online
	// service fail with out-of-memory. 0 disables.
	MemSoftPercent float64
	// MemClearPercent: memory must fall to or below this to count as clear.
	MemClearPercent float64
	// MemHardPercent: used/total memory at or above which the GPU is
	// Unhealthy at once: the online service is one allocation away from an
	// OOM, so offline memory must be freed by eviction. 0 disables.
	MemHardPercent float64

	// PowerSoftPercent: board power at or above this percentage of the
	// enforced power limit counts as a soft breach. Training routinely runs
	// at the power limit without harm (the clock check catches the harmful
	// case), so the default is 0 (disabled).
	PowerSoftPercent float64
	// PowerClearPercent: power must fall to or below this to count as clear.
	PowerClearPercent float64

	// SoftEnterSamples: consecutive samples with a soft breach before the GPU
	// becomes Throttled. 2 filters a single transient clock dip (boost
	// clocks move every few milliseconds) while reacting within 2 periods.
	SoftEnterSamples int
	// HardEnterSamples: consecutive samples with a hard breach before the GPU
	// becomes Unhealthy. Temperature and memory do not glitch, so 1.
	HardEnterSamples int
	// SoftClearAfter: how long every metric must stay clear before Throttled
	// returns to Healthy. Together with the clear thresholds this is the
	// anti-flapping rule: offline work is not let back in on the first
	// good sample.
	SoftClearAfter time.Duration
	// ThrottledMax: Throttled (or Recovering with a breach) for this long
	// escalates to Unhealthy: cutting offline work to its floor did not
	// help, so it must leave the GPU. 30 s is long enough for clocks and
	// temperature to respond to a lower load, and short enough that an
	// online service does not run degraded for minutes.
	ThrottledMax time.Duration
	// RecoverAfter: how long a Recovering GPU must stay clear (no breach at
	// the clear thresholds, no new fault) before it is Healthy again.
	RecoverAfter time.Duration
	// FaultHold: a Faulted GPU stays Faulted at least this long after its
	// latest error event, so a burst of Xids is handled once.
	FaultHold time.Duration
	// TelemetryLostAfter: if no core metric (utilisation, memory,
	// temperature, clock) could be read for this long, the GPU is treated as
	// Unhealthy: a GPU that cannot be watched cannot be shared safely.
	TelemetryLostAfter time.Duration

	// EventLogSize bounds the transition/fault log kept for Events.
	EventLogSize int
	// EventWait bounds one blocking wait on the NVML event set, so the
	// event loop notices cancellation within this time.
	EventWait time.Duration
}

// DefaultConfig returns the defaults documented on Config and in README.md.
func DefaultConfig() Config {
	return Config{
		Period:             100 * time.Millisecond,
		SlowPeriod:         time.Second,
		ClockSoftPercent:   85,
		ClockClearPercent:  90,
		TempSoftC:          83,
		TempClearC:         80,
		TempHardC:          90,
		MemSoftPercent:     95,
		MemClearPercent:    92,
		MemHardPercent:     99,
		PowerSoftPercent:   0,
		PowerClearPercent:  0,
		SoftEnterSamples:   2,
		HardEnterSamples:   1,
		SoftClearAfter:     5 * time.Second,
		ThrottledMax:       30 * time.Second,
		RecoverAfter:       30 * time.Second,
		FaultHold:          10 * time.Second,
		TelemetryLostAfter: 5 * time.Second,
		EventLogSize:       1024,
		EventWait:          500 * time.Millisecond,
	}
}

// Default hysteresis margins between an entry threshold and its clear
// threshold: wide enough to outlast sensor noise and the boost-clock
// jitter (a few °C, a few percent), narrow enough that a GPU does not stay
// Throttled long after the cause has gone.
const (
	TempClearMarginC        = 3
	MemClearMarginPercent   = 3
	ClockClearMarginPercent = 5
	PowerClearMarginPercent = 5
)

// SetClearMargins places every clear threshold at its default margin on the
// safe side of its soft threshold. A policy that only names entry
// thresholds (soft/hard) maps them onto Config and then calls this.
func (c *Config) SetClearMargins() {
	c.TempClearC = max(0, c.TempSoftC-TempClearMarginC)
	c.MemClearPercent = max(0, c.MemSoftPercent-MemClearMarginPercent)
	c.ClockClearPercent = min(100, c.ClockSoftPercent+ClockClearMarginPercent)
	c.PowerClearPercent = max(0, c.PowerSoftPercent-PowerClearMarginPercent)
}

// minPeriod is the shortest period accepted: below it NVML calls on a busy
// 8-GPU node would take most of the period.
const minPeriod = 10 * time.Millisecond

// Validate reports every invalid field at once, so a policy author fixes
// them in one pass.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	if c.Period < minPeriod {
		bad("period %v is below the minimum %v", c.Period, minPeriod)
	}
	if c.SlowPeriod < 0 {
		bad("slow period %v must not be negative", c.SlowPeriod)
	}
	pct := func(name string, v float64) {
		if v < 0 || v > 100 {
			bad("%s %v is not a percentage between 0 and 100", name, v)
		}
	}
	pct("clock soft percent", c.ClockSoftPercent)
	pct("clock clear percent", c.ClockClearPercent)
	pct("memory soft percent", c.MemSoftPercent)
	pct("memory clear percent", c.MemClearPercent)
	pct("memory hard percent", c.MemHardPercent)
	// Power can legitimately exceed the enforced limit for short spikes.
	if c.PowerSoftPercent < 0 || c.PowerSoftPercent > 200 {
		bad("power soft percent %v is outside 0..200", c.PowerSoftPercent)
	}
	if c.PowerClearPercent < 0 || c.PowerClearPercent > 200 {
		bad("power clear percent %v is outside 0..200", c.PowerClearPercent)
	}
	for _, t := range []struct {
		name string
		v    float64
	}{{"soft temperature", c.TempSoftC}, {"clear temperature", c.TempClearC}, {"hard temperature", c.TempHardC}} {
		if t.v < 0 || t.v > 150 {
			bad("%s %v °C is outside 0..150", t.name, t.v)
		}
	}

	// Clear thresholds must sit on the safe side of the entry thresholds,
	// otherwise a metric hovering at the threshold would flap.
	if c.ClockSoftPercent > 0 && c.ClockClearPercent < c.ClockSoftPercent {
		bad("clock clear percent %v must be ≥ clock soft percent %v", c.ClockClearPercent, c.ClockSoftPercent)
	}
	if c.TempSoftC > 0 && c.TempClearC > c.TempSoftC {
		bad("clear temperature %v °C must be ≤ soft temperature %v °C", c.TempClearC, c.TempSoftC)
	}
	if c.TempSoftC > 0 && c.TempHardC > 0 && c.TempHardC < c.TempSoftC {
		bad("hard temperature %v °C must be ≥ soft temperature %v °C", c.TempHardC, c.TempSoftC)
	}
	if c.MemSoftPercent > 0 && c.MemClearPercent > c.MemSoftPercent {
		bad("memory clear percent %v must be ≤ memory soft percent %v", c.MemClearPercent, c.MemSoftPercent)
	}
	if c.MemSoftPercent > 0 && c.MemHardPercent > 0 && c.MemHardPercent < c.MemSoftPercent {
		bad("memory hard percent %v must be ≥ memory soft percent %v", c.MemHardPercent, c.MemSoftPercent)
	}
	if c.PowerSoftPercent > 0 && c.PowerClearPercent > c.PowerSoftPercent {
		bad("power clear percent %v must be ≤ power soft percent %v", c.PowerClearPercent, c.PowerSoftPercent)
	}

	if c.SoftEnterSamples < 1 {
		bad("soft enter samples %d must be at least 1", c.SoftEnterSamples)
	}
	if c.HardEnterSamples < 1 {
		bad("hard enter samples %d must be at least 1", c.HardEnterSamples)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"soft clear time", c.SoftClearAfter},
		{"throttled maximum", c.ThrottledMax},
		{"recovery time", c.RecoverAfter},
		{"fault hold time", c.FaultHold},
		{"telemetry lost time", c.TelemetryLostAfter},
		{"event wait", c.EventWait},
	} {
		if d.v <= 0 {
			bad("%s %v must be positive", d.name, d.v)
		}
	}
	if c.EventLogSize < 1 {
		bad("event log size %d must be at least 1", c.EventLogSize)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("invalid monitor config: %w", err)
	}
	return nil
}
