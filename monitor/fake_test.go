package monitor

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// fakeGPU is the telemetry a test wants one mocked GPU to report. Tests
// change it between polls under mu.
type fakeGPU struct {
	mu         sync.Mutex
	util       nvml.Utilization
	temp       uint32
	clock      uint32
	maxClock   uint32
	reasons    uint64
	power      uint32
	limit      uint32
	usedMem    uint64
	smActivity float64
	gpm        bool
	// noFields: nvmlDeviceGetFieldValues answers NOT_SUPPORTED (old drivers).
	noFields bool
	procs    []nvml.ProcessInfo
	procUtil []nvml.ProcessUtilizationSample
	// fail makes the named metric's NVML call return this code.
	fail map[string]nvml.Return
}

func calmGPU() *fakeGPU {
	return &fakeGPU{
		util: nvml.Utilization{Gpu: 40, Memory: 20}, temp: 55, clock: 1980, maxClock: 1980,
		power: 300_000, limit: 700_000, usedMem: 10 << 30, smActivity: 33.5, gpm: true,
	}
}

func (f *fakeGPU) set(change func(*fakeGPU)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f)
}

// ret returns the configured failure for metric, or SUCCESS; callers hold mu.
func (f *fakeGPU) ret(metric string) nvml.Return {
	if r, ok := f.fail[metric]; ok {
		return r
	}
	return nvml.SUCCESS
}

// fakeNode is a dgxh100 mock server whose devices report fakeGPU telemetry
// and whose event set delivers what tests push on events.
type fakeNode struct {
	srv    *server.Server
	gpus   []*fakeGPU
	events chan nvml.EventData

	mu         sync.Mutex
	gpmValues  map[nvml.GpmSample]float64
	registered map[int]uint64
}

func newFakeNode(t testing.TB, n int) *fakeNode {
	t.Helper()
	fn := &fakeNode{
		srv:        dgxh100.NewWithGPUs(gpus.Multiple(n, gpus.H100_SXM5_80GB)...),
		events:     make(chan nvml.EventData, 16),
		gpmValues:  make(map[nvml.GpmSample]float64),
		registered: make(map[int]uint64),
	}
	for i, d := range fn.srv.Devices {
		d.(*server.Device).UUID = fmt.Sprintf("GPU-test-%d", i) // stable for golden metrics
		f := calmGPU()
		fn.gpus = append(fn.gpus, f)
		fn.install(i, d.(*server.Device), f)
	}
	fn.srv.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) {
		s := &mock.GpmSample{}
		s.FreeFunc = func() nvml.Return { return nvml.SUCCESS }
		return s, nvml.SUCCESS
	}
	fn.srv.GpmMetricsGetFunc = func(q *nvml.GpmMetricsGetType) nvml.Return {
		fn.mu.Lock()
		defer fn.mu.Unlock()
		v, ok := fn.gpmValues[q.Sample2]
		if !ok || q.NumMetrics != 1 || q.Metrics[0].MetricId != uint32(nvml.GPM_METRIC_SM_UTIL) {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		q.Metrics[0].Value = v
		return nvml.SUCCESS
	}
	fn.srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		set := &mock.EventSet{}
		set.WaitFunc = func(ms uint32) (nvml.EventData, nvml.Return) {
			select {
			case e := <-fn.events:
				return e, nvml.SUCCESS
			case <-time.After(time.Duration(ms) * time.Millisecond):
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
		}
		set.FreeFunc = func() nvml.Return { return nvml.SUCCESS }
		return set, nvml.SUCCESS
	}
	return fn
}

func (fn *fakeNode) install(i int, d *server.Device, f *fakeGPU) {
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.util, f.ret(MetricUtilization)
	}
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		total := d.MemoryInfo.Total
		return nvml.Memory{Total: total, Used: f.usedMem, Free: total - f.usedMem}, f.ret(MetricMemory)
	}
	d.GetTemperatureFunc = func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if s != nvml.TEMPERATURE_GPU {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return f.temp, f.ret(MetricTemperature)
	}
	d.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if c != nvml.CLOCK_SM {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return f.clock, f.ret(MetricSMClock)
	}
	d.GetMaxClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if c != nvml.CLOCK_SM {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return f.maxClock, f.ret(MetricSMClockMax)
	}
	d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.reasons, f.ret(MetricClockEvents)
	}
	d.GetCurrentClocksThrottleReasonsFunc = d.GetCurrentClocksEventReasonsFunc
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.power, f.ret(MetricPower)
	}
	d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.limit, f.ret(MetricPowerLimit)
	}
	d.GetFieldValuesFunc = func(vals []nvml.FieldValue) nvml.Return {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.noFields {
			return nvml.ERROR_NOT_SUPPORTED
		}
		for i := range vals {
			var v uint32
			var r nvml.Return
			switch vals[i].FieldId {
			case nvml.FI_DEV_POWER_INSTANT:
				v, r = f.power, f.ret(MetricPower)
			case nvml.FI_DEV_POWER_CURRENT_LIMIT:
				v, r = f.limit, f.ret(MetricPowerLimit)
			default:
				r = nvml.ERROR_NOT_SUPPORTED
			}
			vals[i].ValueType, vals[i].NvmlReturn = uint32(nvml.VALUE_TYPE_UNSIGNED_INT), uint32(r)
			vals[i].Value = [8]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}
		}
		return nvml.SUCCESS
	}
	d.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		on := uint32(0)
		if f.gpm {
			on = 1
		}
		return nvml.GpmSupport{Version: nvml.GPM_SUPPORT_VERSION, IsSupportedDevice: on}, f.ret(MetricSMActivity)
	}
	d.GpmSampleGetFunc = func(s nvml.GpmSample) nvml.Return {
		f.mu.Lock()
		v, r := f.smActivity, f.ret(MetricSMActivity)
		f.mu.Unlock()
		fn.mu.Lock()
		defer fn.mu.Unlock()
		fn.gpmValues[s] = v
		return r
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.procs, f.ret(MetricProcesses)
	}
	d.GetProcessUtilizationFunc = func(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var out []nvml.ProcessUtilizationSample
		for _, u := range f.procUtil {
			if u.TimeStamp > lastSeen {
				out = append(out, u)
			}
		}
		if r := f.ret(MetricProcessUtil); r != nvml.SUCCESS {
			return nil, r
		}
		if len(out) == 0 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return out, nvml.SUCCESS
	}
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
		return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError | nvml.EventTypePState, nvml.SUCCESS
	}
	d.RegisterEventsFunc = func(mask uint64, _ nvml.EventSet) nvml.Return {
		fn.mu.Lock()
		defer fn.mu.Unlock()
		fn.registered[i] = mask
		return nvml.SUCCESS
	}
}

// fakeClock is a settable clock whose tickers tick only when told.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	tickers []*fakeTicker
}

type fakeTicker struct{ c chan time.Time }

func (t *fakeTicker) C() <-chan time.Time { return t.c }
func (t *fakeTicker) Stop()               {}

func newFakeClock() *fakeClock { return &fakeClock{now: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTicker(time.Duration) Ticker {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTicker{c: make(chan time.Time)}
	c.tickers = append(c.tickers, t)
	return t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// tick advances the clock by d and delivers one tick to every ticker. It
// waits for Run to have made its ticker, and the channel is unbuffered, so
// when tick returns the previous tick's Poll has finished.
func (c *fakeClock) tick(d time.Duration) {
	c.advance(d)
	for {
		c.mu.Lock()
		ts := append([]*fakeTicker(nil), c.tickers...)
		now := c.now
		c.mu.Unlock()
		if len(ts) > 0 {
			for _, t := range ts {
				t.c <- now
			}
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newTestMonitor returns a monitor over fn with a fake clock.
func newTestMonitor(t *testing.T, lib nvml.Interface, cfg Config) (*Monitor, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	m, err := New(lib, cfg, clk, quietLogger())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(m.Close)
	return m, clk
}
