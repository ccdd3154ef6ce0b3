package daemon

import (
	"testing"
	"time"

	"github.com/muxflow/muxflow/policy"
)

// The policy's [monitor] section must always map onto a configuration the monitor
// accepts, with the policy's values where it names them.
func TestMonitorConfigFromPolicy(t *testing.T) {
	p, err := policy.Parse([]byte("[monitor]\nperiod = \"250ms\"\nsoft_temperature = 80.0\nhard_temperature = 88.0\nsoft_memory = \"90%\"\nhysteresis = 4\n"), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	for name, pol := range map[string]*policy.Policy{"default": policy.Default(), "custom": p} {
		if err := monitorConfig(pol).Validate(); err != nil {
			t.Errorf("%s policy gives an invalid monitor configuration: %v", name, err)
		}
	}
	c := monitorConfig(p)
	if c.Period != 250*time.Millisecond || c.TempSoftC != 80 || c.TempHardC != 88 || c.MemSoftPercent != 90 || c.SoftEnterSamples != 4 {
		t.Errorf("policy not mapped: %+v", c)
	}
	if c.TempClearC >= c.TempSoftC || c.MemClearPercent >= c.MemSoftPercent || c.ClockClearPercent <= c.ClockSoftPercent {
		t.Errorf("no hysteresis band: %+v", c)
	}
}
