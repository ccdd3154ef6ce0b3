package guard

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/matcher/profile"
	"github.com/muxflow/muxflow/muxd/alloc"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/evict"
	"github.com/muxflow/muxflow/muxd/workloadprofile"
	"github.com/muxflow/muxflow/policy"
)

// Kernel lengths (profile.KernelRisk): an offline container whose kernels are several times
// as long as its online neighbour's requests, with blocks that may hold the SMs those need
// (or that overfill the memory bus with them), delays the online requests whatever its
// share.
// The guard measures both lengths, reports such a container in the GPU's status,
// records an event when it becomes one and logs when it stops being one (its kernels got
// shorter, or it left). MPS fixes a process's SMs when its context is created; where its
// blocks may hold the SMs the online kernels need, the guard confines its kernels while it
// is named, and ConfineHold after, to part of the SMs (confineShare; libxcuda launches
// them into a green context of that size), so that an online kernel arriving while one
// runs finds the rest free. A risk of the memory bus is not confined: the guard names one
// only where the job's MPS percentage fits the room the online kernels leave, below 100
// under the class's sm_max, and MPS then ignores green contexts. Its sm-percent from its
// start (fewer SMs ask less bandwidth) or another pairing is the cure.

// ConfineHold is how long an offline container stays confined after it was last named:
// a period without a measurement (the service idle, the job between steps) does not
// release it.
const ConfineHold = 5 * time.Second

// measured is an offline container's libxcuda-measured GPU time, its squares and its
// launch count at its last usage read, and what its libxcuda reported of its
// confinement then.
type measured struct {
	gpu     time.Duration
	sq, n   uint64
	confine ctlblock.ConfineState
}

// measureLaunches takes an offline container's usage totals into its LaunchTime. A
// counter that went back (the container's own word, or the sum of squares wrapping)
// starts a new baseline.
func (t *trust) measureLaunches(id string, u ctlblock.Usage) {
	prev, ok := t.measured[id]
	t.measured[id] = measured{u.GPUTime, u.GPUTimeSqUS2, u.MeasuredLaunches, u.Confine}
	if !ok || u.MeasuredLaunches < prev.n || u.GPUTime < prev.gpu || u.GPUTimeSqUS2 < prev.sq {
		return
	}
	lt := t.launchTime[id]
	if lt == nil {
		lt = &alloc.LaunchTime{}
		t.launchTime[id] = lt
	}
	lt.Observe(u.GPUTime-prev.gpu, u.GPUTimeSqUS2-prev.sq, u.MeasuredLaunches-prev.n)
}

// onlineBusy is what the guard reads of the online busy periods published in the node's
// signal page (blocks.Manager.OnlineBusy): their total length and count for the GPU of
// NVML index i.
type onlineBusy interface {
	OnlineBusy(i int) (ns, spans uint64)
}

// busy is a GPU's online busy periods as last read from the signal page.
type busy struct {
	ns, spans uint64
	read      bool
}

// observeSpans takes the GPU's online busy periods since the last period into st.span
// and returns how many ended (known: they were counted). The slot is the online
// containers' to write: a count that went back starts a new baseline, and
// alloc.BusySpan and the allocator clamp what is left.
func (g *Guard) observeSpans(v gpuView, st *gpuState) (spans uint64, known bool) {
	src, ok := g.Blocks.(onlineBusy)
	if !ok {
		return 0, false
	}
	ns, total := src.OnlineBusy(v.status.Index)
	prev := st.busy
	st.busy = busy{ns, total, true}
	if !prev.read || total < prev.spans || ns < prev.ns {
		return 0, false
	}
	spans = total - prev.spans
	st.span.Observe(time.Duration(min(ns-prev.ns, math.MaxInt64)), spans)
	return spans, true
}

// kernelRisks lists the GPU's offline containers whose kernels no share keeps from
// delaying the online requests (f: this period's MPS fit), records an event for each one
// that became one, logs each that stopped, keeps the list in st, confines those named
// for their SMs to confine percent of them (0: none; g.loop.confine), and sets when those
// no confinement protects are to be evicted (evictAfter: policy evict.kernel_risk, 0:
// never). g.mu held.
func (g *Guard) kernelRisks(v gpuView, st *gpuState, f *mpsFit, confine uint32, evictAfter time.Duration, now time.Time) {
	risks := st.risks[:0]
	if request := st.span.Mean(); len(v.online) > 0 && f.width > 0 && request > 0 {
		for _, c := range v.offline {
			lt := g.loop.trust.launchTime[c.ID]
			if lt == nil {
				continue
			}
			// Its blocks leave the online kernels their SMs where the percentage its
			// processes may hold is within the room the widest online kernel leaves;
			// then only a busy memory bus makes its kernels a risk.
			room := float64(g.heldMPS(c.ID)) <= (1-f.width)*100+0.5
			if room && !f.busBound {
				continue
			}
			perLaunch, met := lt.Mean()
			if ratio, risky := profile.KernelRisk(met, request); risky {
				risks = append(risks, api.KernelRisk{ID: c.ID, OfflineKernel: met, OfflinePerLaunch: perLaunch, OnlineRequest: request, Ratio: ratio, MemoryBus: room})
			}
		}
	}
	uuid := v.status.UUID
	g.confineRisks(v, st, risks, confineShare(confine, f.width, g.loop.allocCfg.FitMin), now)
	g.unprotected(v, st, risks, f.width, evictAfter, now)
	for _, r := range risks {
		if st.risky[r.ID] {
			continue
		}
		if st.risky == nil {
			st.risky = map[string]bool{}
		}
		st.risky[r.ID] = true
		g.Log.Warn("offline kernels too long beside the online requests: no offline share keeps them from delaying online requests",
			"gpu", uuid, "id", r.ID, "offline_kernel", r.OfflineKernel, "online_request", r.OnlineRequest, "ratio", fmt.Sprintf("%.1f", r.Ratio), "memory_bus", r.MemoryBus)
		g.event(uuid, r.ID, r.String())
	}
	for id := range st.risky {
		if !slices.ContainsFunc(risks, func(r api.KernelRisk) bool { return r.ID == id }) {
			delete(st.risky, id)
			g.Log.Info("offline container no longer named for kernels too long beside the online requests", "gpu", uuid, "id", id)
		}
	}
	st.risks = risks
}

// confineShare is the percentage of the SMs a named job is confined to: what the widest
// online kernel leaves (width, 0..1; 0: unknown), where that is at least fitMin, so that
// the online kernels never wait for its blocks; else policy (alloc.confine), where the
// online kernels run beside it on fewer SMs. 0: not confined.
func confineShare(policy uint32, width, fitMin float64) uint32 {
	if policy == 0 || width <= 0 || 1-width < fitMin {
		return policy
	}
	return uint32(math.Floor((1 - width) * 100))
}

// confineRisks keeps st.confined (when each container was last named for its SMs) and
// marks this period's confinements in g.loop.confine and in the risks: the share is the
// GPU's, split evenly among the containers confined on it (each process's green context
// is its own partition, and two of half the SMs each could hold them all). A container no
// longer on the GPU, or a GPU with no online container, is released at once. g.mu held.
func (g *Guard) confineRisks(v gpuView, st *gpuState, risks []api.KernelRisk, confine uint32, now time.Time) {
	if confine > 0 && len(v.online) > 0 {
		for _, r := range risks {
			if r.MemoryBus {
				continue
			}
			if st.confined == nil {
				st.confined = map[string]time.Time{}
			}
			if _, was := st.confined[r.ID]; !was {
				g.Log.Warn("offline container confined to part of the SMs while its kernels are too long beside the online requests",
					"gpu", v.status.UUID, "id", r.ID, "sm_percent", confine)
			}
			st.confined[r.ID] = now
		}
	}
	for id, at := range st.confined {
		here := slices.ContainsFunc(v.offline, func(c api.Container) bool { return c.ID == id })
		if confine == 0 || len(v.online) == 0 || !here || now.Sub(at) > ConfineHold || now.Before(at) {
			delete(st.confined, id)
			g.Log.Info("offline container no longer confined", "gpu", v.status.UUID, "id", id)
		}
	}
	if n := uint32(len(st.confined)); n > 0 {
		each := max(1, confine/n)
		for id := range st.confined {
			g.loop.confine[id] = each
		}
	}
	for i := range risks {
		risks[i].ConfinePercent = g.loop.confine[risks[i].ID]
	}
}

// namedSpan is when a container began to be named unprotected, and the last period it
// was.
type namedSpan struct{ since, last time.Time }

// unprotected keeps st.unprotected (since when each container has been named for its SMs
// without a break, and no confinement leaves the online kernels theirs: they are wider
// than the room fit_min asks, or its libxcuda did not confine it) and sets each such
// risk's EvictAt evictAfter after that (0: never). A risk of the memory bus is never
// evicted for: those names are looser (docs/results.md, *Random scenarios*). g.mu held.
func (g *Guard) unprotected(v gpuView, st *gpuState, risks []api.KernelRisk, width float64, evictAfter time.Duration, now time.Time) {
	room := width > 0 && 1-width >= g.loop.allocCfg.FitMin
	for i, r := range risks {
		protected := room && r.ConfinePercent > 0 && g.loop.trust.measured[r.ID].confine == ctlblock.ConfineOn
		if r.MemoryBus || protected {
			continue
		}
		if st.unprotected == nil {
			st.unprotected = map[string]namedSpan{}
		}
		s, ok := st.unprotected[r.ID]
		if !ok || now.Before(s.since) {
			s.since = now
		}
		s.last = now
		st.unprotected[r.ID] = s
		if evictAfter > 0 {
			risks[i].EvictAt = s.since.Add(evictAfter)
		}
	}
	for id, s := range st.unprotected {
		if s.last != now { // not named this period, or protected: the count starts again
			delete(st.unprotected, id)
		}
	}
}

// evictRisks evicts, alone, each offline container whose kernel risk is past its EvictAt
// (unprotected), once: the online requests keep waiting for its kernels whatever muxd
// does (where the matcher runs, the profile muxd measured keeps it from pairing the two
// again). Its GPU keeps admitting offline work.
func (g *Guard) evictRisks(ctx context.Context, sv *stepView, p *policy.Policy, now time.Time) {
	if g.Evictor == nil {
		return
	}
	var due []evict.Target
	var gpus []string
	g.mu.Lock()
	for _, v := range sv.views {
		st := g.gpus[v.status.UUID]
		if st == nil {
			continue
		}
		for id := range st.evicted { // gone from the GPU: forgotten
			if !slices.ContainsFunc(v.offline, func(c api.Container) bool { return c.ID == id }) {
				delete(st.evicted, id)
			}
		}
		for _, r := range st.risks {
			if r.EvictAt.IsZero() || now.Before(r.EvictAt) || st.evicted[r.ID] {
				continue
			}
			i := slices.IndexFunc(v.offline, func(c api.Container) bool { return c.ID == r.ID })
			if i < 0 {
				continue
			}
			if st.evicted == nil {
				st.evicted = map[string]bool{}
			}
			st.evicted[r.ID] = true
			c := v.offline[i]
			due = append(due, evict.Target{ID: c.ID, Namespace: c.Namespace, PID: c.PID, Pod: c.Pod})
			gpus = append(gpus, v.status.UUID)
		}
	}
	g.mu.Unlock()
	grace := p.Evict.Grace.D()
	for i, t := range due {
		uuid := gpus[i]
		reason := fmt.Sprintf("named for %v for kernels that keep the online requests waiting, and no confinement leaves the online kernels their SMs (evict.kernel_risk)", p.Evict.KernelRisk.D())
		g.Log.Warn("evicting an offline container the online requests wait for", "gpu", uuid, "id", t.ID, "after", p.Evict.KernelRisk.D())
		g.event(uuid, t.ID, "evicted, alone: "+reason)
		go func() {
			if err := g.Evictor.EvictAlone(ctx, uuid, reason, grace, t); err != nil {
				g.Log.Error("eviction incomplete", "id", t.ID, "err", err)
			}
		}()
	}
}

// observeKernels gives the profiler what the guard knows of a container's kernels on
// the GPU uuid: an online one's busy periods and its kernels' width, an offline one's
// kernel in flight at a random moment.
func (g *Guard) observeKernels(o *workloadprofile.Observation, uuid string) {
	if o.Online {
		if st := g.gpus[uuid]; st != nil {
			o.RequestUS = float64(st.span.Mean()) / float64(time.Microsecond)
			o.WidthPct = st.fit.width * 100
		}
		return
	}
	if lt := g.loop.trust.launchTime[o.ID]; lt != nil {
		_, met := lt.Mean()
		o.KernelUS = float64(met) / float64(time.Microsecond)
	}
}
