package monitor

import (
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// CallCounter counts the NVML calls made through the library it wraps: the
// number of driver round trips the monitor costs per GPU per sample, which
// benchmarks report (on a real node each is an ioctl into the driver).
// Every function the monitor's sampling uses is counted; anything else
// passes through uncounted.
type CallCounter struct {
	mu    sync.Mutex
	calls map[string]int
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
}

func (c *CallCounter) add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[name]++
}

type countedLib struct {
	nvml.Interface
	c *CallCounter
}

func (l *countedLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	l.c.add("DeviceGetHandleByIndex")
	d, ret := l.Interface.DeviceGetHandleByIndex(i)
	if d != nil {
		d = &countedDevice{Device: d, c: l.c}
	}
	return d, ret
}

func (l *countedLib) GpmMetricsGet(q *nvml.GpmMetricsGetType) nvml.Return {
	l.c.add("GpmMetricsGet")
	return l.Interface.GpmMetricsGet(q)
}

func (l *countedLib) GpmSampleAlloc() (nvml.GpmSample, nvml.Return) {
	l.c.add("GpmSampleAlloc")
	return l.Interface.GpmSampleAlloc()
}

type countedDevice struct {
	nvml.Device
	c *CallCounter
}

func (d *countedDevice) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	d.c.add("GetUtilizationRates")
	return d.Device.GetUtilizationRates()
}

func (d *countedDevice) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	d.c.add("GetMemoryInfo")
	return d.Device.GetMemoryInfo()
}

func (d *countedDevice) GetTemperature(s nvml.TemperatureSensors) (uint32, nvml.Return) {
	d.c.add("GetTemperature")
	return d.Device.GetTemperature(s)
}

func (d *countedDevice) GetTemperatureV() nvml.TemperatureHandler {
	d.c.add("GetTemperatureV")
	return d.Device.GetTemperatureV()
}

func (d *countedDevice) GetClockInfo(t nvml.ClockType) (uint32, nvml.Return) {
	d.c.add("GetClockInfo")
	return d.Device.GetClockInfo(t)
}

func (d *countedDevice) GetMaxClockInfo(t nvml.ClockType) (uint32, nvml.Return) {
	d.c.add("GetMaxClockInfo")
	return d.Device.GetMaxClockInfo(t)
}

func (d *countedDevice) GetCurrentClocksEventReasons() (uint64, nvml.Return) {
	d.c.add("GetCurrentClocksEventReasons")
	return d.Device.GetCurrentClocksEventReasons()
}

func (d *countedDevice) GetCurrentClocksThrottleReasons() (uint64, nvml.Return) {
	d.c.add("GetCurrentClocksThrottleReasons")
	return d.Device.GetCurrentClocksThrottleReasons()
}

func (d *countedDevice) GetPowerUsage() (uint32, nvml.Return) {
	d.c.add("GetPowerUsage")
	return d.Device.GetPowerUsage()
}

func (d *countedDevice) GetEnforcedPowerLimit() (uint32, nvml.Return) {
	d.c.add("GetEnforcedPowerLimit")
	return d.Device.GetEnforcedPowerLimit()
}

func (d *countedDevice) GetFieldValues(v []nvml.FieldValue) nvml.Return {
	d.c.add("GetFieldValues")
	return d.Device.GetFieldValues(v)
}

func (d *countedDevice) GpmQueryDeviceSupport() (nvml.GpmSupport, nvml.Return) {
	d.c.add("GpmQueryDeviceSupport")
	return d.Device.GpmQueryDeviceSupport()
}

func (d *countedDevice) GpmSampleGet(s nvml.GpmSample) nvml.Return {
	d.c.add("GpmSampleGet")
	return d.Device.GpmSampleGet(s)
}

func (d *countedDevice) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	d.c.add("GetComputeRunningProcesses")
	return d.Device.GetComputeRunningProcesses()
}

func (d *countedDevice) GetProcessUtilization(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	d.c.add("GetProcessUtilization")
	return d.Device.GetProcessUtilization(last)
}

func (d *countedDevice) GetUUID() (string, nvml.Return) {
	d.c.add("GetUUID")
	return d.Device.GetUUID()
}

func (d *countedDevice) GetName() (string, nvml.Return) {
	d.c.add("GetName")
	return d.Device.GetName()
}
