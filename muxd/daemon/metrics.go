package daemon

import (
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/buildinfo"
	"github.com/muxflow/muxflow/muxd/guard"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	reloads   *prometheus.CounterVec
	evictions *prometheus.CounterVec
	sticky    *prometheus.CounterVec
}

func newMetrics(d *Daemon) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "muxd_api_requests_total", Help: "API requests by route and HTTP status.",
		}, []string{"route", "code"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "muxd_policy_reloads_total", Help: "Policy reloads by result (ok, rejected).",
		}, []string{"result"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "muxd_evictions_total", Help: "Offline containers evicted, by GPU and result (ok, failed).",
		}, []string{"gpu", "result"}),
		sticky: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "muxd_sticky_errors_total", Help: "Containers whose GPU context died (a sticky CUDA error reported by libxcuda), by GPU and class.",
		}, []string{"gpu", "class"}),
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "muxd_build_info", Help: "Always 1; the version label says which muxd runs.",
		ConstLabels: prometheus.Labels{"version": buildinfo.Version},
	})
	info.Set(1)
	for _, class := range []api.Class{api.Online, api.Offline} {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "muxd_containers", Help: "Registered containers by class.",
			ConstLabels: prometheus.Labels{"class": string(class)},
		}, func() float64 {
			n := 0
			for _, c := range d.reg.List() {
				if c.Class == class {
					n++
				}
			}
			return float64(n)
		}))
	}
	m.reg.MustRegister(m.requests, m.reloads, m.evictions, m.sticky, info,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// descKernelRisk is the kernel-risk gauge: one series per offline container muxd names
// as too long beside the online requests (guard.Status.KernelRisks), valued at the ratio
// of the kernel a request meets to a request; absent for every other container, so an
// alert on its presence fires exactly while muxd names one.
var descKernelRisk = prometheus.NewDesc("muxd_offline_kernel_risk_ratio",
	"Offline containers whose kernels keep the online requests waiting whatever their share: the kernel a request meets over a request (profile.KernelRisk).",
	[]string{"gpu", "container"}, nil)

// kernelRisks collects descKernelRisk from the guard's latest statuses on each scrape.
type kernelRisks func() []guard.Status

func (k kernelRisks) Describe(ch chan<- *prometheus.Desc) { ch <- descKernelRisk }

func (k kernelRisks) Collect(ch chan<- prometheus.Metric) {
	for _, s := range k() {
		for _, r := range s.KernelRisks {
			ch <- prometheus.MustNewConstMetric(descKernelRisk, prometheus.GaugeValue, r.Ratio, s.UUID, r.ID)
		}
	}
}
