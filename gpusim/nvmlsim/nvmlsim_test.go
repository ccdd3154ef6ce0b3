package nvmlsim_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/muxflow/muxflow/gpusim/nvmlsim"
	"github.com/muxflow/muxflow/gpusim/simclient"
)

func setup(t *testing.T, gpus string) (*simclient.Daemon, *nvmlsim.Lib) {
	t.Helper()
	if _, err := simclient.Paths(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, err := simclient.Start(ctx, simclient.Options{GPUs: gpus, Window: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	l := nvmlsim.New(d.Socket)
	if r := l.Init(); r != nvml.SUCCESS {
		t.Fatalf("Init: %v", r)
	}
	t.Cleanup(func() { l.Shutdown() })
	return d, l
}

func TestNoDaemon(t *testing.T) {
	l := nvmlsim.New("/nonexistent/gpusimd.sock")
	if r := l.Init(); r != nvml.ERROR_DRIVER_NOT_LOADED {
		t.Errorf("Init without gpusimd = %v, want ERROR_DRIVER_NOT_LOADED", r)
	}
	if _, r := l.DeviceGetCount(); r != nvml.ERROR_UNINITIALIZED {
		t.Errorf("DeviceGetCount before Init = %v, want ERROR_UNINITIALIZED", r)
	}
}

func TestDevicesAndSamples(t *testing.T) {
	d, l := setup(t, "h200,t4")
	ctx := context.Background()
	n, r := l.DeviceGetCount()
	if r != nvml.SUCCESS || n != 2 {
		t.Fatalf("DeviceGetCount = %d, %v", n, r)
	}
	st, err := d.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := l.DeviceGetHandleByIndex(0)
	t4, _ := l.DeviceGetHandleByIndex(1)
	if _, r := l.DeviceGetHandleByIndex(2); r != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("handle of device 2 = %v, want invalid argument", r)
	}
	if u, _ := h.GetUUID(); u != st[0].UUID {
		t.Errorf("UUID %q, gpusimd says %q", u, st[0].UUID)
	}
	if byUUID, r := l.DeviceGetHandleByUUID(st[1].UUID); r != nvml.SUCCESS || byUUID.(*nvmlsim.Device) == nil {
		t.Errorf("DeviceGetHandleByUUID: %v", r)
	}
	if name, _ := t4.GetName(); name != "Tesla T4" {
		t.Errorf("name %q, want Tesla T4", name)
	}
	if _, r := h.GetBoardPartNumber(); r != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("an unmodelled call returned %v, want ERROR_NOT_SUPPORTED", r)
	}
	if sup, _ := h.GpmQueryDeviceSupport(); sup.IsSupportedDevice != 1 {
		t.Error("H200 should support GPM")
	}
	if sup, _ := t4.GpmQueryDeviceSupport(); sup.IsSupportedDevice != 0 {
		t.Error("T4 should not support GPM")
	}

	a := d.Artifacts
	// long kernels keep the GPU busy even when the host thread is delayed
	cmd := exec.Command(a.Train, "--duration", "3", "--kernels", "2", "--big-share", "0", "--small-grid", "33",
		"--kernel-us", "100000", "--mem", "3G")
	cmd.Env = append(os.Environ(), d.Env()...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := uint32(cmd.Process.Pid)
	// wait until it runs
	for i := 0; i < 300; i++ {
		if ps, ok, _ := d.Process(ctx, 0, int(pid)); ok && ps.Launches > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	g1, _ := l.GpmSampleAlloc()
	g2, _ := l.GpmSampleAlloc()
	if r := h.GpmSampleGet(g1); r != nvml.SUCCESS {
		t.Fatalf("GpmSampleGet: %v", r)
	}
	time.Sleep(500 * time.Millisecond)
	if r := g2.Get(h); r != nvml.SUCCESS {
		t.Fatalf("GpmSample.Get: %v", r)
	}
	q := &nvml.GpmMetricsGetType{NumMetrics: 3, Sample1: g1, Sample2: g2}
	q.Metrics[0].MetricId = uint32(nvml.GPM_METRIC_SM_UTIL)
	q.Metrics[1].MetricId = uint32(nvml.GPM_METRIC_GRAPHICS_UTIL)
	q.Metrics[2].MetricId = uint32(nvml.GPM_METRIC_DRAM_BW_UTIL)
	if r := l.GpmMetricsGet(q); r != nvml.SUCCESS {
		t.Fatalf("GpmMetricsGet: %v", r)
	}
	smUtil, gfx := q.Metrics[0].Value, q.Metrics[1].Value
	// 33 blocks, one on each of 33 of the 132 SMs: SM activity is a quarter
	// of the time-based utilisation
	if gfx < 30 || smUtil/gfx < 0.21 || smUtil/gfx > 0.27 { // less in the waves' tails
		t.Errorf("GPM graphics %.1f%%, SM %.1f%%; want SM = 25%% of graphics", gfx, smUtil)
	}
	if nvml.Return(q.Metrics[2].NvmlReturn) != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("DRAM bandwidth metric returned %v, want not supported", nvml.Return(q.Metrics[2].NvmlReturn))
	}
	u, _ := h.GetUtilizationRates()
	if u.Gpu < 30 {
		t.Errorf("utilisation %d%% while a workload runs", u.Gpu)
	}
	mem, _ := h.GetMemoryInfo()
	if mem.Used != 3<<30 || mem.Total != st[0].MemTotal || mem.Free != mem.Total-mem.Used {
		t.Errorf("memory %+v, want 3GiB used of %d", mem, st[0].MemTotal)
	}
	procs, r := h.GetComputeRunningProcesses()
	if r != nvml.SUCCESS || len(procs) != 1 || procs[0].Pid != pid || procs[0].UsedGpuMemory != 3<<30 {
		t.Errorf("processes %+v (%v), want pid %d with 3GiB", procs, r, pid)
	}
	pu, r := h.GetProcessUtilization(0)
	if r != nvml.SUCCESS || len(pu) != 1 || pu[0].Pid != pid || pu[0].SmUtil < 30 {
		t.Errorf("process utilisation %+v (%v)", pu, r)
	}
	if _, r := h.GetProcessUtilization(pu[0].TimeStamp + 1e9); r != nvml.ERROR_NOT_FOUND {
		t.Errorf("process utilisation after a future timestamp = %v, want not found", r)
	}
	if tp, _ := t4.GetComputeRunningProcesses(); len(tp) != 0 {
		t.Errorf("idle T4 lists processes %+v", tp)
	}
	if re, _ := t4.GetCurrentClocksEventReasons(); re != nvml.ClocksEventReasonGpuIdle {
		t.Errorf("idle T4 clock reasons %#x, want GPU idle", re)
	}

	// a low power limit pulls the clock down and says why
	if err := d.SetPowerLimit(ctx, 0, 200); err != nil {
		t.Fatal(err)
	}
	// past the adapter's 5ms reading cache, read while a kernel runs (the
	// workload syncs between steps)
	time.Sleep(10 * time.Millisecond)
	for i := 0; i < 100; i++ {
		if re, _ := h.GetCurrentClocksEventReasons(); re != nvml.ClocksEventReasonGpuIdle {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	lim, _ := h.GetEnforcedPowerLimit()
	def, _ := h.GetPowerManagementDefaultLimit()
	if lim != 200000 || def != 700000 {
		t.Errorf("power limit %d mW (default %d), want 200000 (700000)", lim, def)
	}
	// only 33 SMs busy: 75 + 590*0.25 = 222 W > 200 W
	clk, _ := h.GetClockInfo(nvml.CLOCK_SM)
	maxClk, _ := h.GetMaxClockInfo(nvml.CLOCK_SM)
	re, _ := h.GetCurrentClocksEventReasons()
	pw, _ := h.GetPowerUsage()
	if re&nvml.ClocksEventReasonSwPowerCap == 0 || clk >= maxClk || pw > 200500 {
		t.Errorf("under a 200 W cap: clock %d/%d MHz, reasons %#x, power %d mW", clk, maxClk, re, pw)
	}
	if temp, r := h.GetTemperature(nvml.TEMPERATURE_GPU); r != nvml.SUCCESS || temp < 30 || temp > 95 {
		t.Errorf("temperature %d (%v)", temp, r)
	}
}

func TestXidEventsAndLostGPU(t *testing.T) {
	d, l := setup(t, "h100")
	ctx := context.Background()
	h, _ := l.DeviceGetHandleByIndex(0)
	// an Xid before registration is not delivered
	if err := d.InjectFault(ctx, simclient.Fault{Device: 0, Xid: 13}); err != nil {
		t.Fatal(err)
	}
	set, r := l.EventSetCreate()
	if r != nvml.SUCCESS {
		t.Fatal(r)
	}
	types, _ := h.GetSupportedEventTypes()
	if r := h.RegisterEvents(types, set); r != nvml.SUCCESS {
		t.Fatalf("RegisterEvents: %v", r)
	}
	if _, r := set.Wait(50); r != nvml.ERROR_TIMEOUT {
		t.Errorf("Wait with no new event = %v, want timeout", r)
	}
	for _, x := range []int{31, 48, 79} {
		if err := d.InjectFault(ctx, simclient.Fault{Device: 0, Xid: x}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for i := 0; i < 3; i++ {
		ev, r := set.Wait(2000)
		if r != nvml.SUCCESS {
			t.Fatalf("Wait: %v", r)
		}
		kind := "xid"
		if ev.EventType == nvml.EventTypeDoubleBitEccError {
			kind = "dbe"
		}
		got = append(got, kind+":"+itoa(ev.EventData))
	}
	if strings.Join(got, ",") != "xid:31,dbe:48,xid:79" {
		t.Errorf("events %v, want xid:31, dbe:48, xid:79", got)
	}
	if _, r := h.GetUtilizationRates(); r != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("after Xid 79 utilisation returned %v, want ERROR_GPU_IS_LOST", r)
	}
	// a new process cannot use a lost GPU; after a reset it can
	cmd := exec.Command(d.Artifacts.Train, "--iters", "1", "--mem", "0")
	cmd.Env = append(os.Environ(), d.Env()...)
	if out, err := cmd.Output(); err == nil || !strings.Contains(string(out), "CUDA_ERROR_DEVICE_UNAVAILABLE") {
		t.Errorf("train on a lost GPU: %v, %s", err, out)
	}
	if err := d.ResetDevice(ctx, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // past the adapter's reading cache
	if _, r := h.GetUtilizationRates(); r != nvml.SUCCESS {
		t.Errorf("after a reset utilisation returned %v", r)
	}
	cmd = exec.Command(d.Artifacts.Train, "--iters", "1", "--mem", "0")
	cmd.Env = append(os.Environ(), d.Env()...)
	if out, err := cmd.Output(); err != nil {
		t.Errorf("train after a reset: %v, %s", err, out)
	}
	set.Free()
}

func itoa(v uint64) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for v > 0 {
		b = append([]byte{byte('0' + v%10)}, b...)
		v /= 10
	}
	return string(b)
}

// While something samples (the library's readings are refreshed), an event set makes
// no request of its own: each refresh brings the new Xids, and Wait hands them out
// within a refresh.
func TestXidEventsRideOnSampling(t *testing.T) {
	d, l := setup(t, "h100x2")
	ctx := context.Background()
	set, r := l.EventSetCreate()
	if r != nvml.SUCCESS {
		t.Fatal(r)
	}
	defer set.Free()
	for i := range 2 {
		h, _ := l.DeviceGetHandleByIndex(i)
		if r := h.RegisterEvents(uint64(nvml.EventTypeXidCriticalError), set); r != nvml.SUCCESS {
			t.Fatalf("RegisterEvents: %v", r)
		}
	}
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			l.DeviceGetCount()
			select {
			case <-stop:
				return
			case <-tk.C:
			}
		}
	}()
	defer func() { close(stop); <-sampled }()
	time.Sleep(150 * time.Millisecond)
	before := nvmlsim.OwnPolls(set.(*nvmlsim.EventSet))
	if _, r := set.Wait(300); r != nvml.ERROR_TIMEOUT {
		t.Errorf("Wait with no new event = %v, want timeout", r)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		d.InjectFault(ctx, simclient.Fault{Device: 1, Xid: 31})
	}()
	start := time.Now()
	ev, r := set.Wait(2000)
	if r != nvml.SUCCESS || ev.EventData != 31 {
		t.Fatalf("Wait = %v, %v; want Xid 31", ev.EventData, r)
	}
	if idx, _ := ev.Device.GetIndex(); idx != 1 {
		t.Errorf("event on device %d, want 1", idx)
	}
	if took := time.Since(start); took > 400*time.Millisecond {
		t.Errorf("event arrived after %v; want within a refresh or so", took)
	}
	if n := nvmlsim.OwnPolls(set.(*nvmlsim.EventSet)) - before; n != 0 {
		t.Errorf("the set polled gpusimd %d times while readings were refreshed", n)
	}
}

// Two GPM samples of one device taken back to back come from different readings (the
// second would otherwise measure no time); samples of different devices may share one.
func TestGPMSamplesBackToBack(t *testing.T) {
	_, l := setup(t, "h100x2")
	h0, _ := l.DeviceGetHandleByIndex(0)
	h1, _ := l.DeviceGetHandleByIndex(1)
	a, _ := l.GpmSampleAlloc()
	b, _ := l.GpmSampleAlloc()
	c, _ := l.GpmSampleAlloc()
	for _, s := range []struct {
		h nvml.Device
		g nvml.GpmSample
	}{{h0, a}, {h1, c}, {h0, b}} {
		if r := s.h.GpmSampleGet(s.g); r != nvml.SUCCESS {
			t.Fatalf("GpmSampleGet: %v", r)
		}
	}
	q := &nvml.GpmMetricsGetType{NumMetrics: 1, Sample1: a, Sample2: b}
	q.Metrics[0].MetricId = uint32(nvml.GPM_METRIC_GRAPHICS_UTIL)
	if r := l.GpmMetricsGet(q); r != nvml.SUCCESS {
		t.Fatalf("GpmMetricsGet: %v", r)
	}
	if nvmlsim.GPMSampleTime(a).Equal(nvmlsim.GPMSampleTime(b)) {
		t.Errorf("two back-to-back GPM samples of one device share a reading (%v)", nvmlsim.GPMSampleTime(a))
	}
}
