package monitor

import (
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// CallCounter counts the NVML calls made through the library it wraps, and
// the time spent in each: the number of driver round trips the monitor costs
// per GPU per sample, which benchmarks report (on a real node each is an
// ioctl into the driver), and what each costs there (nvmlprobe prints both).
// Every function the monitor's sampling uses is counted; anything else
// passes through uncounted.
type CallCounter struct {
	mu    sync.Mutex
	calls map[string]int
	spent map[string]time.Duration
}

// Wrap returns lib with its device calls counted by c.
func (c *CallCounter) Wrap(lib nvml.Interface) nvml.Interface {
	return &countedLib{Interface: lib, c: c}
}

// Calls returns the count of each function since the last Reset.
func (c *CallCounter) Calls() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.calls))
	for k, v := range c.calls {
		out[k] = v
	}
	return out
}

// Spent returns the time spent in each function since the last Reset.
func (c *CallCounter) Spent() map[string]time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]time.Duration, len(c.spent))
	for k, v := range c.spent {
		out[k] = v
	}
	return out
}

// Total is the number of calls since the last Reset.
func (c *CallCounter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.calls {
		n += v
	}
	return n
}

// Reset sets every count to zero.
func (c *CallCounter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.calls)
	clear(c.spent)
}

// add counts one call of name that began at start; deferred by each wrapper.
func (c *CallCounter) add(name string, start time.Time) {
	took := time.Since(start)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls, c.spent = map[string]int{}, map[string]time.Duration{}
	}
	c.calls[name]++
	c.spent[name] += took
}

type countedLib struct {
	nvml.Interface
	c *CallCounter
}

func (l *countedLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	defer l.c.add("DeviceGetHandleByIndex", time.Now())
	d, ret := l.Interface.DeviceGetHandleByIndex(i)
	if d != nil {
		d = &countedDevice{Device: d, c: l.c}
	}
	return d, ret
}

func (l *countedLib) GpmMetricsGet(q *nvml.GpmMetricsGetType) nvml.Return {
	defer l.c.add("GpmMetricsGet", time.Now())
	return l.Interface.GpmMetricsGet(q)
}

func (l *countedLib) GpmSampleAlloc() (nvml.GpmSample, nvml.Return) {
	defer l.c.add("GpmSampleAlloc", time.Now())
	return l.Interface.GpmSampleAlloc()
}

type countedDevice struct {
	nvml.Device
	c *CallCounter
}

func (d *countedDevice) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	defer d.c.add("GetUtilizationRates", time.Now())
	return d.Device.GetUtilizationRates()
}

func (d *countedDevice) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	defer d.c.add("GetMemoryInfo", time.Now())
	return d.Device.GetMemoryInfo()
}

func (d *countedDevice) GetTemperature(s nvml.TemperatureSensors) (uint32, nvml.Return) {
	defer d.c.add("GetTemperature", time.Now())
	return d.Device.GetTemperature(s)
}

func (d *countedDevice) GetTemperatureV() nvml.TemperatureHandler {
	defer d.c.add("GetTemperatureV", time.Now())
	return d.Device.GetTemperatureV()
}

func (d *countedDevice) GetClockInfo(t nvml.ClockType) (uint32, nvml.Return) {
	defer d.c.add("GetClockInfo", time.Now())
	return d.Device.GetClockInfo(t)
}

func (d *countedDevice) GetMaxClockInfo(t nvml.ClockType) (uint32, nvml.Return) {
	defer d.c.add("GetMaxClockInfo", time.Now())
	return d.Device.GetMaxClockInfo(t)
}

func (d *countedDevice) GetCurrentClocksEventReasons() (uint64, nvml.Return) {
	defer d.c.add("GetCurrentClocksEventReasons", time.Now())
	return d.Device.GetCurrentClocksEventReasons()
}

func (d *countedDevice) GetCurrentClocksThrottleReasons() (uint64, nvml.Return) {
	defer d.c.add("GetCurrentClocksThrottleReasons", time.Now())
	return d.Device.GetCurrentClocksThrottleReasons()
}

func (d *countedDevice) GetPowerUsage() (uint32, nvml.Return) {
	defer d.c.add("GetPowerUsage", time.Now())
	return d.Device.GetPowerUsage()
}

func (d *countedDevice) GetEnforcedPowerLimit() (uint32, nvml.Return) {
	defer d.c.add("GetEnforcedPowerLimit", time.Now())
	return d.Device.GetEnforcedPowerLimit()
}

func (d *countedDevice) GetFieldValues(v []nvml.FieldValue) nvml.Return {
	defer d.c.add("GetFieldValues", time.Now())
	return d.Device.GetFieldValues(v)
}

func (d *countedDevice) GpmQueryDeviceSupport() (nvml.GpmSupport, nvml.Return) {
	defer d.c.add("GpmQueryDeviceSupport", time.Now())
	return d.Device.GpmQueryDeviceSupport()
}

func (d *countedDevice) GpmSampleGet(s nvml.GpmSample) nvml.Return {
	defer d.c.add("GpmSampleGet", time.Now())
	return d.Device.GpmSampleGet(s)
}

func (d *countedDevice) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	defer d.c.add("GetComputeRunningProcesses", time.Now())
	return d.Device.GetComputeRunningProcesses()
}

func (d *countedDevice) GetProcessUtilization(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	defer d.c.add("GetProcessUtilization", time.Now())
	return d.Device.GetProcessUtilization(last)
}

func (d *countedDevice) GetUUID() (string, nvml.Return) {
	defer d.c.add("GetUUID", time.Now())
	return d.Device.GetUUID()
}

func (d *countedDevice) GetName() (string, nvml.Return) {
	defer d.c.add("GetName", time.Now())
	return d.Device.GetName()
}
