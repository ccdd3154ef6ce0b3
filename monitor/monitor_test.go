package monitor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestSampleReadsEveryMetric(t *testing.T) {
	fn := newFakeNode(t, 2)
	fn.gpus[0].set(func(f *fakeGPU) {
		f.reasons = nvml.ClocksEventReasonSwPowerCap
		f.procs = []nvml.ProcessInfo{{Pid: 200, UsedGpuMemory: 6 << 30}, {Pid: 100, UsedGpuMemory: valueNotAvailable}}
		f.procUtil = []nvml.ProcessUtilizationSample{
			{Pid: 100, TimeStamp: 10, SmUtil: 5, MemUtil: 1},
			{Pid: 100, TimeStamp: 20, SmUtil: 30, MemUtil: 10}, // newest for pid 100
			{Pid: 300, TimeStamp: 15, SmUtil: 99},              // exited: not listed
		}
	})
	m, clk := newTestMonitor(t, fn.srv, DefaultConfig())
	m.Poll()
	// One slow period later, so that the slow metrics (GPM's SM activity
	// among them) are read a second time.
	clk.advance(DefaultConfig().SlowPeriod)
	m.Poll()

	snap := m.Snapshot()
	if len(snap) != 2 {
		t.Fatalf("snapshot has %d GPUs, want 2", len(snap))
	}
	total := fn.srv.Devices[0].(*server.Device).MemoryInfo.Total
	want := &Sample{
		Time:                 t0.Add(DefaultConfig().SlowPeriod),
		GPUUtilPercent:       ptr[uint32](40),
		MemUtilPercent:       ptr[uint32](20),
		SMActivityPercent:    ptr(33.5),
		SMClockMHz:           ptr[uint32](1980),
		SMClockMaxMHz:        ptr[uint32](1980),
		MemoryUsedBytes:      ptr[uint64](10 << 30),
		MemoryTotalBytes:     ptr(total),
		TemperatureC:         ptr[uint32](55),
		PowerMilliwatts:      ptr[uint32](300_000),
		PowerLimitMilliwatts: ptr[uint32](700_000),
		ClockEventReasons:    ptr[uint64](nvml.ClocksEventReasonSwPowerCap),
		Processes: []ProcessSample{
			{PID: 100, SMUtilPercent: ptr[uint32](30), MemUtilPercent: ptr[uint32](10)},
			{PID: 200, UsedMemoryBytes: ptr[uint64](6 << 30)},
		},
	}
	if diff := cmp.Diff(want, snap[0].Sample); diff != "" {
		t.Errorf("GPU 0 sample (-want +got):\n%s", diff)
	}
	g := snap[0]
	if g.Index != 0 || !strings.HasPrefix(g.UUID, "GPU-") || g.Name == "" || g.State != Healthy || !g.AdmitsOffline || g.Samples != 2 {
		t.Errorf("GPU 0 status = %+v, want index 0, a GPU- UUID, a name, healthy, admitting, 2 samples", g)
	}
	if snap[1].UUID == g.UUID {
		t.Errorf("both GPUs have UUID %s", g.UUID)
	}
}

func TestSMActivityNeedsTwoGPMSamples(t *testing.T) {
	fn := newFakeNode(t, 1)
	m, clk := newTestMonitor(t, fn.srv, DefaultConfig())
	m.Poll()
	if s := m.Snapshot()[0].Sample; s.SMActivityPercent != nil || len(s.Errors) != 0 {
		t.Errorf("first sample: SM activity %v, errors %v; want none (GPM needs an interval)", s.SMActivityPercent, s.Errors)
	}
	for _, v := range []float64{12.5, 80} {
		fn.gpus[0].set(func(f *fakeGPU) { f.smActivity = v })
		clk.advance(DefaultConfig().SlowPeriod)
		m.Poll()
		if got := m.Snapshot()[0].Sample.SMActivityPercent; got == nil || *got != v {
			t.Errorf("SM activity = %v, want %v", got, v)
		}
	}
}

func TestSampleWithoutOptionalMetrics(t *testing.T) {
	// A T4-like GPU: no GPM, no power readings, no per-process
	// utilisation; the monitor must keep working on what is left.
	fn := newFakeNode(t, 1)
	fn.gpus[0].set(func(f *fakeGPU) {
		f.gpm = false
		f.fail = map[string]nvml.Return{
			MetricPower:       nvml.ERROR_NOT_SUPPORTED,
			MetricPowerLimit:  nvml.ERROR_NOT_SUPPORTED,
			MetricProcessUtil: nvml.ERROR_NOT_SUPPORTED,
			MetricClockEvents: nvml.ERROR_FUNCTION_NOT_FOUND,
		}
	})
	m, clk := newTestMonitor(t, fn.srv, DefaultConfig())
	for range 3 {
		m.Poll()
		clk.advance(period)
	}
	s := m.Snapshot()[0]
	wantUnsupported := []string{MetricClockEvents, MetricPower, MetricPowerLimit, MetricProcessUtil, MetricSMActivity}
	if diff := cmp.Diff(wantUnsupported, s.Sample.Unsupported, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("unsupported (-want +got):\n%s", diff)
	}
	if len(s.Sample.Errors) != 0 || s.Sample.PowerMilliwatts != nil || s.Sample.SMActivityPercent != nil {
		t.Errorf("sample = %+v, want no errors and no power or SM activity", s.Sample)
	}
	if s.Sample.TemperatureC == nil || s.State != Healthy {
		t.Errorf("core metrics missing or state %s; want temperature and healthy", s.State)
	}
	if n := len(fn.srv.Devices[0].(*server.Device).GpmSampleGetCalls()); n != 0 {
		t.Errorf("GpmSampleGet called %d times on a GPU without GPM", n)
	}
}

func TestSampleErrorsPerMetric(t *testing.T) {
	for _, metric := range []string{MetricUtilization, MetricMemory, MetricTemperature, MetricSMClock,
		MetricClockEvents, MetricPower, MetricPowerLimit, MetricSMActivity, MetricProcesses, MetricProcessUtil} {
		t.Run(metric, func(t *testing.T) {
			fn := newFakeNode(t, 1)
			fn.gpus[0].set(func(f *fakeGPU) { f.fail = map[string]nvml.Return{metric: nvml.ERROR_UNKNOWN} })
			m, clk := newTestMonitor(t, fn.srv, DefaultConfig())
			m.Poll()
			clk.advance(period)
			m.Poll()
			s := m.Snapshot()[0]
			if got := s.Sample.Errors; len(got) != 1 || got[metric] == "" {
				t.Errorf("errors = %v, want exactly %s", got, metric)
			}
			if s.Sample.Lost || s.State != Healthy {
				t.Errorf("one failing metric made the GPU lost=%v state=%s", s.Sample.Lost, s.State)
			}
		})
	}
}

func TestOldDriverWithoutNewSymbols(t *testing.T) {
	fn := newFakeNode(t, 1)
	fn.srv.LookupSymbolFunc = func(name string) error {
		if name == "nvmlDeviceGetCurrentClocksEventReasons" || strings.HasPrefix(name, "nvmlGpm") {
			return errors.New("symbol not found")
		}
		return nil
	}
	d := fn.srv.Devices[0].(*server.Device)
	d.GetCurrentClocksEventReasonsFunc = nil // calling it would panic
	d.GetCurrentClocksThrottleReasonsFunc = func() (uint64, nvml.Return) {
		return nvml.ClocksThrottleReasonHwSlowdown, nvml.SUCCESS
	}
	m, _ := newTestMonitor(t, fn.srv, DefaultConfig())
	m.Poll()
	s := m.Snapshot()[0].Sample
	if s.ClockEventReasons == nil || *s.ClockEventReasons != nvml.ClocksThrottleReasonHwSlowdown {
		t.Errorf("clock reasons = %v, want hw_slowdown through the old API", s.ClockEventReasons)
	}
	if len(s.Errors) != 0 || len(d.GpmQueryDeviceSupportCalls()) != 0 {
		t.Errorf("errors %v, GPM queried %d times; want no errors and no GPM calls", s.Errors, len(d.GpmQueryDeviceSupportCalls()))
	}
}

func TestPartialAdapterDoesNotCrash(t *testing.T) {
	// An NVML implementation that only knows identities: every metric call
	// panics inside the mock. The monitor must record, not crash, and treat
	// the blind GPU as unhealthy once telemetry has been gone long enough.
	dev := &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return "GPU-bare", nvml.SUCCESS },
		GetNameFunc: func() (string, nvml.Return) { return "bare", nvml.SUCCESS },
	}
	lib := &mock.Interface{
		DeviceGetCountFunc:         func() (int, nvml.Return) { return 1, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(int) (nvml.Device, nvml.Return) { return dev, nvml.SUCCESS },
	}
	m, clk := newTestMonitor(t, lib, DefaultConfig())
	for range 60 {
		m.Poll()
		clk.advance(period)
	}
	s := m.Snapshot()[0]
	if !strings.Contains(s.Sample.Errors[MetricUtilization], "panicked") {
		t.Errorf("utilisation error = %q, want the recovered panic", s.Sample.Errors[MetricUtilization])
	}
	if s.State != Unhealthy || s.Reason.Metric != MetricTelemetry {
		t.Errorf("state %s (%+v), want unhealthy for lost telemetry", s.State, s.Reason)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Run(ctx); err != nil { // the event loop must give up quietly too
		t.Errorf("Run = %v", err)
	}
}

func TestGPULostFaultsOnceAndRecovers(t *testing.T) {
	fn := newFakeNode(t, 2)
	m, clk := newTestMonitor(t, fn.srv, DefaultConfig())
	m.Poll()
	fn.gpus[1].set(func(f *fakeGPU) {
		f.fail = map[string]nvml.Return{MetricUtilization: nvml.ERROR_GPU_IS_LOST, MetricMemory: nvml.ERROR_GPU_IS_LOST}
	})
	for i := range 20 {
		if i == 10 { // an unrelated event in the middle must not split the loss
			m.handleEvent(nvml.EventData{Device: fn.srv.Devices[1], EventType: nvml.EventTypeXidCriticalError, EventData: 63})
		}
		clk.advance(period)
		m.Poll()
	}
	snap := m.Snapshot()
	if snap[0].State != Healthy {
		t.Errorf("GPU 0 state %s, want healthy", snap[0].State)
	}
	if s := snap[1]; s.State != Faulted || !s.Sample.Lost || s.Sample.TemperatureC != nil || s.LastFault == nil || s.LastFault.Xid != 63 {
		t.Errorf("GPU 1 = %+v, want faulted, lost, no stale metrics, last fault the Xid 63", s)
	}
	var faults, transitions int
	for _, e := range m.Events(time.Time{}) {
		switch e.Kind {
		case EventFault:
			if e.Fault.Kind == FaultGPULost {
				faults++
			}
		case EventTransition:
			transitions++
		}
	}
	if faults != 1 || transitions != 1 {
		t.Errorf("%d gpu_lost fault and %d transition events, want 1 each for one loss", faults, transitions)
	}

	fn.gpus[1].set(func(f *fakeGPU) { f.fail = nil })
	for range 110 {
		clk.advance(period)
		m.Poll()
	}
	if s := m.Snapshot()[1]; s.State != Recovering {
		t.Errorf("GPU 1 back for 11 s: state %s, want recovering", s.State)
	}
}

func TestXidEventFaultsItsGPU(t *testing.T) {
	fn := newFakeNode(t, 2)
	m, clk := newTestMonitor(t, fn.srv, DefaultConfig())
	events, cancelSub := m.Subscribe(16)
	defer cancelSub()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()

	fn.events <- nvml.EventData{Device: fn.srv.Devices[1], EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	var got []Event
	for len(got) < 2 {
		select {
		case e := <-events:
			got = append(got, e)
		case <-time.After(30 * time.Second):
			t.Fatalf("no fault and transition events after an Xid; got %+v", got)
		}
	}
	if !m.ListeningForEvents() {
		t.Error("ListeningForEvents() = false while an event was just received")
	}
	if got[0].Kind != EventFault || got[0].GPU != 1 || got[0].Fault.Xid != 79 || got[0].Fault.Class != FaultReset {
		t.Errorf("first event %+v, want the Xid 79 reset-class fault on GPU 1", got[0])
	}
	if got[1].Kind != EventTransition || got[1].From != Healthy || got[1].To != Faulted || got[1].Seq != got[0].Seq+1 {
		t.Errorf("second event %+v, want healthy->faulted right after", got[1])
	}

	// Reset-class: ticks for a minute do not clear it...
	for range 5 {
		clk.tick(15 * time.Second)
	}
	if s := m.Snapshot(); s[1].State != Faulted || s[0].State != Healthy {
		t.Errorf("after a minute: states %s/%s, want healthy/faulted", s[0].State, s[1].State)
	}
	// ...ClearFault from the error handler does, at the next sample.
	uuid := m.Snapshot()[1].UUID
	if err := m.ClearFault(uuid); err != nil {
		t.Fatalf("ClearFault: %v", err)
	}
	clk.tick(period)
	clk.tick(period) // the first tick may still be in Poll when we look
	if s := m.Snapshot()[1]; s.State != Recovering {
		t.Errorf("after ClearFault: state %s, want recovering", s.State)
	}
	if err := m.ClearFault("GPU-nope"); !errors.Is(err, ErrUnknownGPU) {
		t.Errorf("ClearFault(unknown) = %v, want ErrUnknownGPU", err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil on cancel", err)
	}
	fn.mu.Lock()
	defer fn.mu.Unlock()
	for i, mask := range fn.registered {
		if mask != nvml.EventTypeXidCriticalError|nvml.EventTypeDoubleBitEccError {
			t.Errorf("GPU %d registered for %#x, want Xid|DBE (supported ∩ wanted)", i, mask)
		}
	}
}

func TestRunWithoutEventSupport(t *testing.T) {
	fn := newFakeNode(t, 1)
	fn.srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	m, clk := newTestMonitor(t, fn.srv, DefaultConfig())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	for range 3 {
		clk.tick(period)
	}
	clk.tick(period)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	if m.ListeningForEvents() {
		t.Error("ListeningForEvents() = true without an event set")
	}
	if n := m.Snapshot()[0].Samples; n < 4 {
		t.Errorf("%d samples after 4 ticks, want at least 4 (sampling must go on without events)", n)
	}
}

func TestEventLogAndSubscriptions(t *testing.T) {
	fn := newFakeNode(t, 1)
	cfg := DefaultConfig()
	cfg.EventLogSize = 3
	m, clk := newTestMonitor(t, fn.srv, cfg)
	slow, cancelSlow := m.Subscribe(1)

	// Nine events: fault, healthy/recovering->faulted, faulted->recovering,
	// three times.
	var marks []time.Time
	for range 3 {
		marks = append(marks, clk.Now())
		m.handleEvent(nvml.EventData{Device: fn.srv.Devices[0], EventType: nvml.EventTypeXidCriticalError, EventData: 13})
		for range 110 { // past the fault hold: faulted -> recovering
			clk.advance(period)
			m.Poll()
		}
	}
	all := m.Events(time.Time{})
	if len(all) != 3 {
		t.Fatalf("log holds %d events, want the bound 3", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i].Seq != all[i-1].Seq+1 {
			t.Errorf("seq gap in the log: %d then %d", all[i-1].Seq, all[i].Seq)
		}
	}
	if last := all[len(all)-1]; last.Seq != 9 || last.To != Recovering {
		t.Errorf("last event %+v, want #9 faulted->recovering", last)
	}
	if got := m.Events(marks[2].Add(time.Millisecond)); len(got) != 1 || got[0].To != Recovering {
		t.Errorf("Events(since the last fault) = %+v, want only the last transition", got)
	}

	// The slow subscriber has room for one event and never read.
	first := <-slow
	if first.Seq != 1 || first.Kind != EventFault {
		t.Errorf("slow subscriber got %+v first, want #1 fault", first)
	}
	m.mu.Lock()
	dropped := m.counters.dropped
	m.mu.Unlock()
	if dropped != 8 {
		t.Errorf("dropped %d notifications, want 8", dropped)
	}
	cancelSlow()
	cancelSlow() // idempotent
	if _, open := <-slow; open {
		t.Error("subscription channel still open after cancel")
	}
}

func TestSnapshotJSON(t *testing.T) {
	fn := newFakeNode(t, 1)
	fn.gpus[0].set(func(f *fakeGPU) {
		f.gpm = false
		f.fail = map[string]nvml.Return{MetricPower: nvml.ERROR_NOT_SUPPORTED}
	})
	m, _ := newTestMonitor(t, fn.srv, DefaultConfig())
	m.Poll()
	b, err := json.Marshal(m.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	sample := got[0]["sample"].(map[string]any)
	if got[0]["state"] != "healthy" || got[0]["admits_offline"] != true || sample["temperature_c"] != 55.0 {
		t.Errorf("JSON %s lacks state/admits_offline/temperature", b)
	}
	if _, ok := sample["power_mw"]; ok {
		t.Errorf("unsupported power present in JSON: %s", b)
	}
	if fmt.Sprint(sample["unsupported"]) != "[power sm_activity]" {
		t.Errorf("unsupported = %v, want [power sm_activity]", sample["unsupported"])
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	bad := DefaultConfig()
	bad.Period = 0
	failing := &mock.Interface{DeviceGetCountFunc: func() (int, nvml.Return) { return 0, nvml.ERROR_DRIVER_NOT_LOADED }}
	tests := []struct {
		name string
		lib  nvml.Interface
		cfg  Config
		want string
	}{
		{"nil NVML", nil, DefaultConfig(), "needs an NVML interface"},
		{"invalid config", newFakeNode(t, 1).srv, bad, "period 0s is below the minimum"},
		{"driver not loaded", failing, DefaultConfig(), "counting GPUs through NVML"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.lib, tc.cfg, nil, quietLogger())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestUnreadableGPUIsLeftOut(t *testing.T) {
	fn := newFakeNode(t, 3)
	inner := fn.srv.DeviceGetHandleByIndexFunc
	fn.srv.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 1 {
			return nil, nvml.ERROR_UNKNOWN
		}
		return inner(i)
	}
	m, _ := newTestMonitor(t, fn.srv, DefaultConfig())
	snap := m.Snapshot()
	if len(snap) != 2 || snap[0].Index != 0 || snap[1].Index != 2 {
		t.Errorf("snapshot indexes %+v, want GPUs 0 and 2", snap)
	}
}

func TestSlowPollWarns(t *testing.T) {
	fn := newFakeNode(t, 1)
	d := fn.srv.Devices[0].(*server.Device)
	inner := d.GetUtilizationRatesFunc
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		time.Sleep(30 * time.Millisecond) // a driver slower than the period
		return inner()
	}
	cfg := DefaultConfig()
	cfg.Period = 10 * time.Millisecond
	var logs bytes.Buffer
	m, err := New(fn.srv, cfg, newFakeClock(), slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Run still takes its first sample before it looks at ctx
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "takes longer than the period") {
		t.Errorf("no slow-poll warning in logs:\n%s", logs.String())
	}
}

func TestProcessUtilizationRaceIsNotAnError(t *testing.T) {
	fn := newFakeNode(t, 1)
	fn.gpus[0].set(func(f *fakeGPU) {
		f.procs = []nvml.ProcessInfo{{Pid: 7, UsedGpuMemory: 1 << 20}}
		f.fail = map[string]nvml.Return{MetricProcessUtil: nvml.ERROR_INSUFFICIENT_SIZE}
	})
	m, _ := newTestMonitor(t, fn.srv, DefaultConfig())
	m.Poll()
	s := m.Snapshot()[0].Sample
	if len(s.Errors) != 0 || len(s.Processes) != 1 || s.Processes[0].SMUtilPercent != nil {
		t.Errorf("sample = %+v, want no error and process 7 without utilisation", s)
	}
}

func TestPowerCapScenario(t *testing.T) {
	// Online and offline together push the board into its power cap: the
	// SM clock falls to 75% of max. Offline is throttled within two
	// samples, and let back in once clocks have been normal for 5 s.
	fn := newFakeNode(t, 1)
	m, clk := newTestMonitor(t, fn.srv, DefaultConfig())
	events, cancel := m.Subscribe(16)
	defer cancel()
	poll := func(n int) {
		for range n {
			clk.advance(period)
			m.Poll()
		}
	}
	poll(5)
	fn.gpus[0].set(func(f *fakeGPU) {
		f.clock, f.reasons, f.power = 1485, nvml.ClocksEventReasonSwPowerCap, 700_000
	})
	poll(2)
	if s := m.Snapshot()[0]; s.State != Throttled || !strings.Contains(s.Reason.Text, "sw_power_cap") || s.AdmitsOffline {
		t.Fatalf("after 2 capped samples: %s (%q), admits %v; want throttled by sw_power_cap", s.State, s.Reason.Text, s.AdmitsOffline)
	}
	fn.gpus[0].set(func(f *fakeGPU) { f.clock, f.reasons, f.power = 1980, 0, 400_000 })
	poll(50)
	if s := m.Snapshot()[0]; s.State != Throttled {
		t.Fatalf("after 5 s of normal clocks: %s, want still throttled (the dwell starts at the first clear sample)", s.State)
	}
	poll(1)
	var got []string
	for len(events) > 0 {
		e := <-events
		got = append(got, fmt.Sprintf("%s->%s:%s", e.From, e.To, e.Reason.Metric))
	}
	if diff := cmp.Diff([]string{"healthy->throttled:sm_clock", "throttled->healthy:throttled_time"}, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}
