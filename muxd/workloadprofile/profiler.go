// Package workloadprofile turns what muxd observes into the data the cluster matcher learns
// from: each container's solo profile (GPU utilisation, memory-bandwidth activity,
// memory, speed) measured while it had its GPU to itself, and, for every online/offline
// co-location the node hosted long enough, both solo profiles with the normalised
// throughputs measured while they shared (speed shared ÷ speed alone). Speed is the
// container's kernel launch rate as libxcuda reports it, the one throughput signal every
// GPU workload has.
package workloadprofile

import (
	"cmp"
	"sort"
	"sync"
	"time"

	"github.com/muxflow/muxflow/matcher/profile"
)

// Observation is one period's measurement of one container on one GPU.
type Observation struct {
	ID string
	// Online tells the container's class.
	Online bool
	// GPUUtil and MemBWUtil are the container's processes' NVML utilisation, percent.
	GPUUtil, MemBWUtil float64
	// MemoryBytes is the device memory its processes hold.
	MemoryBytes uint64
	// Speed is its kernel launches per second (0 when unknown).
	Speed float64
	// KernelUS, RequestUS and WidthPct are profile.Profile's (0 when unknown): an offline
	// container's kernel in flight at a random moment, an online one's busy periods and
	// widest kernel.
	KernelUS, RequestUS, WidthPct float64
}

// GPUObservation is one period's measurement of a GPU's containers.
type GPUObservation struct {
	UUID, Type string
	Containers []Observation
}

const (
	alpha = 0.1 // EWMA weight of one period
	// minSamples before a profile or a co-location counts: a few seconds of periods.
	minSamples = 30
	// maxRecords bounds the co-location log; maxPending the finished co-locations
	// still waiting for a solo baseline of one side.
	maxRecords = 1000
	maxPending = 100
)

type stats struct {
	n                          int
	util, membw, memory, speed float64
	kernel, request, width     float64 // learned from the observations that know them
}

func (s *stats) add(o Observation) {
	if s.n == 0 {
		s.util, s.membw, s.memory, s.speed = o.GPUUtil, o.MemBWUtil, float64(o.MemoryBytes), o.Speed
	} else {
		s.util += alpha * (o.GPUUtil - s.util)
		s.membw += alpha * (o.MemBWUtil - s.membw)
		s.memory += alpha * (float64(o.MemoryBytes) - s.memory)
		s.speed += alpha * (o.Speed - s.speed)
	}
	s.kernel = known(s.kernel, o.KernelUS)
	s.request = known(s.request, o.RequestUS)
	s.width = known(s.width, o.WidthPct)
	s.n++
}

// known is an EWMA step over the observations that know a value (v > 0).
func known(avg, v float64) float64 {
	switch {
	case v <= 0:
		return avg
	case avg == 0:
		return v
	}
	return avg + alpha*(v-avg)
}

func (s *stats) profile(name string) profile.Profile {
	return profile.Profile{Name: name, GPUUtil: clampPct(s.util), MemBWUtil: clampPct(s.membw), MemoryMiB: s.memory / (1 << 20), Speed: s.speed,
		KernelUS: min(s.kernel, profile.MaxKernel.Seconds()*1e6), RequestUS: min(s.request, profile.MaxKernel.Seconds()*1e6), WidthPct: clampPct(s.width)}
}

type pairKey struct{ gpu, online, offline string }

// pending is a finished co-location whose record waits for both solo baselines (an
// online service is often measured alone only after its offline neighbour has left).
type pending struct {
	key pairKey
	ps  pairStats
	end time.Time
}

type pairStats struct {
	online, offline stats
	gpuType         string
	seen            uint64 // the Observe call that last saw the pair (Profiler.observed)
}

// Profiler accumulates observations; safe for concurrent use.
type Profiler struct {
	mu      sync.Mutex
	solo    map[string]*stats // container -> measured alone
	current map[string]*stats // container -> latest, whatever its company
	pairs   map[pairKey]*pairStats
	pending []pending
	retired map[string]bool // forgotten containers whose solo stats pending records need
	records []profile.Colocation
	// observed counts Observe calls; a pair not seen in the latest has ended (a mark
	// rather than a set of the live pairs, which would be built every period).
	observed uint64
}

// New returns an empty profiler.
func New() *Profiler {
	return &Profiler{solo: map[string]*stats{}, current: map[string]*stats{}, pairs: map[pairKey]*pairStats{}, retired: map[string]bool{}}
}

// Observe records one period. A container alone on its GPU feeds its solo profile; an
// online container sharing with offline ones feeds the pair's co-location statistics.
// Pairs that ended are turned into records.
func (p *Profiler) Observe(now time.Time, gpus []GPUObservation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.observed++
	for _, g := range gpus {
		for _, o := range g.Containers {
			cur := p.current[o.ID]
			if cur == nil {
				cur = &stats{}
				p.current[o.ID] = cur
			}
			cur.add(o)
			if len(g.Containers) == 1 {
				s := p.solo[o.ID]
				if s == nil {
					s = &stats{}
					p.solo[o.ID] = s
				}
				s.add(o)
			}
		}
		for _, on := range g.Containers {
			if !on.Online {
				continue
			}
			for _, off := range g.Containers {
				if off.Online {
					continue
				}
				k := pairKey{g.UUID, on.ID, off.ID}
				ps := p.pairs[k]
				if ps == nil {
					ps = &pairStats{gpuType: g.Type}
					p.pairs[k] = ps
				}
				ps.online.add(on)
				ps.offline.add(off)
				ps.seen = p.observed
			}
		}
	}
	for k, ps := range p.pairs {
		if ps.seen != p.observed {
			p.close(k, ps, now)
			delete(p.pairs, k)
		}
	}
	p.finalize()
}

// close queues a finished co-location that lasted long enough to be measured.
func (p *Profiler) close(k pairKey, ps *pairStats, now time.Time) {
	if ps.online.n < minSamples {
		return
	}
	if len(p.pending) >= maxPending {
		p.pending = p.pending[1:]
	}
	p.pending = append(p.pending, pending{key: k, ps: *ps, end: now})
}

// finalize turns queued co-locations into records once both sides have a solo speed,
// and lets go of forgotten containers' baselines no queued co-location needs.
func (p *Profiler) finalize() {
	kept := p.pending[:0]
	for _, q := range p.pending {
		a, b := p.solo[q.key.online], p.solo[q.key.offline]
		if a == nil || b == nil || a.n < minSamples || b.n < minSamples || a.speed <= 0 || b.speed <= 0 {
			kept = append(kept, q)
			continue
		}
		rec := profile.Colocation{
			A: a.profile(q.key.online), B: b.profile(q.key.offline),
			ANormTput: clampTput(q.ps.online.speed / a.speed), BNormTput: clampTput(q.ps.offline.speed / b.speed),
			GPUType: q.ps.gpuType, Time: q.end.UTC(),
		}
		if rec.Validate() != nil {
			continue
		}
		if len(p.records) >= maxRecords {
			p.records = p.records[1:]
		}
		p.records = append(p.records, rec)
	}
	p.pending = kept
	for id := range p.retired {
		needed := false
		for _, q := range p.pending {
			needed = needed || q.key.online == id || q.key.offline == id
		}
		if !needed {
			delete(p.solo, id)
			delete(p.retired, id)
		}
	}
}

// Profile returns the container's solo profile if it has one, else its latest profile
// in company (solo=false). Kernel lengths are measured in company only (libxcuda times an
// offline container's launches while online work is about), so a solo profile takes
// them from the latest.
func (p *Profiler) Profile(id string) (pr profile.Profile, solo, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.retired[id] {
		return profile.Profile{}, false, false
	}
	if s := p.solo[id]; s != nil && s.n >= minSamples {
		pr = s.profile(id)
		if c := p.current[id]; c != nil {
			cp := c.profile(id)
			pr.KernelUS, pr.RequestUS, pr.WidthPct = cmp.Or(pr.KernelUS, cp.KernelUS), cmp.Or(pr.RequestUS, cp.RequestUS), cmp.Or(pr.WidthPct, cp.WidthPct)
		}
		return pr, true, true
	}
	if s := p.current[id]; s != nil {
		return s.profile(id), false, true
	}
	return profile.Profile{}, false, false
}

// Forget drops a container that is gone; its open co-locations are closed first.
func (p *Profiler) Forget(id string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, ps := range p.pairs {
		if k.online == id || k.offline == id {
			p.close(k, ps, now)
			delete(p.pairs, k)
		}
	}
	delete(p.current, id)
	p.retired[id] = true
	p.finalize()
}

// Records returns the co-location records gathered so far, oldest first.
func (p *Profiler) Records() []profile.Colocation {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := append([]profile.Colocation(nil), p.records...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}

func clampPct(v float64) float64 { return max(0, min(100, v)) }

func clampTput(v float64) float64 { return max(0, min(profile.MaxNormTput, v)) }
