package nvmlsim

import (
	"context"
	"math"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Device is one simulated GPU as NVML sees it.
type Device struct {
	unsupportedDevice
	l     *Lib
	index int
}

var _ nvml.Device = (*Device)(nil)

// GetIndex returns the device's index.
func (d *Device) GetIndex() (int, nvml.Return) { return d.index, nvml.SUCCESS }

// GetMinorNumber is the index, as for /dev/nvidiaN.
func (d *Device) GetMinorNumber() (int, nvml.Return) { return d.index, nvml.SUCCESS }

// GetUUID returns the device UUID.
func (d *Device) GetUUID() (string, nvml.Return) {
	st, r := d.l.dev(d.index)
	return st.UUID, r
}

// GetName returns the marketing name.
func (d *Device) GetName() (string, nvml.Return) {
	st, r := d.l.dev(d.index)
	return st.Name, r
}

// GetMemoryInfo reports device memory.
func (d *Device) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	st, r := d.l.dev(d.index)
	return nvml.Memory{Total: st.MemTotal, Used: st.MemUsed, Free: st.MemTotal - st.MemUsed}, r
}

// GetMemoryInfo_v2 reports device memory (nothing reserved).
func (d *Device) GetMemoryInfo_v2() (nvml.Memory_v2, nvml.Return) {
	st, r := d.l.dev(d.index)
	return nvml.Memory_v2{Version: nvml.STRUCT_VERSION(nvml.Memory_v2{}, 2), Total: st.MemTotal, Used: st.MemUsed,
		Free: st.MemTotal - st.MemUsed}, r
}

// GetUtilizationRates: GPU is the % of the window a kernel ran (NVML's
// definition); memory is the share of the device's memory bandwidth the
// kernels and device copies moved, averaged over the same window.
func (d *Device) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	st, r := d.l.dev(d.index)
	return nvml.Utilization{Gpu: uint32(math.Round(st.Util)), Memory: uint32(math.Round(st.MemUtil))}, r
}

// GetTemperature reports the modelled GPU temperature.
func (d *Device) GetTemperature(s nvml.TemperatureSensors) (uint32, nvml.Return) {
	if s != nvml.TEMPERATURE_GPU {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	st, r := d.l.dev(d.index)
	return uint32(st.TempC), r
}

// GetClockInfo reports the current clock (SM and graphics share it).
func (d *Device) GetClockInfo(t nvml.ClockType) (uint32, nvml.Return) {
	st, r := d.l.dev(d.index)
	switch t {
	case nvml.CLOCK_SM, nvml.CLOCK_GRAPHICS:
		return uint32(st.SMClockMHz), r
	case nvml.CLOCK_MEM:
		return uint32(st.MemClockMHz), r
	}
	return 0, nvml.ERROR_NOT_SUPPORTED
}

// GetMaxClockInfo reports the max clocks.
func (d *Device) GetMaxClockInfo(t nvml.ClockType) (uint32, nvml.Return) {
	st, r := d.l.dev(d.index)
	switch t {
	case nvml.CLOCK_SM, nvml.CLOCK_GRAPHICS:
		return uint32(st.MaxSMClockMHz), r
	case nvml.CLOCK_MEM:
		return uint32(st.MemClockMHz), r
	}
	return 0, nvml.ERROR_NOT_SUPPORTED
}

// GetCurrentClocksEventReasons reports why the clock is below max.
func (d *Device) GetCurrentClocksEventReasons() (uint64, nvml.Return) {
	st, r := d.l.dev(d.index)
	return st.ClockReasons, r
}

// GetCurrentClocksThrottleReasons is the older name.
func (d *Device) GetCurrentClocksThrottleReasons() (uint64, nvml.Return) {
	return d.GetCurrentClocksEventReasons()
}

// GetPowerUsage reports milliwatts.
func (d *Device) GetPowerUsage() (uint32, nvml.Return) {
	st, r := d.l.dev(d.index)
	return uint32(math.Round(st.PowerW * 1000)), r
}

// GetEnforcedPowerLimit reports milliwatts.
func (d *Device) GetEnforcedPowerLimit() (uint32, nvml.Return) {
	st, r := d.l.dev(d.index)
	return uint32(math.Round(st.PowerLimitW * 1000)), r
}

// GetPowerManagementLimit reports milliwatts.
func (d *Device) GetPowerManagementLimit() (uint32, nvml.Return) { return d.GetEnforcedPowerLimit() }

// GetPowerManagementDefaultLimit reports the profile's limit in milliwatts.
func (d *Device) GetPowerManagementDefaultLimit() (uint32, nvml.Return) {
	st, r := d.l.dev(d.index)
	return uint32(math.Round(st.DefaultPowerW * 1000)), r
}

// GetTotalEnergyConsumption reports millijoules since gpusimd started.
func (d *Device) GetTotalEnergyConsumption() (uint64, nvml.Return) {
	st, r := d.l.dev(d.index)
	return uint64(st.EnergyJ * 1000), r
}

// GetCudaComputeCapability is not in the stats; derived from the name.
func (d *Device) GetCudaComputeCapability() (int, int, nvml.Return) {
	st, r := d.l.dev(d.index)
	switch {
	case contains(st.Name, "H100"), contains(st.Name, "H200"):
		return 9, 0, r
	case contains(st.Name, "A100"):
		return 8, 0, r
	case contains(st.Name, "T4"):
		return 7, 5, r
	}
	return 0, 0, nvml.ERROR_NOT_SUPPORTED
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// GetComputeRunningProcesses lists processes with contexts or memory on it.
func (d *Device) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	st, r := d.l.dev(d.index)
	if r != nvml.SUCCESS {
		return nil, r
	}
	out := make([]nvml.ProcessInfo, 0, len(st.Processes))
	for _, p := range st.Processes {
		out = append(out, nvml.ProcessInfo{Pid: uint32(p.PID), UsedGpuMemory: p.MemUsed,
			GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF})
	}
	return out, nvml.SUCCESS
}

// GetMPSComputeRunningProcesses lists the MPS clients.
func (d *Device) GetMPSComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	st, r := d.l.dev(d.index)
	if r != nvml.SUCCESS {
		return nil, r
	}
	var out []nvml.ProcessInfo
	for _, p := range st.Processes {
		if p.MPS {
			out = append(out, nvml.ProcessInfo{Pid: uint32(p.PID), UsedGpuMemory: p.MemUsed,
				GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF})
		}
	}
	return out, nvml.SUCCESS
}

// GetProcessUtilization returns each process's SM utilisation (% of the
// window its kernels ran) and memory utilisation (its share of the device's
// memory bandwidth, window average) at the current sample; samples not newer than
// lastSeen (µs) are left out, and none at all is ERROR_NOT_FOUND, as NVML.
func (d *Device) GetProcessUtilization(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	st, r := d.l.dev(d.index)
	if r != nvml.SUCCESS {
		return nil, r
	}
	ts := uint64(st.TimestampUnixUs)
	if ts <= lastSeen {
		return nil, nvml.ERROR_NOT_FOUND
	}
	var out []nvml.ProcessUtilizationSample
	for _, p := range st.Processes {
		out = append(out, nvml.ProcessUtilizationSample{Pid: uint32(p.PID), TimeStamp: ts,
			SmUtil: uint32(math.Round(p.Util)), MemUtil: uint32(math.Round(p.MemUtil))})
	}
	if len(out) == 0 {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return out, nvml.SUCCESS
}

// GetSupportedEventTypes: Xid and double-bit ECC events.
func (d *Device) GetSupportedEventTypes() (uint64, nvml.Return) {
	_, r := d.l.dev(d.index)
	return uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError), r
}

// RegisterEvents adds this device's events to set. Events before the
// registration are not delivered.
func (d *Device) RegisterEvents(mask uint64, set nvml.EventSet) nvml.Return {
	es, ok := set.(*EventSet)
	if !ok || es.l != d.l {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if _, r := d.l.dev(d.index); r != nvml.SUCCESS {
		return r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	xs, err := d.l.xids(ctx, d.index, 0)
	if err != nil {
		return nvml.ERROR_UNKNOWN
	}
	es.mu.Lock()
	defer es.mu.Unlock()
	es.mask[d.index] |= mask
	if _, seen := es.last[d.index]; !seen && len(xs) > 0 {
		es.last[d.index] = xs[len(xs)-1].Seq
	}
	es.mu.Unlock()
	es.listen()
	es.mu.Lock() // for the deferred unlock
	return nvml.SUCCESS
}

// GpmQueryDeviceSupport: GPM exists on Hopper and later, as on real GPUs.
func (d *Device) GpmQueryDeviceSupport() (nvml.GpmSupport, nvml.Return) {
	maj, _, r := d.GetCudaComputeCapability()
	if r != nvml.SUCCESS {
		return nvml.GpmSupport{}, r
	}
	sup := uint32(0)
	if maj >= 9 {
		sup = 1
	}
	return nvml.GpmSupport{Version: nvml.GPM_SUPPORT_VERSION, IsSupportedDevice: sup}, nvml.SUCCESS
}

// GpmSampleGet reads the device's cumulative counters into s.
func (d *Device) GpmSampleGet(s nvml.GpmSample) nvml.Return {
	g, ok := s.(*GpmSample)
	if !ok {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if sup, r := d.GpmQueryDeviceSupport(); r != nvml.SUCCESS || sup.IsSupportedDevice == 0 {
		return nvml.ERROR_NOT_SUPPORTED
	}
	// A reading from the cache is as good as a fresh one (its counters and its time
	// stamp are of the same instant), and the monitor samples every GPU's GPM one after
	// the other: one reading serves them all. Only a second sample of this device from
	// the reading its previous one came from would measure no time, so that one forces
	// a new reading.
	st, r := d.l.dev(d.index)
	if r == nvml.SUCCESS && d.l.gpmStamp(d.index) == st.TimestampUnixUs {
		d.l.mu.Lock()
		d.l.cache = nil
		d.l.mu.Unlock()
		st, r = d.l.dev(d.index)
	}
	if r != nvml.SUCCESS {
		return r
	}
	d.l.setGPMStamp(d.index, st.TimestampUnixUs)
	*g = GpmSample{valid: true, dev: d.index, sms: st.SMs, at: time.UnixMicro(st.TimestampUnixUs),
		busyNs: st.BusyNs, smNs: st.SMNs}
	return nvml.SUCCESS
}

// GetFieldValues answers the power fields (milliwatts) in one reading, as
// nvmlDeviceGetFieldValues does; every other field is NOT_SUPPORTED.
func (d *Device) GetFieldValues(vals []nvml.FieldValue) nvml.Return {
	st, r := d.l.dev(d.index)
	if r != nvml.SUCCESS {
		return r
	}
	for i := range vals {
		var v uint32
		switch vals[i].FieldId {
		case nvml.FI_DEV_POWER_INSTANT:
			v = uint32(math.Round(st.PowerW * 1000))
		case nvml.FI_DEV_POWER_CURRENT_LIMIT:
			v = uint32(math.Round(st.PowerLimitW * 1000))
		default:
			vals[i].NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			continue
		}
		vals[i].ValueType, vals[i].NvmlReturn = uint32(nvml.VALUE_TYPE_UNSIGNED_INT), uint32(nvml.SUCCESS)
		vals[i].Timestamp = st.TimestampUnixUs
		vals[i].Value = [8]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}
	}
	return nvml.SUCCESS
}
