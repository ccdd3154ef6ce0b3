package daemon

import (
	"context"
	"os"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"time"

	"github.com/muxflow/muxflow/matcher/profile"
	"github.com/muxflow/muxflow/monitor"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/evict"
	"github.com/muxflow/muxflow/muxd/guard"
	"github.com/muxflow/muxflow/muxd/workloadprofile"
	"github.com/muxflow/muxflow/policy"
)

// monitorConfig maps the policy's [monitor] section onto SysMonitor's configuration.
// The policy names entry thresholds only; the monitor puts each clear threshold a
// margin inside its entry threshold — the hysteresis band that keeps a GPU from
// flapping around one value.
func monitorConfig(p *policy.Policy) monitor.Config {
	c := monitor.DefaultConfig()
	m := p.Monitor
	c.Period = m.Period.D()
	c.TempSoftC, c.TempHardC = m.SoftTemperature, m.HardTemperature
	c.MemSoftPercent, c.MemHardPercent = float64(m.SoftMemory), float64(m.HardMemory)
	c.ClockSoftPercent = float64(m.SoftSMClock)
	c.SetClearMargins()
	c.SoftEnterSamples = m.Hysteresis
	c.ThrottledMax = m.ThrottledMax.D()
	c.RecoverAfter = m.Recovery.D()
	c.SoftClearAfter = min(c.SoftClearAfter, m.Recovery.D())
	return c
}

// monitorInventory reports the GPUs the monitor watches, with their health and the
// allocator's latest decision.
type monitorInventory struct {
	mon   *monitor.Monitor
	guard *guard.Guard
}

func (m monitorInventory) GPUs(context.Context) ([]api.GPU, error) {
	shares := map[string]guard.Status{}
	for _, s := range m.guard.Statuses() {
		shares[s.UUID] = s
	}
	var out []api.GPU
	for _, s := range m.mon.Snapshot() {
		g := api.GPU{Index: s.Index, UUID: s.UUID, Name: s.Name, Health: string(s.State), HealthReason: s.Reason.Text,
			HealthSince: s.Since, AdmitsOffline: s.AdmitsOffline}
		if smp := s.Sample; smp != nil {
			if smp.MemoryTotalBytes != nil {
				g.MemoryTotal = *smp.MemoryTotalBytes
			}
			if smp.MemoryUsedBytes != nil {
				g.MemoryUsed = *smp.MemoryUsedBytes
			}
			if smp.GPUUtilPercent != nil {
				g.Utilization = float64(*smp.GPUUtilPercent)
			}
			if smp.SMActivityPercent != nil {
				v := *smp.SMActivityPercent
				g.SMActivity = &v
			}
		}
		if st, ok := shares[s.UUID]; ok {
			g.OfflineCeiling = st.OfflineShare * 100
			g.OfflineShare = g.OfflineCeiling
			g.OnlineDemand = st.OnlineDemand * 100
			g.OfflineContainers = st.OfflineContainers
			g.DemandSource, g.CeilingReason, g.CeilingChanged = st.DemandSource, st.Reason, st.Changed
			g.CeilingReasonKey, g.Burst, g.CeilingHistory = st.ReasonKey, st.Burst, st.History
			g.OnlineWidth, g.OfflineMPS, g.OfflineMPSFits = st.OnlineWidth*100, st.MPSBudget*100, st.Fits
			g.OfflineMPSPowerCapped, g.OfflineMPSHeld, g.OfflineMPSFitted, g.OfflineMPSWaiting = st.PowerCapped, st.MPSHeld, st.MPSFitted, st.MPSWaiting
			g.OfflineMPSMemBound, g.OnlineMemBW, g.OfflineMemBW = st.MemBound, st.OnlineMemBW*100, st.OfflineMemBW*100
			g.KernelRisks = st.KernelRisks
		}
		out = append(out, g)
	}
	return out, nil
}

// setupGPUs starts SysMonitor and the guard when the daemon has NVML (real or gpusim's).
func (d *Daemon) setupGPUs() error {
	p := d.policy()
	mon, err := monitor.New(d.opts.NVML, monitorConfig(p), nil, d.log)
	if err != nil {
		return err
	}
	var containers evict.Stopper
	if addr := p.Evict.ContainerdAddress; addr != "" {
		if _, err := os.Stat(addr); err == nil {
			containers = evict.Containerd{Address: addr}
		}
	}
	var stopper evict.Stopper = evict.Router{Containers: containers, Processes: evict.Processes{}}
	if p.Evict.Kubernetes {
		k, err := evict.InCluster(stopper)
		if err != nil {
			return err
		}
		stopper = k
	}
	ev := evict.NewEvictor(stopper, d.log.With("part", "evict"))
	ev.OnEvicted = func(t evict.Target, gpu, reason string, err error) {
		result := "ok"
		if err != nil {
			result = "failed"
		}
		d.metrics.evictions.WithLabelValues(gpu, result).Inc()
	}
	d.prof = workloadprofile.New()
	g := &guard.Guard{
		Monitor: mon, Containers: d.reg, Blocks: d.controls, Evictor: ev,
		Policy: d.policy, Log: d.log.With("part", "guard"), Owner: guard.ProcOwner, Profiler: d.prof,
	}
	if d.mps != nil {
		g.MPS = d.mps
	}
	g.OnSticky = func(gpu string, c api.Container) { d.metrics.sticky.WithLabelValues(gpu, string(c.Class)).Inc() }
	d.mon, d.guard = mon, g
	if p.MPS.Enabled {
		d.setComputeMode()
	}
	d.inv = monitorInventory{mon: mon, guard: g}
	d.metrics.reg.MustRegister(mon.Collector(), kernelRisks(g.Statuses))
	return nil
}

// runGPUs runs the monitor and the guard until ctx ends: the NVML error events in their
// own goroutine (they apply to a GPU as they arrive), sampling and the guard's step in one
// loop on one timer, so that muxd wakes once per period rather than once for the monitor
// and again, at an unrelated moment, for the guard; the step then also works on a sample
// taken just before it instead of one up to a period old.
func (d *Daemon) runGPUs(ctx context.Context, spawn func(func())) {
	if d.mon == nil {
		return
	}
	spawn(func() { d.mon.WatchEvents(ctx) })
	spawn(func() { d.sampleAndStep(ctx) })
}

// sampleAndStep polls the monitor every monitor period and runs the guard's step every
// allocator period (policy alloc.period, read each time so that a reload applies), both
// from one timer: when the two periods are equal, as by default, a step follows each
// poll at once; otherwise the timer is set for whichever is due first. The first step
// waits one sampling period, so that the monitor has samples when shares are computed.
func (d *Daemon) sampleAndStep(ctx context.Context) {
	samplePeriod := d.policy().Monitor.Period.D()
	start := time.Now()
	nextPoll, nextStep := start, start.Add(samplePeriod)
	warned := false
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			d.guard.EndTurns() // muxd stopping: no job may wait for a turn nobody gives
			return
		case <-t.C:
		}
		now := time.Now()
		if !now.Before(nextPoll) {
			// "100 ms or what NVML allows": when the driver is slower, polls are
			// skipped and the effective period stretches; say so once.
			if took := d.mon.Poll(); took > samplePeriod && !warned {
				warned = true
				d.log.Warn("sampling all GPUs takes longer than the period; samples will be further apart", "took", took, "period", samplePeriod)
			}
			nextPoll = advance(nextPoll, samplePeriod, time.Now())
		}
		// A step due within a millisecond runs now rather than a wake-up later.
		if now = time.Now(); !now.Add(time.Millisecond).Before(nextStep) {
			d.guard.Step(ctx, now)
			nextStep = advance(nextStep, d.policy().Alloc.Period.D(), time.Now())
		}
		t.Reset(time.Until(earliest(nextPoll, nextStep)))
	}
}

// advance returns the first tick of period after next that is not before now: ticks
// stay on the grid started at the first one, and missed ones are dropped, as a Ticker's.
func advance(next time.Time, period time.Duration, now time.Time) time.Time {
	next = next.Add(period)
	if next.Before(now) {
		next = next.Add(now.Sub(next).Truncate(period) + period)
	}
	return next
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// setComputeMode puts every GPU in EXCLUSIVE_PROCESS mode, as NVIDIA recommends for MPS:
// only the MPS server then holds a context on the GPU, so no client can bypass MPS.
func (d *Daemon) setComputeMode() {
	lib := d.opts.NVML
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return
	}
	for i := range n {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		if mode, ret := dev.GetComputeMode(); ret == nvml.SUCCESS && mode == nvml.COMPUTEMODE_EXCLUSIVE_PROCESS {
			continue
		}
		switch ret := dev.SetComputeMode(nvml.COMPUTEMODE_EXCLUSIVE_PROCESS); ret {
		case nvml.SUCCESS:
			d.log.Info("GPU set to exclusive-process compute mode for MPS", "gpu", i)
		case nvml.ERROR_NOT_SUPPORTED:
		default:
			d.log.Warn("cannot set exclusive-process compute mode; MPS still works but non-MPS contexts can share the GPU", "gpu", i, "err", nvml.ErrorString(ret))
		}
	}
}

// nodeReport builds GET /v1/node: every GPU with its health, memory, online workload and
// offline pairing (with their profiles), and the co-location records.
func (d *Daemon) nodeReport() api.NodeReport {
	r := api.NodeReport{Node: d.nodeInfo(), GPUs: []profile.GPUReport{}}
	if d.mon == nil {
		return r
	}
	containers := d.reg.List()
	for _, s := range d.mon.Snapshot() {
		g := profile.GPUReport{UUID: s.UUID, Index: s.Index, Type: guard.GPUType(s.Name), Health: matcherHealth(s.State)}
		if smp := s.Sample; smp != nil && smp.MemoryTotalBytes != nil {
			g.MemoryTotalMiB = float64(*smp.MemoryTotalBytes) / (1 << 20)
			g.MemoryFreeMiB = g.MemoryTotalMiB
			if smp.MemoryUsedBytes != nil {
				g.MemoryFreeMiB -= float64(*smp.MemoryUsedBytes) / (1 << 20)
			}
		}
		for _, c := range containers {
			if c.State != api.StateRunning || !usesGPU(c.GPUs, s) {
				continue
			}
			pr, _, ok := d.prof.Profile(c.ID)
			if !ok {
				continue
			}
			w := profile.Workload{ID: workloadID(c), Profile: pr}
			if c.Class == api.Online && g.Online == nil {
				g.Online = &w
			} else if c.Class == api.Offline {
				g.Offline = append(g.Offline, w)
			}
		}
		r.GPUs = append(r.GPUs, g)
	}
	r.Colocations = d.prof.Records()
	return r
}

// matcherHealth maps SysMonitor's states onto the matcher's three.
func matcherHealth(s monitor.State) profile.Health {
	switch s {
	case monitor.Healthy:
		return profile.Healthy
	case monitor.Throttled, monitor.Recovering:
		return profile.Warning
	}
	return profile.Unhealthy
}

func usesGPU(list []string, s monitor.GPUStatus) bool {
	for _, g := range list {
		if g == "all" || g == s.UUID || g == strconv.Itoa(s.Index) {
			return true
		}
	}
	return false
}

// workloadID names a workload cluster-wide: its pod when Kubernetes runs it.
func workloadID(c api.Container) string {
	if c.Pod != "" {
		return c.Pod
	}
	return c.ID
}
