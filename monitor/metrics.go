package monitor

import (
	"maps"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns a Prometheus collector of the monitor's GPU metrics and
// health, for muxd to register on its registry. It reads the monitor's
// latest state on each scrape, so scrapes never touch NVML.
func (m *Monitor) Collector() prometheus.Collector { return &collector{m: m} }

var (
	gpuLabels = []string{"gpu", "uuid"}

	descUtil        = prometheus.NewDesc("muxflow_gpu_utilization_percent", "NVML GPU utilisation: share of time a kernel was running.", gpuLabels, nil)
	descMemUtil     = prometheus.NewDesc("muxflow_gpu_memory_bandwidth_utilization_percent", "NVML memory utilisation: share of time the memory bus was busy.", gpuLabels, nil)
	descSMActivity  = prometheus.NewDesc("muxflow_gpu_sm_activity_percent", "Share of SMs busy over the sampling period (GPM).", gpuLabels, nil)
	descSMClock     = prometheus.NewDesc("muxflow_gpu_sm_clock_mhz", "Current SM clock.", gpuLabels, nil)
	descSMClockMax  = prometheus.NewDesc("muxflow_gpu_sm_clock_max_mhz", "Maximum SM clock.", gpuLabels, nil)
	descMemUsed     = prometheus.NewDesc("muxflow_gpu_memory_used_bytes", "Device memory used.", gpuLabels, nil)
	descMemTotal    = prometheus.NewDesc("muxflow_gpu_memory_total_bytes", "Device memory total.", gpuLabels, nil)
	descTemp        = prometheus.NewDesc("muxflow_gpu_temperature_celsius", "GPU core temperature.", gpuLabels, nil)
	descPower       = prometheus.NewDesc("muxflow_gpu_power_watts", "Board power draw.", gpuLabels, nil)
	descPowerLimit  = prometheus.NewDesc("muxflow_gpu_power_limit_watts", "Enforced board power limit.", gpuLabels, nil)
	descClockReason = prometheus.NewDesc("muxflow_gpu_clock_event_reason", "1 when NVML reports this clock-event (throttle) reason.", append(gpuLabels, "reason"), nil)
	descState       = prometheus.NewDesc("muxflow_gpu_health_state", "1 for the GPU's current health state, 0 for the others.", append(gpuLabels, "state"), nil)
	descAdmits      = prometheus.NewDesc("muxflow_gpu_admits_offline", "1 when new offline work may be placed on the GPU.", gpuLabels, nil)
	descSamples     = prometheus.NewDesc("muxflow_gpu_samples_total", "Samples taken of the GPU.", gpuLabels, nil)
	descTransitions = prometheus.NewDesc("muxflow_gpu_health_transitions_total", "Health state changes, by the state entered.", append(gpuLabels, "to"), nil)
	descFaults      = prometheus.NewDesc("muxflow_gpu_faults_total", "GPU error events, by class.", append(gpuLabels, "class"), nil)
	descSampleErrs  = prometheus.NewDesc("muxflow_gpu_sample_errors_total", "Metric reads that failed (not counting unsupported metrics).", append(gpuLabels, "metric"), nil)
	descPollSeconds = prometheus.NewDesc("muxflow_monitor_poll_seconds", "Time the latest poll of all GPUs spent in NVML.", nil, nil)
	descDropped     = prometheus.NewDesc("muxflow_monitor_dropped_notifications_total", "Events a slow subscriber did not receive.", nil, nil)
)

type collector struct{ m *Monitor }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUtil, descMemUtil, descSMActivity, descSMClock, descSMClockMax,
		descMemUsed, descMemTotal, descTemp, descPower, descPowerLimit, descClockReason, descState, descAdmits,
		descSamples, descTransitions, descFaults, descSampleErrs, descPollSeconds, descDropped} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	snap := c.m.Snapshot()
	uuidIndex := make(map[string]string, len(snap))
	for _, st := range snap {
		idx := strconv.Itoa(st.Index)
		uuidIndex[st.UUID] = idx
		gauge := func(d *prometheus.Desc, v float64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{idx, st.UUID}, extra...)...)
		}
		for _, s := range States {
			gauge(descState, boolFloat(st.State == s), string(s))
		}
		gauge(descAdmits, boolFloat(st.AdmitsOffline))
		ch <- prometheus.MustNewConstMetric(descSamples, prometheus.CounterValue, float64(st.Samples), idx, st.UUID)

		s := st.Sample
		if s == nil || s.Lost {
			continue
		}
		// Metrics the GPU could not give are absent rather than 0, so a
		// dashboard does not show an unsupported metric as idle.
		if s.GPUUtilPercent != nil {
			gauge(descUtil, float64(*s.GPUUtilPercent))
		}
		if s.MemUtilPercent != nil {
			gauge(descMemUtil, float64(*s.MemUtilPercent))
		}
		if s.SMActivityPercent != nil {
			gauge(descSMActivity, *s.SMActivityPercent)
		}
		if s.SMClockMHz != nil {
			gauge(descSMClock, float64(*s.SMClockMHz))
		}
		if s.SMClockMaxMHz != nil {
			gauge(descSMClockMax, float64(*s.SMClockMaxMHz))
		}
		if s.MemoryUsedBytes != nil {
			gauge(descMemUsed, float64(*s.MemoryUsedBytes))
		}
		if s.MemoryTotalBytes != nil {
			gauge(descMemTotal, float64(*s.MemoryTotalBytes))
		}
		if s.TemperatureC != nil {
			gauge(descTemp, float64(*s.TemperatureC))
		}
		if s.PowerMilliwatts != nil {
			gauge(descPower, float64(*s.PowerMilliwatts)/1000)
		}
		if s.PowerLimitMilliwatts != nil {
			gauge(descPowerLimit, float64(*s.PowerLimitMilliwatts)/1000)
		}
		if s.ClockEventReasons != nil {
			for _, r := range clockReasonNames {
				gauge(descClockReason, boolFloat(*s.ClockEventReasons&r.bit != 0), r.name)
			}
		}
	}

	// Copy the counters so no lock is held while the registry consumes ch.
	c.m.mu.Lock()
	transitions := maps.Clone(c.m.counters.transitions)
	faults := maps.Clone(c.m.counters.faults)
	sampleErrors := maps.Clone(c.m.counters.sampleErrors)
	dropped := c.m.counters.dropped
	lastPoll := c.m.counters.lastPoll
	c.m.mu.Unlock()

	counter := func(d *prometheus.Desc, v uint64, uuid, extra string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), uuidIndex[uuid], uuid, extra)
	}
	for k, v := range transitions {
		counter(descTransitions, v, k[0], k[1])
	}
	for k, v := range faults {
		counter(descFaults, v, k[0], k[1])
	}
	for k, v := range sampleErrors {
		counter(descSampleErrs, v, k[0], k[1])
	}
	ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(dropped))
	ch <- prometheus.MustNewConstMetric(descPollSeconds, prometheus.GaugeValue, lastPoll.Seconds())
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
