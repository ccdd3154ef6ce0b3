package guard

import (
	"github.com/muxflow/muxflow/monitor"
	"github.com/muxflow/muxflow/muxd/api"
)

// The sampling view: the first step of a period. What the monitor last sampled of each
// GPU, and which running containers use it, online and offline. Every later step reads
// the period through this view; nothing in it outlives the step (its slices are reused
// by the next one).

// gpuView is one GPU as a period sees it.
type gpuView struct {
	status  monitor.GPUStatus
	online  []api.Container
	offline []api.Container
	// all is online then offline: every running container on the GPU.
	all []api.Container
}

// stepView is the whole node as a period sees it.
type stepView struct {
	gpus  []monitor.GPUStatus // the monitor's snapshot
	views []gpuView           // one per entry of gpus
	// running are the running containers, each once (their usage is read).
	running []api.Container
	// live are the IDs of every registered container, running or not: per-container
	// state of the others is forgotten. It is rebuilt (and rebuilt set, telling the
	// usage step to forget) only when the registry's list of IDs differs from the last
	// period's or every forgetEvery periods (state of a container registered and
	// removed between two periods).
	live     map[string]bool
	rebuilt  bool
	ids      []string // the last period's list of IDs
	sinceIDs int      // periods since live was rebuilt
	// listed is the registry's list this period, and idx scratch for gpuIndexes.
	listed []api.Container
	idx    []int
}

// sampleView fills the loop's view for this period from the monitor's snapshot and the
// registry.
func (g *Guard) sampleView() *stepView {
	sv := &g.loop.view
	sv.gpus = g.Monitor.Snapshot()
	if cap(sv.views) < len(sv.gpus) {
		sv.views = append(sv.views[:cap(sv.views)], make([]gpuView, len(sv.gpus)-cap(sv.views))...)
	}
	sv.views = sv.views[:len(sv.gpus)]
	for i := range sv.views {
		v := &sv.views[i]
		v.status, v.online, v.offline, v.all = sv.gpus[i], v.online[:0], v.offline[:0], v.all[:0]
	}
	sv.running = sv.running[:0]
	sv.listed = g.Containers.AppendTo(sv.listed[:0])
	sv.noteIDs()
	for _, c := range sv.listed {
		if c.State != api.StateRunning {
			continue
		}
		sv.running = append(sv.running, c)
		sv.idx = appendGPUIndexes(sv.idx[:0], c.GPUs, sv.gpus)
		for _, i := range sv.idx {
			if c.Class == api.Online {
				sv.views[i].online = append(sv.views[i].online, c)
			} else {
				sv.views[i].offline = append(sv.views[i].offline, c)
			}
		}
	}
	for i := range sv.views {
		v := &sv.views[i]
		v.all = append(append(v.all, v.online...), v.offline...)
	}
	return sv
}

// forgetEvery is how many periods may pass between rebuilds of stepView.live.
const forgetEvery = 50

// noteIDs rebuilds live, and sets rebuilt, when the listed IDs differ from the last period's
// (the list is sorted, so any add or removal shows) or forgetEvery periods have passed.
func (sv *stepView) noteIDs() {
	sv.sinceIDs++
	sv.rebuilt = sv.live == nil || sv.sinceIDs >= forgetEvery || len(sv.listed) != len(sv.ids)
	for i := 0; !sv.rebuilt && i < len(sv.listed); i++ {
		sv.rebuilt = sv.listed[i].ID != sv.ids[i]
	}
	if !sv.rebuilt {
		return
	}
	if sv.live == nil {
		sv.live = map[string]bool{}
	}
	clear(sv.live)
	sv.ids = sv.ids[:0]
	for _, c := range sv.listed {
		sv.live[c.ID] = true
		sv.ids = append(sv.ids, c.ID)
	}
	sv.sinceIDs = 0
}
