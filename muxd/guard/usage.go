package guard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/monitor"
	"github.com/muxflow/muxflow/muxd/alloc"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/blocks"
	"github.com/muxflow/muxflow/muxd/evict"
	"github.com/muxflow/muxflow/policy"
)

// The containers' usage: the second step of a period. Each running online container's
// usage block is read once a period, each offline one's once every OfflineUsagePeriod,
// their totals only (not the process slots): the launch rates since the last read (the
// burst detector and the profiler) and the sticky-error counts come from it. A usage
// block is the container's own word: it is read through a validated copy
// (ctlblock.ParseUsage's checks), values no libxcuda can write make the container
// suspect, and a container whose block is corrupt is quarantined — its fault only.

// suspectSteps is how many consecutive reads must show impossible values before a
// container is quarantined (a single read could be torn by a concurrent write); a broken
// header or a truncated file is acted on at once.
const suspectSteps = 2

// OfflineUsagePeriod is how often an offline container's usage block is read. Its launch
// count feeds only the profiler (an average over many seconds), and its sticky errors
// decide its own eviction or corroborate an online container's report within
// StickyWindow, so reading it every period would buy nothing but a system call per
// container per period (at 8 GPUs × 15 offline containers, 1,200 a second; 120 at one a
// second); the online containers' blocks (the burst detector's launch counts) are read
// every period.
const OfflineUsagePeriod = time.Second

// KernelWarmup is how long after its first read an offline container's measured launches
// are also read every period, until their length is known (kernels.go): a job whose
// kernels are too long beside the online requests is then named, and confined, within a
// few periods of its start rather than seconds after, and every request it meets until
// then waits for one of its kernels. Only the measured launches are read so: the launch
// rate, its classification and the sticky errors keep their OfflineUsagePeriod. A
// container that had launched nothing at its last read is not: reading every period a
// block no process writes yet would only cost system calls.
const KernelWarmup = 10 * time.Second

// usageReads is what one period read from the running containers' usage blocks.
type usageReads struct {
	usage map[string]stickyCount // container id -> its validated sticky-error count
	rates map[string]float64     // container id -> launches per second since the last step
	// corrupt are the containers found corrupt in this period, and why.
	corrupt map[string]string
	// widths: GPU UUID -> the widest online launch its online containers' libxcuda
	// sampled (share of its SMs), for sizing the offline MPS budget (alloc.FitBudget).
	widths map[string]float64
	idx    []int // scratch for appendGPUIndexes
}

// stickyCount is what the sticky-error handling needs of one container's usage.
type stickyCount struct {
	errors, last uint32 // ctlblock.Usage's StickyErrors and LastSticky
	lastAt       time.Time
}

// trust is what the guard remembers of each container's reports between periods.
type trust struct {
	launches map[string]uint64 // container id -> launches at the previous step
	// suspect counts consecutive reads in which a container's values were impossible.
	suspect map[string]int
	// readAt is when each container's block was last read, rate the launch rate it gave
	// (an offline container's, reported again until its next read).
	readAt map[string]time.Time
	rate   map[string]float64
	// few is, per offline container, whether its rate was few launches (fewLaunches)
	// at its last read; none yet: not.
	few map[string]bool
	// measured and launchTime: per offline container, its measured launches' counters
	// at its last read, and their lengths (kernels.go).
	measured   map[string]measured
	launchTime map[string]*alloc.LaunchTime
	// firstRead is when each offline container's block was first read (KernelWarmup).
	firstRead map[string]time.Time
}

// warming says whether an offline container's measured launches are still read every
// period (KernelWarmup): read before, within KernelWarmup of its first read, launching
// (its last read counted launches: a container whose processes have not started costs
// no reads), and its kernels' length not yet known.
func (t *trust) warming(id string, now time.Time) bool {
	first, ok := t.firstRead[id]
	if !ok || now.Before(first) || now.Sub(first) > KernelWarmup || t.launches[id] == 0 {
		return false
	}
	if lt := t.launchTime[id]; lt != nil {
		if _, met := lt.Mean(); met > 0 {
			return false
		}
	}
	return true
}

// readUsage reads the running containers' usage for this period (dt seconds after the
// previous one; offline containers' only when OfflineUsagePeriod has passed since their
// last read), forgets the containers that are gone, and quarantines those whose block is
// corrupt.
func (g *Guard) readUsage(ctx context.Context, sv *stepView, dt float64, p *policy.Policy, now time.Time) *usageReads {
	r, t := &g.loop.reads, &g.loop.trust
	if r.usage == nil {
		r.usage, r.rates, r.corrupt, r.widths = map[string]stickyCount{}, map[string]float64{}, map[string]string{}, map[string]float64{}
	}
	clear(r.usage)
	clear(r.rates)
	clear(r.corrupt)
	clear(r.widths)
	for _, c := range sv.running {
		if _, q := g.quarantined[c.ID]; q {
			continue
		}
		since := dt
		if c.Class != api.Online {
			at, ok := t.readAt[c.ID]
			if ok && now.Sub(at) < OfflineUsagePeriod && !now.Before(at) {
				if rate, ok := t.rate[c.ID]; ok {
					r.rates[c.ID] = rate
				}
				if t.warming(c.ID, now) {
					if b := g.Blocks.Block(c.ID); b != nil {
						if u, err := b.SnapshotTotals(); err == nil {
							t.measureLaunches(c.ID, u)
						}
					}
				}
				continue
			}
			since = 0 // first read: no rate yet
			if ok {
				since = now.Sub(at).Seconds()
			}
		}
		b := g.Blocks.Block(c.ID)
		if b == nil {
			continue
		}
		t.readAt[c.ID] = now
		u, err := b.SnapshotTotals()
		if err != nil {
			if ce := (*ctlblock.CorruptError)(nil); errors.As(err, &ce) {
				t.suspect[c.ID]++
				if ce.Header || t.suspect[c.ID] >= suspectSteps {
					r.corrupt[c.ID] = ce.Error()
				}
			}
			continue // else closed while being removed
		}
		n := u.Launches
		if prev, ok := t.launches[c.ID]; ok && since > 0 {
			if n < prev {
				t.suspect[c.ID]++
				if t.suspect[c.ID] >= suspectSteps {
					r.corrupt[c.ID] = fmt.Sprintf("its launch counter went back from %d to %d", prev, n)
				}
				continue
			}
			rate := float64(n-prev) / since
			if rate > MaxLaunchRate {
				t.suspect[c.ID]++
				if t.suspect[c.ID] >= suspectSteps {
					r.corrupt[c.ID] = fmt.Sprintf("its launch counter rose %d in %.3fs (%.3g/s; at most %.3g/s is possible)", n-prev, since, rate, MaxLaunchRate)
				}
				continue
			}
			r.rates[c.ID], t.rate[c.ID] = rate, rate
			if c.Class != api.Online {
				t.few[c.ID] = fewLaunches(rate, t.few[c.ID], blocks.OwnCeiling(c, p))
			}
		}
		delete(t.suspect, c.ID)
		r.usage[c.ID] = stickyCount{errors: u.StickyErrors, last: u.LastSticky, lastAt: u.LastStickyAt}
		if c.Class == api.Online && len(u.OnlineWidth) > 0 {
			// The container sees its GPUs as ordinals 0..n-1, in the order it listed them.
			r.idx = appendGPUIndexes(r.idx[:0], c.GPUs, sv.gpus)
			for d, w := range u.OnlineWidth {
				if d < len(r.idx) {
					uuid := sv.gpus[r.idx[d]].UUID
					r.widths[uuid] = max(r.widths[uuid], w)
				}
			}
		}
		t.launches[c.ID] = n
		if c.Class != api.Online {
			t.measureLaunches(c.ID, u)
			if _, ok := t.firstRead[c.ID]; !ok {
				t.firstRead[c.ID] = now
			}
		}
	}
	if sv.rebuilt {
		g.forget(sv.live)
	}
	for _, c := range sv.running {
		if why, ok := r.corrupt[c.ID]; ok {
			g.quarantine(ctx, c, sv.gpus, why, p)
		}
	}
	return r
}

// forget drops what the guard remembers of containers that are no longer registered, so
// that its per-container state does not grow forever.
func (g *Guard) forget(live map[string]bool) {
	t, s := &g.loop.trust, &g.loop.sticky
	forget(t.launches, live)
	forget(t.suspect, live)
	forget(t.readAt, live)
	forget(t.rate, live)
	forget(t.few, live)
	forget(t.measured, live)
	forget(t.launchTime, live)
	forget(t.firstRead, live)
	forget(s.last, live)
	forget(s.reports, live)
	forget(s.lastAt, live)
	forget(g.loop.applied, live)
	forget(g.loop.given, live)
	forget(g.loop.waited, live)
	g.mu.Lock()
	forget(g.quarantined, live)
	forget(g.ceilings, live)
	g.mu.Unlock()
}

// quarantine acts on a container whose usage block is corrupt: its reports are ignored
// from now on, an offline container is evicted (alone: the GPU keeps admitting other
// offline work), an online one is left running, and an event on each of its GPUs says
// why. Nobody else is affected.
func (g *Guard) quarantine(ctx context.Context, c api.Container, gpus []monitor.GPUStatus, why string, p *policy.Policy) {
	if _, done := g.quarantined[c.ID]; done {
		return
	}
	g.mu.Lock()
	g.quarantined[c.ID] = why
	g.mu.Unlock()
	delete(g.loop.trust.launches, c.ID)
	delete(g.loop.sticky.last, c.ID)
	delete(g.loop.sticky.reports, c.ID)
	action := "its reports are ignored from now on (online work is not evicted for this)"
	if c.Class == api.Offline {
		action = "it is evicted and its reports are ignored"
	}
	text := fmt.Sprintf("%s container's usage block is corrupt (%s): %s", c.Class, why, action)
	g.Log.Error("corrupt usage block", "id", c.ID, "class", c.Class, "why", why)
	idx := appendGPUIndexes(nil, c.GPUs, gpus)
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
