package monitor

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestCollector(t *testing.T) {
	fn := newFakeNode(t, 2)
	fn.gpus[1].set(func(f *fakeGPU) {
		f.temp = 91
		f.reasons = nvml.ClocksThrottleReasonHwThermalSlowdown
		f.gpm = false
		f.fail = map[string]nvml.Return{MetricPower: nvml.ERROR_NOT_SUPPORTED}
	})
	m, _ := newTestMonitor(t, fn.srv, DefaultConfig())
	m.Poll()

	c := m.Collector()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatalf("registering the collector: %v", err)
	}
	want := `
# HELP muxflow_gpu_health_state 1 for the GPU's current health state, 0 for the others.
# TYPE muxflow_gpu_health_state gauge
muxflow_gpu_health_state{gpu="0",state="faulted",uuid="GPU-test-0"} 0
muxflow_gpu_health_state{gpu="0",state="healthy",uuid="GPU-test-0"} 1
muxflow_gpu_health_state{gpu="0",state="recovering",uuid="GPU-test-0"} 0
muxflow_gpu_health_state{gpu="0",state="throttled",uuid="GPU-test-0"} 0
muxflow_gpu_health_state{gpu="0",state="unhealthy",uuid="GPU-test-0"} 0
muxflow_gpu_health_state{gpu="1",state="faulted",uuid="GPU-test-1"} 0
muxflow_gpu_health_state{gpu="1",state="healthy",uuid="GPU-test-1"} 0
muxflow_gpu_health_state{gpu="1",state="recovering",uuid="GPU-test-1"} 0
muxflow_gpu_health_state{gpu="1",state="throttled",uuid="GPU-test-1"} 0
muxflow_gpu_health_state{gpu="1",state="unhealthy",uuid="GPU-test-1"} 1
# HELP muxflow_gpu_health_transitions_total Health state changes, by the state entered.
# TYPE muxflow_gpu_health_transitions_total counter
muxflow_gpu_health_transitions_total{gpu="1",to="unhealthy",uuid="GPU-test-1"} 1
# HELP muxflow_gpu_temperature_celsius GPU core temperature.
# TYPE muxflow_gpu_temperature_celsius gauge
muxflow_gpu_temperature_celsius{gpu="0",uuid="GPU-test-0"} 55
muxflow_gpu_temperature_celsius{gpu="1",uuid="GPU-test-1"} 91
# HELP muxflow_gpu_power_watts Board power draw.
# TYPE muxflow_gpu_power_watts gauge
muxflow_gpu_power_watts{gpu="0",uuid="GPU-test-0"} 300
# HELP muxflow_gpu_admits_offline 1 when new offline work may be placed on the GPU.
# TYPE muxflow_gpu_admits_offline gauge
muxflow_gpu_admits_offline{gpu="0",uuid="GPU-test-0"} 1
muxflow_gpu_admits_offline{gpu="1",uuid="GPU-test-1"} 0
`
	names := []string{"muxflow_gpu_health_state", "muxflow_gpu_health_transitions_total",
		"muxflow_gpu_temperature_celsius", "muxflow_gpu_power_watts", "muxflow_gpu_admits_offline"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	// SM activity: GPU 0 has GPM but needs a second sample, GPU 1 has none.
	if n := testutil.CollectAndCount(c, "muxflow_gpu_sm_activity_percent"); n != 0 {
		t.Errorf("%d SM activity series before any GPM interval, want 0", n)
	}
	if n := testutil.CollectAndCount(c, "muxflow_gpu_clock_event_reason"); n != 2*len(clockReasonNames) {
		t.Errorf("%d clock reason series, want %d", n, 2*len(clockReasonNames))
	}
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric lint: %s: %s", p.Metric, p.Text)
	}
}
