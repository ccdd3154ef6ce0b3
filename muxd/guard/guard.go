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
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/monitor"
	"github.com/muxflow/muxflow/muxd/alloc"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/evict"
	"github.com/muxflow/muxflow/muxd/workloadprofile"
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
	// AppendTo appends every registered container, sorted by id, to dst (the guard
	// lists into the same buffer every period).
	AppendTo(dst []api.Container) []api.Container
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
	Profiler *workloadprofile.Profiler
	// OnSticky, when set, is told of each container that reported a sticky error.
	OnSticky func(gpu string, c api.Container)

	// stepMu makes steps run one at a time; it guards loop.
	stepMu sync.Mutex
	loop   loopState

	// mu guards what other goroutines read or write. The step is the only writer of
	// decisions, gpus, ceilings and quarantined: it writes them under mu and reads them
	// without it (under stepMu); the API reads them under mu.
	mu        sync.Mutex
	decisions map[string]alloc.Decision
	// gpus keeps, per GPU, the demand estimate's inputs and why the ceiling last changed.
	gpus map[string]*gpuState
	// ceilings is each offline container's effective ceiling as last applied.
	ceilings map[string]api.Ceiling
	// quarantined: containers whose usage block was found corrupt, and why. Their
	// reports are ignored from then on (an offline one is also evicted).
	quarantined map[string]string
	handling    map[string]bool // GPUs with an eviction or fault handling under way
	// restartAsked: a handling under way on the GPU must restart MPS when done.
	restartAsked map[string]bool
}

// loopState is what only the step uses: its memory between periods (allocators, the
// GPUs' last states, the containers' last reports) and the buffers each period reuses.
type loopState struct {
	allocs    map[string]*alloc.GPU
	allocCfg  alloc.Config
	lastStep  time.Time
	lastState map[string]monitor.State
	trust     trust
	sticky    stickyState
	applied   map[string]gate // container id -> the gate apply last saw in its block
	// given is, per offline container, the highest MPS active-thread percentage its
	// block has offered since the guard saw it (0 counted as 100: no limit). MPS fixes
	// a process's percentage when it creates its context, so a container that started
	// while the budget was its alone may still hold that much after neighbours came.
	given map[string]uint32
	// waited is, per offline container, when it last waited for its turn (fitHeld).
	waited map[string]time.Time
	// confine is this period's confinement per offline container: the share of its
	// GPU's SMs (percent) libxcuda is to confine its kernels to (kernelRisks).
	confine map[string]uint32

	// Buffers of one period, kept so that a period allocates little.
	view      stepView
	reads     usageReads
	demands   []demand
	decisions []alloc.Decision
	fits      []mpsFit // per view, this period's MPS budgets
	parts     ceilingParts
	pids      struct{ online, offline map[int]string }
	profile   profileScratch
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
	// width is the widest online kernel seen lately, fit the GPU's offline MPS budget
	// sized from it.
	width alloc.Width
	bus   alloc.Bus
	fit   mpsFit
	// powerCapped is when the GPU last ran at its power cap with online work on it.
	powerCapped time.Time
	// risks are this period's offline containers whose kernels are too long beside the
	// online requests (kernelRisks); risky the ids among them an event was recorded for.
	risks []api.KernelRisk
	risky map[string]bool
	// confined is when each offline container confined for its kernels was last named
	// (kernelRisks): it stays confined ConfineHold after.
	confined map[string]time.Time
	// unprotected: since when each offline container has been named for its SMs, without
	// a break, with no confinement that leaves the online kernels theirs; evicted those
	// evicted for it (evictRisks), until they leave the GPU.
	unprotected map[string]namedSpan
	evicted     map[string]bool
	// span is the online busy periods' mean length (the signal page's), busy its
	// counters at the last read.
	span alloc.BusySpan
	busy busy
}

// mpsFit is one GPU's offline MPS active-thread budget for a period.
type mpsFit struct {
	width  float64 // the online kernels' width it was sized for (0: unknown)
	budget float64 // split among the offline containers, like the launch-gate ceiling
	fits   bool    // budget leaves the online kernels room (alloc.FitBudget)
	// turns: the budget fits the online kernels' width: where the offline jobs'
	// percentages sum above it they take turns (fitHeld), also where no one fits (a
	// burst; the power cap or a busy memory bus, for WidthMemory): the one whose turn it
	// is then runs bounded, on the whole ceiling, and the others still wait (released
	// together, they would crowd the online kernels' room between them).
	turns bool
	// powerCapped: the budget fits, but the GPU ran at its power cap lately, where
	// every offline SM slows the online kernels' clock: offline stays bounded.
	powerCapped bool
	// held: the budget fits, but the offline containers' processes may hold more than
	// it (percent, summed: see loop.given), from before their neighbours came: only
	// those in fitIn fit it, the others stay bounded. fitPct is what
	// each was counted at (both in the order of the GPU's offline containers).
	held   float64
	fitIn  []bool
	fitPct []uint32
	waits  []bool // not its turn: it waits for it
	// busBound: the budget fits, but the online and offline kernels together ask for more
	// memory bandwidth than the GPU has (alloc.Bus): offline stays bounded. busOnline and
	// busOffline are the two classes' bandwidth while they run (shares of the bus).
	busBound              bool
	busOnline, busOffline float64
}

// fitted counts the offline containers that fit.
func (f *mpsFit) fitted() int { return count(f.fitIn) }

// waiting counts the offline containers that wait for their turn.
func (f *mpsFit) waiting() int { return count(f.waits) }

func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

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
	// OnlineWidth is the widest online kernel seen lately (share of the SMs; 0:
	// unknown); MPSBudget the offline contexts' MPS active-thread budget sized from it,
	// and Fits whether that budget leaves the online kernels room (alloc.FitBudget).
	OnlineWidth float64 `json:"online_width,omitempty"`
	MPSBudget   float64 `json:"mps_budget"`
	Fits        bool    `json:"fits,omitempty"`
	// PowerCapped: the budget fits but the GPU ran at its power cap lately, so offline
	// stays bounded for online work (a lower clock slows the online kernels too).
	PowerCapped bool `json:"power_capped,omitempty"`
	// MPSHeld: the budget fits, but the offline processes may hold this much (percent,
	// summed), more than the budget, from before their neighbours came: only MPSFitted
	// of the offline containers fit it (they take turns: alloc.FitHeld); MPSWaiting of
	// the others wait for their turn, the rest (idle, or on several GPUs) stay bounded.
	MPSHeld    float64 `json:"mps_held,omitempty"`
	MPSFitted  int     `json:"mps_fitted,omitempty"`
	MPSWaiting int     `json:"mps_waiting,omitempty"`
	// MemBound: the budget fits, but the online and offline kernels together ask for more
	// memory bandwidth than the GPU has (alloc.Bus), so offline stays bounded.
	// OnlineMemBW and OfflineMemBW are each class's share of the bandwidth while its
	// kernels run (0: not measured).
	MemBound     bool    `json:"mem_bound,omitempty"`
	OnlineMemBW  float64 `json:"online_mem_bw,omitempty"`
	OfflineMemBW float64 `json:"offline_mem_bw,omitempty"`
	// KernelRisks are the offline containers whose kernels are too long beside the
	// online requests for any share to protect them (profile.KernelRisk).
	KernelRisks []api.KernelRisk `json:"kernel_risks,omitempty"`
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
		Buckets:     patternBuckets(p.Alloc.DayLength.D(), p.Alloc.Period.D()),
		Fit:         p.Alloc.Fit,
		FitMin:      p.Alloc.FitMin.Fraction(),
	}
}

// patternBuckets divides the day into alloc.DayBuckets, or fewer on a compressed day, so
// that every bucket holds at least one period's observation: a bucket shorter than a
// period would be skipped and never forecast.
func patternBuckets(day, period time.Duration) int {
	if period <= 0 || day/period >= alloc.DayBuckets {
		return alloc.DayBuckets
	}
	return max(1, int(day/period))
}

// Run steps the loop every alloc.period until ctx is done.
func (g *Guard) Run(ctx context.Context) error {
	for {
		period := g.Policy().Alloc.Period.D()
		select {
		case <-ctx.Done():
			g.EndTurns()
			return nil
		case <-time.After(period):
		}
		g.Step(ctx, time.Now())
	}
}

// EndTurns lets the offline containers that wait for their turn (fitHeld) launch again,
// bounded, when the guard stops: nobody would give them their turn. Those paused by
// their GPU's health stay paused.
func (g *Guard) EndTurns() {
	g.stepMu.Lock()
	defer g.stepMu.Unlock()
	cp := &g.loop.parts
	for id := range cp.waiting {
		b := g.Blocks.Block(id)
		if b == nil || cp.paused[id] {
			continue
		}
		if l := b.Limits(); l.Paused {
			l.Paused = false
			if err := b.SetLimits(l); err != nil {
				g.Log.Error("cannot end an offline container's wait for its turn", "id", id, "err", err)
			}
		}
		delete(g.loop.applied, id)
	}
	clear(cp.waiting)
}

// Step runs one period of the loop, in five steps that each read on their own:
//  1. the sampling view (view.go): each GPU's latest sample and health, and the running
//     containers on it;
//  2. the containers' usage (usage.go): launch rates and sticky-error counts from their
//     usage blocks, validated; a corrupt block quarantines its container;
//  3. allocation (allocate.go): each GPU's offline ceiling, split into its offline
//     containers' parts and written into their control blocks;
//  4. health handling (health.go): what a GPU's change of health state calls for;
//  5. sticky errors (sticky.go): containers' reports of dead GPU contexts, and the
//     evidence that confirms them.
//
// Then the jobs named for kernels no confinement protects the requests from are evicted
// once policy evict.kernel_risk has passed (kernels.go), and the period's measurements go
// to the profiler.
func (g *Guard) Step(ctx context.Context, now time.Time) {
	g.stepMu.Lock()
	defer g.stepMu.Unlock()
	p := g.Policy()
	dt := g.begin(p, now)
	sv := g.sampleView()
	reads := g.readUsage(ctx, sv, dt, p, now)
	decisions := g.allocate(sv, reads, dt, p, now)
	g.applyCeilings(sv, decisions, p)
	g.handleHealth(ctx, sv, p)
	g.stickyErrors(ctx, sv, reads, p, now)
	g.evictRisks(ctx, sv, p, now)
	g.profile(now, sv, reads)
}

// begin starts a period: the state's first use, a policy reload (which restarts the
// allocators with the new settings: shares ramp up from their cut values as usual), and
// the seconds since the previous period.
func (g *Guard) begin(p *policy.Policy, now time.Time) (dt float64) {
	l := &g.loop
	if l.allocs == nil {
		l.allocs, l.lastState = map[string]*alloc.GPU{}, map[string]monitor.State{}
		l.applied, l.given, l.waited = map[string]gate{}, map[string]uint32{}, map[string]time.Time{}
		l.trust = trust{launches: map[string]uint64{}, suspect: map[string]int{}, readAt: map[string]time.Time{}, rate: map[string]float64{}, few: map[string]bool{},
			measured: map[string]measured{}, launchTime: map[string]*alloc.LaunchTime{}, firstRead: map[string]time.Time{}}
		l.sticky = stickyState{last: map[string]uint32{}, reports: map[string]stickyReport{}, lastAt: map[string]time.Time{}}
		g.mu.Lock()
		g.decisions, g.gpus, g.ceilings = map[string]alloc.Decision{}, map[string]*gpuState{}, map[string]api.Ceiling{}
		g.quarantined = map[string]string{}
		if g.handling == nil {
			g.handling, g.restartAsked = map[string]bool{}, map[string]bool{}
		}
		g.mu.Unlock()
	}
	if cfg := AllocConfig(p); cfg != l.allocCfg {
		l.allocCfg, l.allocs = cfg, map[string]*alloc.GPU{}
	}
	dt = now.Sub(l.lastStep).Seconds()
	l.lastStep = now
	return dt
}

// profile gives the profiler this period's per-container measurements, when there is one.
func (g *Guard) profile(now time.Time, sv *stepView, r *usageReads) {
	if g.Profiler == nil {
		return
	}
	ps := &g.loop.profile
	if ps.inits == nil {
		ps.inits, ps.byID = map[int]string{}, map[string]int{}
	}
	if cap(ps.obs) < len(sv.views) {
		ps.obs = append(ps.obs[:cap(ps.obs)], make([]workloadprofile.GPUObservation, len(sv.views)-cap(ps.obs))...)
	}
	ps.obs = ps.obs[:len(sv.views)]
	for i, v := range sv.views {
		g.observe(&ps.obs[i], v, r.rates, ps)
	}
	g.Profiler.Observe(now, ps.obs)
}

// profileScratch is what profile reuses from one period to the next.
type profileScratch struct {
	obs   []workloadprofile.GPUObservation
	inits map[int]string // init pid -> container id, of one GPU's containers
	byID  map[string]int // container id -> its index in one GPUObservation's Containers
}

// observe sums each container's processes' NVML figures on one GPU into o (whose
// Containers slice is reused), with the kernel lengths the guard measured.
func (g *Guard) observe(o *workloadprofile.GPUObservation, v gpuView, rates map[string]float64, ps *profileScratch) {
	o.UUID, o.Type, o.Containers = v.status.UUID, GPUType(v.status.Name), o.Containers[:0]
	clear(ps.inits)
	clear(ps.byID)
	for _, c := range v.all {
		ps.inits[c.PID] = c.ID
		ps.byID[c.ID] = len(o.Containers)
		o.Containers = append(o.Containers, workloadprofile.Observation{ID: c.ID, Online: c.Class == api.Online, Speed: rates[c.ID]})
		g.observeKernels(&o.Containers[len(o.Containers)-1], v.status.UUID)
	}
	s := v.status.Sample
	if s == nil {
		return
	}
	for _, p := range s.Processes {
		id, ok := g.Owner(int(p.PID), ps.inits)
		if !ok {
			continue
		}
		c := &o.Containers[ps.byID[id]]
		if p.SMUtilPercent != nil {
			c.GPUUtil += float64(*p.SMUtilPercent)
		}
		if p.MemUtilPercent != nil {
			c.MemBWUtil += float64(*p.MemUtilPercent)
		}
		if p.UsedMemoryBytes != nil {
			c.MemoryBytes += *p.UsedMemoryBytes
		}
	}
}

// GPUType names a GPU model the way clusters label it: "NVIDIA H100 80GB HBM3" -> "H100".
func GPUType(name string) string {
	f := strings.TrimSpace(strings.TrimPrefix(name, "NVIDIA "))
	if f == "" {
		return "unknown"
	}
	if i := strings.IndexFunc(f, unicode.IsSpace); i >= 0 {
		f = f[:i]
	}
	return f
}

func (g *Guard) event(uuid, id, text string) {
	if err := g.Monitor.RecordContainerEvent(uuid, id, text); err != nil {
		g.Log.Warn("cannot record a container event", "gpu", uuid, "id", id, "err", err)
	}
}

// pct turns a share (0..1) into a percentage with two decimals.
func pct(share float64) float64 { return math.Round(share*1e4) / 100 }

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
			s.OnlineWidth, s.MPSBudget, s.Fits, s.PowerCapped = st.fit.width, st.fit.budget, st.fit.fits, st.fit.powerCapped
			s.MPSHeld, s.MPSFitted, s.MPSWaiting = st.fit.held, st.fit.fitted(), st.fit.waiting()
			s.MemBound, s.OnlineMemBW, s.OfflineMemBW = st.fit.busBound, st.fit.busOnline, st.fit.busOffline
			s.KernelRisks = slices.Clone(st.risks)
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
	for _, i := range appendGPUIndexes(nil, gpus, snap) {
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

// appendGPUIndexes resolves a container's GPU list (indexes, UUIDs or "all") to positions
// in the monitor's snapshot, appended to out; unknown entries are ignored.
func appendGPUIndexes(out []int, list []string, gpus []monitor.GPUStatus) []int {
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
