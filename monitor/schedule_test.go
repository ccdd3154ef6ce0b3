package monitor

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// mockCalls sums every call the go-nvml mock recorded on d (its XxxCalls methods).
func mockCalls(d *server.Device) int {
	n := 0
	v := reflect.ValueOf(d)
	for i := range v.NumMethod() {
		m := v.Type().Method(i)
		if !strings.HasSuffix(m.Name, "Calls") || m.Type.NumIn() != 1 || m.Type.NumOut() != 1 {
			continue
		}
		n += v.Method(i).Call(nil)[0].Len()
	}
	return n
}

func TestSlowMetricsReadEverySlowPeriod(t *testing.T) {
	fn := newFakeNode(t, 1)
	cfg := DefaultConfig()
	m, clk := newTestMonitor(t, fn.srv, cfg)
	m.Poll()
	fn.gpus[0].set(func(f *fakeGPU) {
		f.temp, f.power = 70, 500_000
		f.util = nvml.Utilization{Gpu: 90, Memory: 50}
		f.reasons = nvml.ClocksEventReasonSwThermalSlowdown
	})
	clk.advance(period)
	m.Poll()
	s := m.Snapshot()[0].Sample
	// What decisions need is read every period...
	if *s.GPUUtilPercent != 90 || *s.ClockEventReasons != nvml.ClocksEventReasonSwThermalSlowdown {
		t.Errorf("after one period: utilisation %d, clock reasons %#x; want 90 and the thermal slowdown", *s.GPUUtilPercent, *s.ClockEventReasons)
	}
	// ...what changes slowly is carried until the slow period has passed.
	if *s.TemperatureC != 55 || *s.PowerMilliwatts != 300_000 {
		t.Errorf("after one period: temperature %d, power %d; want the carried 55 and 300000", *s.TemperatureC, *s.PowerMilliwatts)
	}
	clk.advance(cfg.SlowPeriod - period)
	m.Poll()
	s = m.Snapshot()[0].Sample
	if *s.TemperatureC != 70 || *s.PowerMilliwatts != 500_000 {
		t.Errorf("after the slow period: temperature %d, power %d; want 70 and 500000", *s.TemperatureC, *s.PowerMilliwatts)
	}
}

func TestPowerEveryPeriodWhenADecisionUsesIt(t *testing.T) {
	fn := newFakeNode(t, 1)
	cfg := DefaultConfig()
	cfg.PowerSoftPercent, cfg.PowerClearPercent = 90, 85
	m, clk := newTestMonitor(t, fn.srv, cfg)
	m.Poll()
	fn.gpus[0].set(func(f *fakeGPU) { f.power = 690_000 })
	clk.advance(period)
	m.Poll()
	if p := *m.Snapshot()[0].Sample.PowerMilliwatts; p != 690_000 {
		t.Errorf("power after one period = %d, want 690000 (power soft limit set)", p)
	}
}

func TestSlowMetricErrorsCarried(t *testing.T) {
	fn := newFakeNode(t, 1)
	fn.gpus[0].set(func(f *fakeGPU) { f.fail = map[string]nvml.Return{MetricTemperature: nvml.ERROR_UNKNOWN} })
	m, clk := newTestMonitor(t, fn.srv, DefaultConfig())
	m.Poll()
	clk.advance(period)
	m.Poll()
	s := m.Snapshot()[0].Sample
	if _, ok := s.Errors[MetricTemperature]; !ok || s.TemperatureC != nil {
		t.Errorf("between slow reads: temperature %v, errors %v; want the carried error", s.TemperatureC, s.Errors)
	}
}

// TestCallCounterSeesEveryCall checks that CallCounter counts every NVML call the monitor
// makes, against what the go-nvml mock recorded.
func TestCallCounterSeesEveryCall(t *testing.T) {
	fn := newFakeNode(t, 2)
	var c CallCounter
	m, clk := newTestMonitor(t, c.Wrap(fn.srv), DefaultConfig())
	for range 25 {
		m.Poll()
		clk.advance(period)
	}
	// The lib-level calls (DeviceGetHandleByIndex, GPM buffers and metrics) are not
	// recorded on the devices.
	lib := 0
	for name, n := range c.Calls() {
		if name == "DeviceGetHandleByIndex" || name == "GpmMetricsGet" || name == "GpmSampleAlloc" {
			lib += n
		}
	}
	recorded := 0
	for _, d := range fn.srv.Devices {
		recorded += mockCalls(d.(*server.Device))
	}
	// RegisterEvents and GetSupportedEventTypes (the event loop, not sampling) are not
	// counted; newTestMonitor does not run the event loop.
	if got := c.Total() - lib; got != recorded {
		t.Errorf("counter saw %d device calls, the mock recorded %d (%v)", got, recorded, c.Calls())
	}
}

// TestCallsPerSample pins the number of NVML calls per GPU per sample in steady state.
func TestCallsPerSample(t *testing.T) {
	for _, tc := range []struct {
		slow     time.Duration
		noFields bool
		want     float64
	}{
		// Every metric every period (the schedule before issue 19): utilisation,
		// memory, temperature, SM clock, clock-event reasons, power, power limit,
		// 2 for GPM, processes, their utilisation.
		{0, true, 11},
		// Every period: utilisation, memory, SM clock, clock-event reasons,
		// processes, their utilisation; once a second: temperature, power and its
		// limit in one field-values call, 2 for GPM.
		{time.Second, false, 6 + 4.0/10},
		// A driver without the power fields: power and limit one call each.
		{time.Second, true, 6 + 5.0/10},
	} {
		fn := newFakeNode(t, 8)
		for _, g := range fn.gpus {
			g.set(func(f *fakeGPU) { f.noFields = tc.noFields })
		}
		var c CallCounter
		cfg := DefaultConfig()
		cfg.SlowPeriod = tc.slow
		m, clk := newTestMonitor(t, c.Wrap(fn.srv), cfg)
		for range 10 { // warm up: GPM set-up, max clock
			m.Poll()
			clk.advance(period)
		}
		c.Reset()
		const samples = 100
		for range samples {
			m.Poll()
			clk.advance(period)
		}
		got := float64(c.Total()) / samples / 8
		if got > tc.want+0.01 {
			t.Errorf("slow period %v, field values %v: %.2f NVML calls per GPU per sample, want ≤ %.2f (%v)", tc.slow, !tc.noFields, got, tc.want, c.Calls())
		}
		t.Logf("slow period %v, field values %v: %.2f NVML calls per GPU per sample", tc.slow, !tc.noFields, got)
	}
}
