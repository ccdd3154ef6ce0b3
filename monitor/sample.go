package monitor

import (
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Metric names, used as keys in Sample.Unsupported/Errors, in state-change
// reasons and in metric labels.
const (
	MetricUtilization  = "utilization"
	MetricSMActivity   = "sm_activity"
	MetricSMClock      = "sm_clock"
	MetricSMClockMax   = "sm_clock_max"
	MetricMemory       = "memory"
	MetricTemperature  = "temperature"
	MetricPower        = "power"
	MetricPowerLimit   = "power_limit"
	MetricClockEvents  = "clock_event_reasons"
	MetricProcesses    = "processes"
	MetricProcessUtil  = "process_utilization"
	MetricTelemetry    = "telemetry"
	MetricThrottleTime = "throttled_time"
	MetricFault        = "fault"
)

// Sample is one reading of one GPU. A nil field means NVML could not give
// that metric this time: the name is then in Unsupported (the GPU does not
// offer it, e.g. GPM on a T4) or in Errors (the call failed).
type Sample struct {
	Time time.Time `json:"time"`

	// GPUUtilPercent is NVML's utilisation: the share of the last window in
	// which at least one kernel ran, however few SMs it used.
	GPUUtilPercent *uint32 `json:"gpu_util_percent,omitempty"`
	// MemUtilPercent is the share of that window the memory bus was busy.
	MemUtilPercent *uint32 `json:"mem_util_percent,omitempty"`
	// SMActivityPercent is the share of SMs busy, averaged over the period
	// (DCGM's SM activity), from GPM on Hopper and later.
	SMActivityPercent *float64 `json:"sm_activity_percent,omitempty"`

	SMClockMHz    *uint32 `json:"sm_clock_mhz,omitempty"`
	SMClockMaxMHz *uint32 `json:"sm_clock_max_mhz,omitempty"`

	MemoryUsedBytes  *uint64 `json:"memory_used_bytes,omitempty"`
	MemoryTotalBytes *uint64 `json:"memory_total_bytes,omitempty"`

	TemperatureC *uint32 `json:"temperature_c,omitempty"`

	PowerMilliwatts      *uint32 `json:"power_mw,omitempty"`
	PowerLimitMilliwatts *uint32 `json:"power_limit_mw,omitempty"`

	// ClockEventReasons is NVML's clock-event (throttle) reason bit mask.
	ClockEventReasons *uint64 `json:"clock_event_reasons,omitempty"`

	Processes []ProcessSample `json:"processes,omitempty"`

	// Unsupported lists metrics this GPU or driver does not offer.
	Unsupported []string `json:"unsupported,omitempty"`
	// Errors maps a metric to the NVML error that prevented reading it.
	Errors map[string]string `json:"errors,omitempty"`
	// Lost is set when NVML says the GPU is lost or needs a reset.
	Lost bool `json:"lost,omitempty"`
}

// ProcessSample is one process using the GPU. Under MPS the server and its
// clients are all listed.
type ProcessSample struct {
	PID             uint32  `json:"pid"`
	UsedMemoryBytes *uint64 `json:"used_memory_bytes,omitempty"`
	SMUtilPercent   *uint32 `json:"sm_util_percent,omitempty"`
	MemUtilPercent  *uint32 `json:"mem_util_percent,omitempty"`
}

// SMClockPercent is the SM clock as a percentage of its maximum.
func (s *Sample) SMClockPercent() (float64, bool) {
	if s.SMClockMHz == nil || s.SMClockMaxMHz == nil || *s.SMClockMaxMHz == 0 {
		return 0, false
	}
	return 100 * float64(*s.SMClockMHz) / float64(*s.SMClockMaxMHz), true
}

// MemoryUsedPercent is used device memory as a percentage of the total.
func (s *Sample) MemoryUsedPercent() (float64, bool) {
	if s.MemoryUsedBytes == nil || s.MemoryTotalBytes == nil || *s.MemoryTotalBytes == 0 {
		return 0, false
	}
	return 100 * float64(*s.MemoryUsedBytes) / float64(*s.MemoryTotalBytes), true
}

// PowerPercent is board power as a percentage of the enforced limit.
func (s *Sample) PowerPercent() (float64, bool) {
	if s.PowerMilliwatts == nil || s.PowerLimitMilliwatts == nil || *s.PowerLimitMilliwatts == 0 {
		return 0, false
	}
	return 100 * float64(*s.PowerMilliwatts) / float64(*s.PowerLimitMilliwatts), true
}

// hasCoreTelemetry reports whether any metric the health checks rely on was
// read; without them the GPU is flying blind.
func (s *Sample) hasCoreTelemetry() bool {
	return s.GPUUtilPercent != nil || s.MemoryUsedBytes != nil || s.TemperatureC != nil || s.SMClockMHz != nil
}

// throttleReasonMask holds the clock-event reasons that mean the GPU is
// protecting itself (power or heat). Idle, application clocks, sync boost,
// display and board/reliability limits lower clocks without risk, so they
// do not count.
const throttleReasonMask = uint64(nvml.ClocksEventReasonSwPowerCap |
	nvml.ClocksThrottleReasonHwSlowdown |
	nvml.ClocksEventReasonSwThermalSlowdown |
	nvml.ClocksThrottleReasonHwThermalSlowdown |
	nvml.ClocksThrottleReasonHwPowerBrakeSlowdown)

// PowerCapped reports whether the GPU's clocks are held down by its power limit (the
// software power cap or the hardware power brake) in this sample.
func (s *Sample) PowerCapped() bool {
	return s != nil && s.ClockEventReasons != nil &&
		*s.ClockEventReasons&uint64(nvml.ClocksEventReasonSwPowerCap|nvml.ClocksThrottleReasonHwPowerBrakeSlowdown) != 0
}

var clockReasonNames = []struct {
	bit  uint64
	name string
}{
	{nvml.ClocksEventReasonGpuIdle, "gpu_idle"},
	{nvml.ClocksEventReasonApplicationsClocksSetting, "applications_clocks_setting"},
	{nvml.ClocksEventReasonSwPowerCap, "sw_power_cap"},
	{nvml.ClocksThrottleReasonHwSlowdown, "hw_slowdown"},
	{nvml.ClocksEventReasonSyncBoost, "sync_boost"},
	{nvml.ClocksEventReasonSwThermalSlowdown, "sw_thermal_slowdown"},
	{nvml.ClocksThrottleReasonHwThermalSlowdown, "hw_thermal_slowdown"},
	{nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, "hw_power_brake_slowdown"},
	{nvml.ClocksEventReasonDisplayClockSetting, "display_clock_setting"},
	{nvml.ClocksEventReasonBoardLimit, "board_limit"},
	{nvml.ClocksEventReasonReliability, "reliability"},
}

// ClockReasonNames decodes a clock-event reason mask into stable names.
func ClockReasonNames(mask uint64) []string {
	var names []string
	for _, r := range clockReasonNames {
		if mask&r.bit != 0 {
			names = append(names, r.name)
		}
	}
	return names
}

func ptr[T any](v T) *T { return &v }
