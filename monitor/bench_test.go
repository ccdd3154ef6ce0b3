package monitor

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"testing"
	"time"
)

// BenchmarkMachineStep is the cost of one health decision (per GPU per
// period), excluding NVML.
func BenchmarkMachineStep(b *testing.B) {
	m := NewMachine(DefaultConfig(), t0)
	samples := []*Sample{calm.sample(t0), warm.sample(t0), lukewarm.sample(t0)}
	now := t0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now = now.Add(period)
		s := samples[i%len(samples)]
		m.Step(Input{Time: now, Sample: s})
	}
}

// BenchmarkPoll8GPUs is the monitor's own cost of one poll of an 8-GPU
// node through the mock NVML (the driver's time comes on top; nvmlprobe
// measures that on real hardware).
// It also reports the NVML calls per GPU per sample (each a driver round trip on a real
// node), for the schedule of issue 19 (slow=1s) and for reading everything every period
// (slow=0, the schedule before it).
func BenchmarkPoll8GPUs(b *testing.B) {
	for _, slow := range []time.Duration{0, time.Second} {
		b.Run(fmt.Sprintf("slow=%v", slow), func(b *testing.B) {
			fn := newFakeNode(b, 8)
			var c CallCounter
			cfg := DefaultConfig()
			cfg.SlowPeriod = slow
			clk := newFakeClock()
			m, err := New(c.Wrap(fn.srv), cfg, clk, quietLogger())
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			m.Poll()
			c.Reset()
			b.ReportAllocs()
			for b.Loop() {
				clk.advance(period)
				m.Poll()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/8/float64(time.Microsecond), "µs/gpu")
			b.ReportMetric(float64(c.Total())/float64(b.N)/8, "nvml-calls/gpu")
		})
	}
}

// BenchmarkRawNVML8GPUs is the baseline for BenchmarkPoll8GPUs: the same
// NVML mock calls made directly, with no monitor around them. The ratio of
// the two is the monitor's own overhead.
func BenchmarkRawNVML8GPUs(b *testing.B) {
	fn := newFakeNode(b, 8)
	for b.Loop() {
		for _, d := range fn.srv.Devices {
			d.GetUtilizationRates()
			d.GetMemoryInfo()
			d.GetTemperature(nvml.TEMPERATURE_GPU)
			d.GetClockInfo(nvml.CLOCK_SM)
			d.GetCurrentClocksEventReasons()
			d.GetPowerUsage()
			d.GetEnforcedPowerLimit()
			d.GetComputeRunningProcesses()
			d.GetProcessUtilization(0)
		}
	}
}
