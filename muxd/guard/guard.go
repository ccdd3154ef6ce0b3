// Package guard is muxd's GPU-level control loop. Each period it reads every GPU's health
// and sample from the monitor, finds which registered containers use the GPU, asks the
// allocator for the offline share, and writes it into the offline containers' control
// blocks (libxcuda enforces it at the next launch). When a GPU turns Unhealthy it evicts
// the GPU's offline work; when it is Faulted it runs the node side of the mixed error
// handling: evict offline work, restart the MPS server, then tell the monitor the GPU was
// reset. It also decides whether a GPU admits new offline work.
package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/monitor"
	"github.com/muxflow/muxflow/muxd/alloc"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/control"
	"github.com/muxflow/muxflow/muxd/evict"
	"github.com/muxflow/muxflow/muxd/profiler"
	"github.com/muxflow/muxflow/policy"
)

// Monitor is the part of monitor.Monitor the guard uses.
type Monitor interface {
	Snapshot() []monitor.GPUStatus
	ClearFault(uuid string) error
	// RecordContainerEvent logs what one container's block reported and what was done.
	RecordContainerEvent(uuid, container, text string) error
}

// Containers lists registered containers.
type Containers interface {
	List() []api.Container
}

// Blocks gives the open control block of a container (nil if it has none).
type Blocks interface {
	Block(id string) *ctlblock.Block
}

// MPS restarts the node's MPS servers (the control daemon and, with it, every server).
type MPS interface {
	Restart(reason string)
}

// Guard is the loop. Fields are set once before Run.
type Guard struct {
	Monitor    Monitor
	Containers Containers
	Blocks     Blocks
	Evictor    *evict.Evictor
	MPS        MPS // nil when MPS is disabled
	Policy     func() *policy.Policy
	Log        *slog.Logger
	// Owner maps a GPU process to the registered container it belongs to; the real one
	// follows /proc parent links to the container's init pid.
	Owner func(pid int, inits map[int]string) (string, bool)
	// Profiler, when set, receives each period's per-container measurements.
	Profiler *profiler.Profiler
	// OnSticky, when set, is told of each container that reported a sticky error.
	OnSticky func(gpu string, c api.Container)

	mu        sync.Mutex
	allocs    map[string]*alloc.GPU
	allocCfg  alloc.Config
	lastState map[string]monitor.State
	launches  map[string]uint64 // container id -> launches at the previous step
	lastStep  time.Time
	decisions map[string]alloc.Decision
	handling  map[string]bool   // GPUs with an eviction or fault handling under way
	sticky    map[string]uint32 // container id -> sticky errors seen at the previous step
	// restartAsked: a handling under way on the GPU must restart MPS when done.
	restartAsked map[string]bool
	// quarantined: containers whose usage block was found corrupt, and why. Their
	// reports are ignored from then on (an offline one is also evicted).
	quarantined map[string]string
	// suspect counts consecutive steps in which a container's values were impossible.
	suspect map[string]int
	// reports are sticky errors that containers reported and that await evidence from
	// outside the container before anything is done to other containers.
	reports map[string]stickyReport
	// lastSticky is when each container last reported a sticky error (for corroboration).
	lastSticky map[string]time.Time
	// gpus keeps, per GPU, the demand estimate's inputs and why the ceiling last changed.
	gpus map[string]*gpuState
	// ceilings is each offline container's effective ceiling as last applied.
	ceilings map[string]api.Ceiling
}

// gpuState is what the guard remembers of one GPU between periods.
type gpuState struct {
	// lastGood is the online utilisation measured the last time the online containers'
	// processes were found in NVML's per-process samples (haveGood says there was one).
	lastGood float64
	haveGood bool
	// source says where this period's online utilisation came from; failing is set while
	// attribution fails (a change is logged once, not every period).
	source  string
	failing bool
	// reason, reasonKey and changed: why the offline ceiling last changed, and when.
	reason, reasonKey string
	changed           time.Time
	share             float64
	offline           int
	// history is the GPU's latest ceiling changes, oldest first.
	history []api.CeilingChange
}

// stickyReport is one container's unconfirmed report of a dead GPU context.
type stickyReport struct {
	at   time.Time // when muxd saw the count rise (the container's own clock is not trusted)
	code uint32
}

// Evidence rules for the node side of error handling (docs/errors.md, "What a restart
// needs"). A container's usage block is its own word: it decides what happens to that
// container, never to others.
const (
	// StickyWindow is how far apart a container's sticky-error report and the evidence
	// that confirms it may be.
	StickyWindow = 10 * time.Second
	// MaxLaunchRate bounds the launches per second a container can make: each launch
	// costs a few microseconds of CPU in the driver, and a container has at most
	// ctlblock.MaxProcs processes. A faster rise of the counter is forged.
	MaxLaunchRate = 50e6
	// suspectSteps is how many consecutive reads must show impossible values before a
	// container is quarantined (a single read could be torn by a concurrent write); a
	// broken header or a truncated file is acted on at once.
	suspectSteps = 2
)

// Status is the guard's view of one GPU, for the API.
type Status struct {
	UUID string `json:"uuid"`
	// OfflineShare is the GPU's offline ceiling: the share of GPU time all its offline
	// containers together may use (they split it; see alloc.SplitBudget).
	OfflineShare float64 `json:"offline_share"`
	OnlineDemand float64 `json:"online_demand"`
	Burst        bool    `json:"burst,omitempty"`
	// DemandSource says where the online utilisation came from (or why a conservative
	// fallback was used).
	DemandSource string `json:"demand_source,omitempty"`
	// Reason is why the offline ceiling last changed, and Changed when.
	Reason  string    `json:"reason,omitempty"`
	Changed time.Time `json:"changed,omitzero"`
	// OfflineContainers is how many running offline containers split the ceiling.
	OfflineContainers int `json:"offline_containers"`
	// ReasonKey is the last change's short reason; History the latest changes.
	ReasonKey string              `json:"reason_key,omitempty"`
	History   []api.CeilingChange `json:"history,omitempty"`
}

// AllocConfig maps the policy onto the allocator's configuration.
func AllocConfig(p *policy.Policy) alloc.Config {
	return alloc.Config{
		Mode:        alloc.Mode(p.Alloc.Mode),
		Headroom:    p.Alloc.Headroom.Fraction(),
		StaticShare: p.Alloc.StaticShare.Fraction(),
		GiveBack:    p.Alloc.GiveBack.Fraction(),
		OfflineMin:  p.Classes.Offline.SMMin.Fraction(),
		OfflineMax:  p.Classes.Offline.SMMax.Fraction(),
		DayLength:   p.Alloc.DayLength.D(),
	}
}

// Run steps the loop every alloc.period until ctx is done.
func (g *Guard) Run(ctx context.Context) error {
	for {
		period := g.Policy().Alloc.Period.D()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(period):
		}
		g.Step(ctx, time.Now())
	}
}

type gpuView struct {
	status  monitor.GPUStatus
	online  []api.Container
	offline []api.Container
}

// Step runs one period of the loop.
func (g *Guard) Step(ctx context.Context, now time.Time) {
	p := g.Policy()
	g.mu.Lock()
	if g.allocs == nil {
		g.allocs, g.lastState, g.launches = map[string]*alloc.GPU{}, map[string]monitor.State{}, map[string]uint64{}
		g.decisions, g.handling, g.sticky = map[string]alloc.Decision{}, map[string]bool{}, map[string]uint32{}
		g.restartAsked = map[string]bool{}
		g.quarantined, g.suspect = map[string]string{}, map[string]int{}
		g.reports, g.lastSticky = map[string]stickyReport{}, map[string]time.Time{}
		g.gpus, g.ceilings = map[string]*gpuState{}, map[string]api.Ceiling{}
	}
	cfg := AllocConfig(p)
	if cfg != g.allocCfg {
		// A policy reload: restart the allocators with the new settings (shares will
		// ramp up from their cut values as usual).
		g.allocCfg, g.allocs = cfg, map[string]*alloc.GPU{}
	}
	dt := now.Sub(g.lastStep).Seconds()
	g.lastStep = now
	g.mu.Unlock()

	gpus := g.Monitor.Snapshot()
	views := make([]gpuView, len(gpus))
	for i, s := range gpus {
		views[i].status = s
	}
	containers := g.Containers.List()
	for _, c := range containers {
		if c.State != api.StateRunning {
			continue
		}
		for _, i := range gpuIndexes(c.GPUs, gpus) {
			if c.Class == api.Online {
				views[i].online = append(views[i].online, c)
			} else {
				views[i].offline = append(views[i].offline, c)
			}
		}
	}
	// Each container's usage, read once: launch rates since the last step and sticky
	// errors come from it. It is the container's word: read through a validated copy,
	// and a container whose block is corrupt is quarantined (its own fault only).
	usage := map[string]ctlblock.Usage{}
	rates := map[string]float64{}
	live := map[string]bool{}
	corrupt := map[string]string{}
	g.mu.Lock()
	for _, c := range containers {
		live[c.ID] = true
		if _, q := g.quarantined[c.ID]; q {
			continue
		}
		b := g.Blocks.Block(c.ID)
		if b == nil {
			continue
		}
		u, err := b.Snapshot()
		var ce *ctlblock.CorruptError
		switch {
		case errors.As(err, &ce):
			g.suspect[c.ID]++
			if ce.Header || g.suspect[c.ID] >= suspectSteps {
				corrupt[c.ID] = ce.Error()
			}
			continue
		case err != nil:
			continue // closed while being removed
		}
		n := u.Launches
		if prev, ok := g.launches[c.ID]; ok && dt > 0 {
			if n < prev {
				g.suspect[c.ID]++
				if g.suspect[c.ID] >= suspectSteps {
					corrupt[c.ID] = fmt.Sprintf("its launch counter went back from %d to %d", prev, n)
				}
				continue
			}
			if r := float64(n-prev) / dt; r > MaxLaunchRate {
				g.suspect[c.ID]++
				if g.suspect[c.ID] >= suspectSteps {
					corrupt[c.ID] = fmt.Sprintf("its launch counter rose %d in %.3fs (%.3g/s; at most %.3g/s is possible)", n-prev, dt, r, MaxLaunchRate)
				}
				continue
			} else {
				rates[c.ID] = r
			}
		}
		delete(g.suspect, c.ID)
		usage[c.ID] = u
		g.launches[c.ID] = n
	}
	// Forget containers that are gone, so the per-container state does not grow forever.
	forget(g.launches, live)
	forget(g.sticky, live)
	forget(g.quarantined, live)
	forget(g.suspect, live)
	forget(g.reports, live)
	forget(g.lastSticky, live)
	forget(g.ceilings, live)
	g.mu.Unlock()
	for id, why := range corrupt {
		for _, c := range containers {
			if c.ID == id {
				g.quarantine(ctx, c, gpus, why, p)
			}
		}
	}

	// Each GPU's offline ceiling is a budget its offline containers split (launch-gate
	// shares from the allocator's ceiling, MPS active-thread percentages from the class's
	// sm_max); a container on several GPUs gets the smallest of its parts, and never more
	// than its own sm-percent.
	ceilings := map[string]api.Ceiling{}
	mpsPart := map[string]float64{}
	paused := map[string]bool{}
	for _, v := range views {
		uuid := v.status.UUID
		health := healthOf(v.status.State)
		in := alloc.Input{Now: now, Online: len(v.online) > 0, Health: health}
		g.mu.Lock()
		st := g.gpus[uuid]
		if st == nil {
			st = &gpuState{}
			g.gpus[uuid] = st
		}
		g.mu.Unlock()
		if in.Online {
			in.OnlineUtil = g.estimateOnline(v, st)
			g.mu.Lock()
			in.Fallback = st.failing
			g.mu.Unlock()
			// The burst detector needs every online container's launch count: one
			// without a measured rate (no block yet, quarantined, first period) leaves
			// the rate unknown rather than low.
			in.RateKnown = dt > 0 && dt < 10
			for _, c := range v.online {
				r, ok := rates[c.ID]
				in.OnlineLaunchRate += r
				in.RateKnown = in.RateKnown && ok
			}
			if in.RateKnown {
				in.Period = time.Duration(dt * float64(time.Second))
			}
		} else {
			// The next online container starts from a clean slate.
			g.mu.Lock()
			st.haveGood, st.lastGood, st.source, st.failing = false, 0, "", false
			g.mu.Unlock()
		}
		g.mu.Lock()
		a := g.allocs[uuid]
		if a == nil {
			a = alloc.New(g.allocCfg)
			g.allocs[uuid] = a
		}
		d := a.Step(in)
		g.decisions[uuid] = d
		prev := g.lastState[uuid]
		g.lastState[uuid] = v.status.State
		g.noteChange(st, v, in, d, now)
		g.mu.Unlock()

		claims := make([]alloc.Claim, len(v.offline))
		for i, c := range v.offline {
			claims[i] = alloc.Claim{Weight: float64(p.Classes.Offline.Priority) + 1, Cap: OwnCeiling(c, p)}
		}
		gate, parts := alloc.SplitBudget(d.Share, claims)
		mps, _ := alloc.SplitBudget(g.allocCfg.OfflineMax, claims)
		for i, c := range v.offline {
			id := c.ID
			old, ok := ceilings[id]
			if !ok || gate[i] < old.Percent {
				old.Percent = gate[i]
			}
			if !ok || parts[i] < old.Part {
				old.Part = parts[i]
			}
			old.Own = claims[i].Cap
			ceilings[id] = old
			if m, ok := mpsPart[id]; !ok || mps[i] < m {
				mpsPart[id] = mps[i]
			}
			if health == alloc.Stop {
				paused[id] = true
			}
		}
		if prev != v.status.State {
			g.onTransition(ctx, v, prev, p)
		}
	}
	for id, c := range ceilings {
		c.MPSThreadPercent = mpsPercent(mpsPart[id])
		switch {
		case paused[id]:
			c.BoundBy = "paused"
		case c.Own < c.Part:
			c.BoundBy = "own sm-percent"
		default:
			c.BoundBy = "GPU budget"
		}
		c.Percent, c.Own, c.Part = pct(c.Percent), pct(c.Own), pct(c.Part)
		g.apply(id, c, paused[id])
		g.mu.Lock()
		g.ceilings[id] = c
		g.mu.Unlock()
	}
	g.stickyErrors(ctx, views, usage, p, now)
	if g.Profiler != nil {
		obs := make([]profiler.GPUObservation, 0, len(views))
		for _, v := range views {
			obs = append(obs, g.observe(v, rates))
		}
		g.Profiler.Observe(now, obs)
	}
}

// observe sums each container's processes' NVML figures on one GPU.
func (g *Guard) observe(v gpuView, rates map[string]float64) profiler.GPUObservation {
	o := profiler.GPUObservation{UUID: v.status.UUID, Type: GPUType(v.status.Name)}
	all := append(append([]api.Container(nil), v.online...), v.offline...)
	inits := map[int]string{}
	byID := map[string]*profiler.Observation{}
	for _, c := range all {
		inits[c.PID] = c.ID
		o.Containers = append(o.Containers, profiler.Observation{ID: c.ID, Online: c.Class == api.Online, Speed: rates[c.ID]})
	}
	for i := range o.Containers {
		byID[o.Containers[i].ID] = &o.Containers[i]
	}
	if s := v.status.Sample; s != nil {
		for _, ps := range s.Processes {
			id, ok := g.Owner(int(ps.PID), inits)
			if !ok {
				continue
			}
			c := byID[id]
			if ps.SMUtilPercent != nil {
				c.GPUUtil += float64(*ps.SMUtilPercent)
			}
			if ps.MemUtilPercent != nil {
				c.MemBWUtil += float64(*ps.MemUtilPercent)
			}
			if ps.UsedMemoryBytes != nil {
				c.MemoryBytes += *ps.UsedMemoryBytes
			}
		}
	}
	return o
}

// GPUType names a GPU model the way clusters label it: "NVIDIA H100 80GB HBM3" -> "H100".
func GPUType(name string) string {
	f := strings.Fields(strings.TrimPrefix(name, "NVIDIA "))
	if len(f) == 0 {
		return "unknown"
	}
	return f[0]
}

// onTransition runs the actions a new health state calls for.
func (g *Guard) onTransition(ctx context.Context, v gpuView, prev monitor.State, p *policy.Policy) {
	uuid := v.status.UUID
	switch v.status.State {
	case monitor.Unhealthy:
		g.evictAsync(ctx, v, "GPU unhealthy: "+v.status.Reason.Text, p, handling{})
	case monitor.Faulted:
		var online []string
		for _, c := range v.online {
			online = append(online, c.ID)
		}
		g.Log.Error("GPU faulted: running error handling", "gpu", uuid, "reason", v.status.Reason.Text, "online_containers", online)
		// Restarting MPS takes every client of the GPU down with it, online ones
		// included. Only a reset-class fault (the GPU needs a reset; every context on
		// it is lost anyway) justifies it; an application fault is handled by
		// removing the offline work.
		reset := v.status.LastFault != nil && v.status.LastFault.Class == monitor.FaultReset
		g.evictAsync(ctx, v, "GPU faulted: "+v.status.Reason.Text, p, handling{restartMPS: reset, clearFault: true})
	default:
		if prev != "" {
			g.Log.Info("GPU state", "gpu", uuid, "from", prev, "to", v.status.State)
		}
	}
}

// handling says what to do after evicting a GPU's offline work.
type handling struct {
	restartMPS bool // restart the MPS control daemon and its servers
	clearFault bool // tell the monitor the error handler ran
}

func (g *Guard) evictAsync(ctx context.Context, v gpuView, reason string, p *policy.Policy, then handling) {
	uuid := v.status.UUID
	g.mu.Lock()
	if g.handling[uuid] {
		// One handling per GPU at a time; a restart asked for meanwhile is done by it.
		g.restartAsked[uuid] = g.restartAsked[uuid] || then.restartMPS
		g.mu.Unlock()
		return
	}
	g.handling[uuid] = true
	g.restartAsked[uuid] = then.restartMPS
	g.mu.Unlock()
	var targets []evict.Target
	for _, c := range v.offline {
		targets = append(targets, evict.Target{ID: c.ID, Namespace: c.Namespace, PID: c.PID, Pod: c.Pod})
	}
	grace := p.Evict.Grace.D()
	go func() {
		if err := g.Evictor.Evict(ctx, uuid, reason, grace, targets); err != nil {
			g.Log.Error("eviction incomplete", "gpu", uuid, "err", err)
		}
		g.mu.Lock()
		restart := g.restartAsked[uuid]
		delete(g.handling, uuid)
		delete(g.restartAsked, uuid)
		g.mu.Unlock()
		if restart && p.Errors.RestartMPS && g.MPS != nil {
			g.MPS.Restart("GPU " + uuid + ": " + reason)
		}
		if then.clearFault {
			if err := g.Monitor.ClearFault(uuid); err != nil {
				g.Log.Error("cannot clear the GPU's fault", "gpu", uuid, "err", err)
			}
		}
	}()
}

// quarantine acts on a container whose usage block is corrupt: its reports are ignored
// from now on, an offline container is evicted (alone: the GPU keeps admitting other
// offline work), an online one is left running, and an event on each of its GPUs says
// why. Nobody else is affected.
func (g *Guard) quarantine(ctx context.Context, c api.Container, gpus []monitor.GPUStatus, why string, p *policy.Policy) {
	g.mu.Lock()
	if _, done := g.quarantined[c.ID]; done {
		g.mu.Unlock()
		return
	}
	g.quarantined[c.ID] = why
	delete(g.launches, c.ID)
	delete(g.sticky, c.ID)
	delete(g.reports, c.ID)
	g.mu.Unlock()
	action := "its reports are ignored from now on (online work is not evicted for this)"
	if c.Class == api.Offline {
		action = "it is evicted and its reports are ignored"
	}
	text := fmt.Sprintf("%s container's usage block is corrupt (%s): %s", c.Class, why, action)
	g.Log.Error("corrupt usage block", "id", c.ID, "class", c.Class, "why", why)
	idx := gpuIndexes(c.GPUs, gpus)
	for _, i := range idx {
		g.event(gpus[i].UUID, c.ID, text)
	}
	if c.Class == api.Offline && g.Evictor != nil {
		gpu := ""
		if len(idx) > 0 {
			gpu = gpus[idx[0]].UUID
		}
		t := evict.Target{ID: c.ID, Namespace: c.Namespace, PID: c.PID, Pod: c.Pod}
		grace := p.Evict.Grace.D()
		go func() {
			if err := g.Evictor.EvictAlone(ctx, gpu, "corrupt usage block: "+why, grace, t); err != nil {
				g.Log.Error("eviction incomplete", "id", c.ID, "err", err)
			}
		}()
	}
}

// Quarantined reports why a container's usage block was found corrupt ("" if it was not).
func (g *Guard) Quarantined(id string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.quarantined[id]
}

func (g *Guard) event(uuid, id, text string) {
	if err := g.Monitor.RecordContainerEvent(uuid, id, text); err != nil {
		g.Log.Warn("cannot record a container event", "gpu", uuid, "id", id, "err", err)
	}
}

// stickyErrors looks for context-destroying errors the containers' libxcuda reported
// since the last step. A report is the container's own word, so it decides only what
// happens to that container:
//   - an offline container's own context died: it is evicted, alone;
//   - an online container's died: under MPS that is the mark of a fault spread through
//     the shared server (a client killed mid-kernel, a kernel fault of a neighbour),
//     which calls for evicting the GPU's offline work and restarting the MPS server once
//     it is gone. That acts on others, so it waits for evidence the online container
//     cannot forge: an NVML fault event (Xid) on that GPU within StickyWindow of the
//     report, or a sticky error reported by another container on that GPU within the
//     window. A report that nothing confirms is recorded as an event and dropped.
func (g *Guard) stickyErrors(ctx context.Context, views []gpuView, usage map[string]ctlblock.Usage, p *policy.Policy, now time.Time) {
	for _, v := range views {
		for _, c := range append(append([]api.Container(nil), v.online...), v.offline...) {
			u, ok := usage[c.ID]
			if !ok {
				continue
			}
			g.mu.Lock()
			prev, seen := g.sticky[c.ID]
			g.sticky[c.ID] = u.StickyErrors
			changed := seen && u.StickyErrors != prev
			if changed {
				g.lastSticky[c.ID] = now
				if c.Class == api.Online {
					if _, pending := g.reports[c.ID]; !pending {
						g.reports[c.ID] = stickyReport{at: now, code: u.LastSticky}
					}
				}
			}
			g.mu.Unlock()
			if !changed {
				continue
			}
			g.Log.Error("a container reports its GPU context died", "id", c.ID, "class", c.Class, "gpu", v.status.UUID,
				"cuda_error", u.LastSticky, "errors", u.StickyErrors-prev, "at", u.LastStickyAt)
			if g.OnSticky != nil {
				g.OnSticky(v.status.UUID, c)
			}
			if c.Class != api.Online {
				reason := fmt.Sprintf("offline container %s reports CUDA error %d (its own context died)", c.ID, u.LastSticky)
				g.event(v.status.UUID, c.ID, reason+": it is evicted, alone")
				t := evict.Target{ID: c.ID, Namespace: c.Namespace, PID: c.PID, Pod: c.Pod}
				grace := p.Evict.Grace.D()
				uuid := v.status.UUID
				go func() {
					if err := g.Evictor.EvictAlone(ctx, uuid, reason, grace, t); err != nil {
						g.Log.Error("eviction incomplete", "id", c.ID, "err", err)
					}
				}()
			}
		}
		g.confirmReports(ctx, v, p, now)
	}
}

// confirmReports acts on the online containers' pending reports on one GPU that
// evidence now confirms, and drops those whose window has passed.
func (g *Guard) confirmReports(ctx context.Context, v gpuView, p *policy.Policy, now time.Time) {
	uuid := v.status.UUID
	for _, c := range v.online {
		g.mu.Lock()
		r, ok := g.reports[c.ID]
		var other string
		if ok {
			for _, o := range append(append([]api.Container(nil), v.online...), v.offline...) {
				if t, seen := g.lastSticky[o.ID]; seen && o.ID != c.ID && absDur(t.Sub(r.at)) <= StickyWindow {
					other = o.ID
					break
				}
			}
		}
		g.mu.Unlock()
		if !ok {
			continue
		}
		var evidence string
		if f := v.status.LastFault; f != nil && f.Class != monitor.FaultInformational && absDur(f.Time.Sub(r.at)) <= StickyWindow {
			evidence = fmt.Sprintf("NVML reported %s on the GPU", faultName(f))
		} else if other != "" {
			evidence = fmt.Sprintf("container %s on the same GPU also reported a dead context", other)
		}
		switch {
		case evidence != "":
			g.mu.Lock()
			delete(g.reports, c.ID)
			g.mu.Unlock()
			reason := fmt.Sprintf("online container %s saw CUDA error %d and %s", c.ID, r.code, evidence)
			g.event(uuid, c.ID, reason+": evicting the GPU's offline work, then restarting MPS")
			g.evictAsync(ctx, v, reason, p, handling{restartMPS: true})
		case now.Sub(r.at) > StickyWindow:
			g.mu.Lock()
			delete(g.reports, c.ID)
			g.mu.Unlock()
			g.event(uuid, c.ID, fmt.Sprintf("online container reported CUDA error %d, but no NVML fault and no other client of the GPU confirmed it within %v: nothing done to other containers", r.code, StickyWindow))
			g.Log.Warn("unconfirmed sticky-error report: nothing done to other containers", "id", c.ID, "gpu", uuid, "cuda_error", r.code)
		}
	}
}

func faultName(f *monitor.Fault) string {
	if f.Xid != 0 {
		return fmt.Sprintf("Xid %d (%s)", f.Xid, f.Description)
	}
	return f.Description
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// apply writes an offline container's ceiling into its control block (its launch-gate
// share, and the MPS active-thread percentage its new processes get), keeping every other
// limit as it is. The share is rounded down, so the parts never sum above the budget.
func (g *Guard) apply(id string, c api.Ceiling, paused bool) {
	b := g.Blocks.Block(id)
	if b == nil {
		return
	}
	l := b.Limits()
	bp := uint32(math.Floor(c.Percent/100*ctlblock.ShareFull + 1e-6))
	if l.ShareBP == bp && l.Paused == paused && l.MPSActiveThreadPercent == c.MPSThreadPercent {
		return
	}
	l.ShareBP, l.Paused, l.MPSActiveThreadPercent = bp, paused, c.MPSThreadPercent
	if err := b.SetLimits(l); err != nil {
		g.Log.Error("cannot set offline share", "id", id, "err", err)
	}
}

// OwnCeiling is an offline container's own ceiling (0..1): its sm-percent, else the
// offline class's sm_max.
func OwnCeiling(c api.Container, p *policy.Policy) float64 {
	if c.Limits.SMPercent > 0 {
		return math.Min(float64(c.Limits.SMPercent)/100, p.Classes.Offline.SMMax.Fraction())
	}
	return p.Classes.Offline.SMMax.Fraction()
}

// mpsPercent turns a part of the GPU (0..1) into an MPS active-thread percentage with the
// one rounding rule of MPS percentages (control.MPSThreadPercent, which InitialLimits and
// the wiring use too).
func mpsPercent(part float64) uint32 { return control.MPSThreadPercent(part * 100) }

// pct turns a share (0..1) into a percentage with two decimals.
func pct(share float64) float64 { return math.Round(share*1e4) / 100 }

// estimateOnline is the online utilisation the allocator is given for one GPU: what
// onlineUtil measured when the online processes were found, else a conservative
// fallback (the larger of the GPU's whole utilisation and the last good measurement),
// with the reason recorded in the GPU's state and logged when it starts and ends.
func (g *Guard) estimateOnline(v gpuView, st *gpuState) float64 {
	u, ok, why := g.onlineUtil(v)
	g.mu.Lock()
	defer g.mu.Unlock()
	if ok {
		st.lastGood, st.haveGood = u, true
		if st.failing {
			g.Log.Info("online processes found again in NVML's per-process samples", "gpu", v.status.UUID, "online_util", u)
		}
		st.source, st.failing = why, false
		return u
	}
	est, src := u, why
	if st.haveGood && st.lastGood > u {
		est = st.lastGood
		src = fmt.Sprintf("%s; using the last good estimate %.0f%% (above %.0f%%)", why, 100*st.lastGood, 100*u)
	}
	if !st.failing {
		g.Log.Warn("cannot attribute GPU utilisation to the online containers: using a conservative estimate",
			"gpu", v.status.UUID, "why", why, "estimate", est)
	}
	st.source, st.failing = src, true
	return est
}

// onlineUtil is the share of time online kernels ran on the GPU, from the per-process
// utilisation of the online containers' processes. ok is false when they cannot be
// found (no per-process samples, or none of them belongs to an online container): the
// value is then a conservative stand-in (the GPU's whole utilisation, which also counts
// offline kernels, or 1 without it) and never 0, so that a failed attribution cannot
// give offline work its maximum. why says which case it was.
func (g *Guard) onlineUtil(v gpuView) (util float64, ok bool, why string) {
	s := v.status.Sample
	if s == nil {
		return 1, false, "no NVML sample yet: assuming the online work uses the whole GPU"
	}
	whole := func() float64 {
		if s.GPUUtilPercent != nil {
			return math.Min(float64(*s.GPUUtilPercent)/100, 1)
		}
		return 1
	}
	wholeText := func() string {
		if s.GPUUtilPercent != nil {
			return fmt.Sprintf("the GPU's utilisation %d%%", *s.GPUUtilPercent)
		}
		return "the whole GPU (no GPU utilisation either)"
	}
	online := map[int]string{}
	var names []string
	for _, c := range v.online {
		online[c.PID] = c.ID
		names = append(names, c.ID)
	}
	offline := map[int]string{}
	for _, c := range v.offline {
		offline[c.PID] = c.ID
	}
	var sum float64
	samples, onlineSamples, offlineSamples, onlineListed := 0, 0, 0, 0
	for _, ps := range s.Processes {
		_, isOnline := g.Owner(int(ps.PID), online)
		if isOnline {
			onlineListed++
		}
		if ps.SMUtilPercent == nil {
			continue
		}
		samples++
		switch {
		case isOnline:
			onlineSamples++
			sum += float64(*ps.SMUtilPercent) / 100
		case len(offline) > 0:
			if _, isOffline := g.Owner(int(ps.PID), offline); isOffline {
				offlineSamples++
			}
		}
	}
	switch {
	case onlineSamples > 0:
		return math.Min(sum, 1), true, fmt.Sprintf("per-process utilisation of %d online process(es)", onlineSamples)
	case onlineListed > 0 && offlineSamples > 0:
		// The online processes hold the GPU but ran no kernel in the window, and the
		// per-process samples demonstrably map to containers (the offline ones'): an
		// idle online service, measured.
		return 0, true, "online processes idle in NVML's window"
	case samples == 0:
		return whole(), false, fmt.Sprintf("attribution failed: NVML gives no per-process utilisation; using %s", wholeText())
	}
	return whole(), false, fmt.Sprintf("attribution failed: %d per-process sample(s), none from online container(s) %s; using %s",
		samples, strings.Join(names, ","), wholeText())
}

// noteChange records why a GPU's offline ceiling changed (g.mu held): the allocator's
// reason and figures, the demand source, and a "/fallback" mark on the key while the
// online utilisation is a conservative stand-in. A new reason, or a change of the
// ceiling by half a percent or more, is a change; each is also kept in the GPU's recent
// changes for the API and the experiment plot.
func (g *Guard) noteChange(st *gpuState, v gpuView, in alloc.Input, d alloc.Decision, now time.Time) {
	key := string(d.Reason)
	why := d.Detail
	switch d.Reason {
	case alloc.ReasonHealth:
		why = fmt.Sprintf("GPU %s (%s): %s", v.status.State, v.status.Reason.Text, d.Detail)
	case alloc.ReasonStatic, alloc.ReasonIdle:
	default:
		why = fmt.Sprintf("%s; online demand %.0f%% + headroom %.0f%%; utilisation from %s", d.Detail, 100*d.Demand, 100*g.allocCfg.Headroom, st.source)
	}
	if st.failing && d.Reason != alloc.ReasonFallback {
		key += "/fallback"
	}
	if st.changed.IsZero() || key != st.reasonKey || math.Abs(d.Share-st.share) >= 0.005 {
		st.reason, st.reasonKey, st.changed = fmt.Sprintf("%.0f%% → %.0f%%: %s", 100*st.share, 100*d.Share, why), key, now
		st.history = append(st.history, api.CeilingChange{At: now, From: pct(st.share), To: pct(d.Share), Demand: pct(d.Demand), Reason: key, Detail: why})
		if len(st.history) > historyLen {
			st.history = st.history[len(st.history)-historyLen:]
		}
	}
	st.share, st.offline = d.Share, len(v.offline)
}

// historyLen is how many ceiling changes the guard keeps per GPU.
const historyLen = 64

func clamp(v, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, v)) }

// Statuses returns the allocator's latest decision per GPU.
func (g *Guard) Statuses() []Status {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []Status
	for uuid, d := range g.decisions {
		s := Status{UUID: uuid, OfflineShare: d.Share, OnlineDemand: d.Demand, Burst: d.Burst}
		if st := g.gpus[uuid]; st != nil {
			s.DemandSource, s.Reason, s.Changed, s.OfflineContainers = st.source, st.reason, st.changed, st.offline
			s.ReasonKey, s.History = st.reasonKey, slices.Clone(st.history)
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Status) int {
		if a.UUID < b.UUID {
			return -1
		}
		return 1
	})
	return out
}

// Ceiling returns an offline container's effective ceiling as last applied.
func (g *Guard) Ceiling(id string) (api.Ceiling, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.ceilings[id]
	return c, ok
}

// Admit decides whether an offline container may start on these GPUs now.
func (g *Guard) Admit(gpus []string) error {
	snap := g.Monitor.Snapshot()
	backoff := g.Policy().Evict.Backoff.D()
	for _, i := range gpuIndexes(gpus, snap) {
		s := snap[i]
		if !s.State.AdmitsOffline() {
			return fmt.Errorf("GPU %d (%s) takes no offline work while %s: %s", s.Index, s.UUID, s.State, s.Reason.Text)
		}
		if g.Evictor != nil && !g.Evictor.Admits(s.UUID, backoff) {
			return fmt.Errorf("GPU %d (%s) evicted offline work less than %v ago", s.Index, s.UUID, backoff)
		}
	}
	return nil
}

func healthOf(s monitor.State) alloc.Health {
	switch s {
	case monitor.Healthy:
		return alloc.Run
	case monitor.Throttled:
		return alloc.Floor
	}
	return alloc.Stop
}

// gpuIndexes resolves a container's GPU list (indexes, UUIDs or "all") to positions in
// the monitor's snapshot; unknown entries are ignored.
func gpuIndexes(list []string, gpus []monitor.GPUStatus) []int {
	var out []int
	add := func(i int) {
		if !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	for _, s := range list {
		if s == "all" {
			for i := range gpus {
				add(i)
			}
			continue
		}
		if n, err := strconv.Atoi(s); err == nil {
			for i, gs := range gpus {
				if gs.Index == n {
					add(i)
				}
			}
			continue
		}
		for i, gs := range gpus {
			if gs.UUID == s {
				add(i)
			}
		}
	}
	return out
}

// forget drops the entries of containers that are no longer live.
func forget[V any](m map[string]V, live map[string]bool) {
	for id := range m {
		if !live[id] {
			delete(m, id)
		}
	}
}
