package guard

import (
	"fmt"
	"slices"
	"time"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/matcher/profile"
	"github.com/muxflow/muxflow/muxd/alloc"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/workloadprofile"
)

// Kernel lengths (profile.KernelRisk): an offline container whose kernels are several times
// as long as its online neighbour's, with blocks that may hold the SMs those need (or
// that overfill the memory bus with them), delays the online requests whatever its share.
// The guard measures both lengths, reports such a container in the GPU's status,
// records an event when it becomes one and logs when it stops being one (its kernels got
// shorter, or it left); it changes nothing itself (MPS fixes a
// process's SMs when its context is created, and the cure, confining the job or pairing
// it elsewhere, is the operator's or the matcher's).

// measured is an offline container's libxcuda-measured GPU time and launch count at its
// last usage read.
type measured struct {
	gpu, wide time.Duration
	n         uint64
}

// measureLaunches takes an offline container's usage totals into its LaunchTime. A
// counter that went back (the container's own word) starts a new baseline.
func (t *trust) measureLaunches(id string, u ctlblock.Usage) {
	prev, ok := t.measured[id]
	t.measured[id] = measured{u.GPUTime, u.WideGPUTime, u.MeasuredLaunches}
	if !ok || u.MeasuredLaunches < prev.n || u.GPUTime < prev.gpu || u.WideGPUTime < prev.wide {
		return
	}
	lt := t.launchTime[id]
	if lt == nil {
		lt = &alloc.LaunchTime{}
		t.launchTime[id] = lt
	}
	lt.Observe(u.GPUTime-prev.gpu, u.WideGPUTime-prev.wide, u.MeasuredLaunches-prev.n)
}

// kernelRisks lists the GPU's offline containers whose kernels no share keeps from
// delaying the online ones (f: this period's MPS fit; online: the allocator's GPU time
// per online launch), records an event for each one that became one, logs each that
// stopped, and keeps the list in st. g.mu held.
func (g *Guard) kernelRisks(v gpuView, st *gpuState, f *mpsFit, online time.Duration) {
	risks := st.risks[:0]
	if len(v.online) > 0 && f.width > 0 {
		for _, c := range v.offline {
			lt := g.loop.trust.launchTime[c.ID]
			if lt == nil {
				continue
			}
			// Its blocks leave the online kernels their SMs where the percentage its
			// processes may hold is within the room the widest online kernel leaves.
			room := float64(g.heldMPS(c.ID)) <= (1-f.width)*100+0.5
			all, wide := lt.Mean()
			off := wide
			if room {
				if !f.busBound {
					continue
				}
				off = all
			}
			if ratio, risky := profile.KernelRisk(off, online); risky {
				risks = append(risks, api.KernelRisk{ID: c.ID, OfflineKernel: all, OfflineWide: wide, OnlineKernel: online, Ratio: ratio, MemoryBus: room})
			}
		}
	}
	uuid := v.status.UUID
	for _, r := range risks {
		if st.risky[r.ID] {
			continue
		}
		if st.risky == nil {
			st.risky = map[string]bool{}
		}
		st.risky[r.ID] = true
		g.Log.Warn("offline kernels too long beside the online ones: no offline share keeps them from delaying online requests",
			"gpu", uuid, "id", r.ID, "offline_kernel", r.OfflineKernel, "online_kernel", r.OnlineKernel, "ratio", fmt.Sprintf("%.1f", r.Ratio), "memory_bus", r.MemoryBus)
		g.event(uuid, r.ID, r.String())
	}
	for id := range st.risky {
		if !slices.ContainsFunc(risks, func(r api.KernelRisk) bool { return r.ID == id }) {
			delete(st.risky, id)
			g.Log.Info("offline container no longer named for kernels too long beside the online ones", "gpu", uuid, "id", id)
		}
	}
	st.risks = risks
}

// observeKernels gives the profiler what the guard knows of a container's kernels on
// the GPU uuid: an online one's GPU time per launch (the allocator's) and its kernels'
// width, an offline one's GPU time per launch in wide launches.
func (g *Guard) observeKernels(o *workloadprofile.Observation, uuid string) {
	if o.Online {
		if a := g.loop.allocs[uuid]; a != nil {
			o.KernelUS = float64(a.LaunchCost()) / float64(time.Microsecond)
		}
		if st := g.gpus[uuid]; st != nil {
			o.WidthPct = st.fit.width * 100
		}
		return
	}
	if lt := g.loop.trust.launchTime[o.ID]; lt != nil {
		_, wide := lt.Mean()
		o.KernelUS = float64(wide) / float64(time.Microsecond)
	}
}
