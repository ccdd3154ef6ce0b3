package monitor

import (
	"strings"
	"testing"
	"time"
)

func TestDefaultConfigIsValid(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		want   []string // substrings of the error; nil means valid
	}{
		{"zero thresholds disable checks", func(c *Config) {
			c.TempSoftC, c.TempClearC, c.TempHardC, c.MemSoftPercent, c.MemClearPercent, c.MemHardPercent = 0, 0, 0, 0, 0, 0
		}, nil},
		{"period too short", func(c *Config) { c.Period = time.Millisecond }, []string{"period 1ms is below the minimum 10ms"}},
		{"percentage above 100", func(c *Config) { c.MemHardPercent = 101 }, []string{"memory hard percent 101 is not a percentage"}},
		{"negative percentage", func(c *Config) { c.ClockSoftPercent = -1 }, []string{"clock soft percent -1"}},
		{"clock clear below soft", func(c *Config) { c.ClockClearPercent = 80 }, []string{"clock clear percent 80 must be ≥ clock soft percent 85"}},
		{"temperature clear above soft", func(c *Config) { c.TempClearC = 84 }, []string{"clear temperature 84 °C must be ≤ soft temperature 83 °C"}},
		{"hard temperature below soft", func(c *Config) { c.TempHardC = 70 }, []string{"hard temperature 70 °C must be ≥ soft temperature 83 °C"}},
		{"absurd temperature", func(c *Config) { c.TempHardC = 500 }, []string{"hard temperature 500 °C is outside 0..150"}},
		{"memory clear above soft", func(c *Config) { c.MemClearPercent = 96 }, []string{"memory clear percent 96 must be ≤ memory soft percent 95"}},
		{"memory hard below soft", func(c *Config) { c.MemHardPercent = 90 }, []string{"memory hard percent 90 must be ≥ memory soft percent 95"}},
		{"power clear above soft", func(c *Config) { c.PowerSoftPercent, c.PowerClearPercent = 90, 95 }, []string{"power clear percent 95 must be ≤ power soft percent 90"}},
		{"power out of range", func(c *Config) { c.PowerSoftPercent = 300 }, []string{"power soft percent 300 is outside 0..200"}},
		{"zero debounce", func(c *Config) { c.SoftEnterSamples, c.HardEnterSamples = 0, 0 }, []string{"soft enter samples 0", "hard enter samples 0"}},
		{"zero durations", func(c *Config) { c.ThrottledMax, c.RecoverAfter, c.FaultHold = 0, -time.Second, 0 }, []string{
			"throttled maximum 0s must be positive", "recovery time -1s must be positive", "fault hold time 0s must be positive"}},
		{"empty event log", func(c *Config) { c.EventLogSize = 0 }, []string{"event log size 0"}},
		{"every error reported at once", func(c *Config) { c.Period, c.EventWait = 0, 0 }, []string{"period 0s", "event wait 0s"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.change(&c)
			err := c.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error containing %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %v, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestSetClearMargins(t *testing.T) {
	c := DefaultConfig()
	c.TempSoftC, c.MemSoftPercent, c.ClockSoftPercent, c.PowerSoftPercent = 85, 90, 97, 98
	c.TempHardC = 92
	c.SetClearMargins()
	if c.TempClearC != 82 || c.MemClearPercent != 87 || c.ClockClearPercent != 100 || c.PowerClearPercent != 93 {
		t.Errorf("clear thresholds %v/%v/%v/%v, want 82/87/100/93", c.TempClearC, c.MemClearPercent, c.ClockClearPercent, c.PowerClearPercent)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("config with margins invalid: %v", err)
	}
	d := DefaultConfig()
	d.SetClearMargins()
	if d != DefaultConfig() {
		t.Errorf("default clear thresholds are not the default margins: %+v", d)
	}
}
