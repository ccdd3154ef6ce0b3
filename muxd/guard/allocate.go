package guard

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/muxd/alloc"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/blocks"
	"github.com/muxflow/muxflow/policy"
)

// Allocation: the third step of a period. Each GPU's allocator turns the online demand
// (measured from NVML's per-process samples, or a conservative stand-in), the online
// launch rate and the GPU's health into the GPU's offline ceiling; that ceiling is a
// budget its offline containers split, and each container's part is written into its
// control block, where libxcuda enforces it at the next launch.

// demand is one GPU's online utilisation as NVML's samples gave it (see onlineUtil).
type demand struct {
	util float64
	ok   bool
	why  string
	bus  alloc.BusUse
}

// allocate steps every GPU's allocator for this period (dt seconds after the previous
// one) and publishes its decisions; the decisions come back in the order of sv.views.
func (g *Guard) allocate(sv *stepView, r *usageReads, dt float64, p *policy.Policy, now time.Time) []alloc.Decision {
	// The measurements first, outside the lock: attribution follows /proc links.
	ds := g.loop.demands[:0]
	for _, v := range sv.views {
		var d demand
		if len(v.online) > 0 {
			d.util, d.ok, d.why = g.onlineUtil(v, &d.bus)
		}
		ds = append(ds, d)
	}
	g.loop.demands = ds
	out := g.loop.decisions[:0]
	fits := g.loop.fits[:0]
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.loop.confine == nil {
		g.loop.confine = map[string]uint32{}
	}
	clear(g.loop.confine)
	confine := uint32(math.Round(float64(p.Alloc.Confine)))
	for i, v := range sv.views {
		uuid := v.status.UUID
		in := alloc.Input{Now: now, Online: len(v.online) > 0, Health: healthOf(v.status.State)}
		st := g.gpus[uuid]
		if st == nil {
			st = &gpuState{}
			g.gpus[uuid] = st
		}
		if in.Online {
			in.OnlineUtil = g.estimateOnline(v, st, ds[i])
			in.Fallback = st.failing
			// The burst detector needs every online container's launch count: one
			// without a measured rate (no block yet, quarantined, first period) leaves
			// the rate unknown rather than low.
			in.RateKnown = dt > 0 && dt < 10
			for _, c := range v.online {
				rate, ok := r.rates[c.ID]
				in.OnlineLaunchRate += rate
				in.RateKnown = in.RateKnown && ok
			}
			if in.RateKnown {
				in.Period = time.Duration(dt * float64(time.Second))
			}
			// The online side counts busy spans only while an offline process
			// follows the GPU.
			spans, known := g.observeSpans(v, st)
			in.OnlineSpans, in.SpansKnown = spans, known && len(v.offline) > 0
		} else {
			// The next online container starts from a clean slate.
			st.haveGood, st.lastGood, st.source, st.failing = false, 0, "", false
			st.width, st.bus = alloc.Width{}, alloc.Bus{}
			st.span, st.busy = alloc.BusySpan{}, busy{}
		}
		a := g.loop.allocs[uuid]
		if a == nil {
			a = alloc.New(g.loop.allocCfg)
			g.loop.allocs[uuid] = a
		}
		d := a.Step(in)
		g.decisions[uuid] = d
		g.noteChange(st, v, d, now)
		out = append(out, d)
		fits = append(fits, g.fitMPS(v, st, d, r.widths[uuid], ds[i].bus, now))
		g.kernelRisks(v, st, &fits[len(fits)-1], confine, p.Evict.KernelRisk.D(), now)
	}
	g.loop.decisions, g.loop.fits = out, fits
	return out
}

// fitMPS sizes one GPU's offline MPS budget for this period from the width of its online
// kernels (width: the widest this period's usage reads saw, 0: none) and says whether
// offline processes created at their part of it need not bound their launches for online
// work: not where the GPU ran at its power cap lately (every offline SM lowers the online
// kernels' clock there), nor where the two classes' kernels together ask for more memory
// bandwidth than the GPU has (alloc.Bus: they would queue for memory, whatever the SM
// split), nor during a burst (every online cycle counts: co-resident blocks and memory
// traffic still slow the online kernels). g.mu held.
func (g *Guard) fitMPS(v gpuView, st *gpuState, d alloc.Decision, width float64, bus alloc.BusUse, now time.Time) mpsFit {
	cfg := g.loop.allocCfg
	f := mpsFit{budget: cfg.OfflineMax}
	if len(v.online) > 0 {
		f.width = st.width.Observe(width, now)
		if cfg.Fit {
			f.budget, f.fits = alloc.FitBudget(f.width, cfg.OfflineMax, cfg.FitMin)
		}
		// Turns follow the SMs alone: at the power cap, on a busy bus and in a burst the
		// containers run bounded, but the one whose turn it is still runs alone, since
		// the others, released together on percentages the budget fits only one at a
		// time, would hold the online kernels' room between them (t4-four-bursty).
		f.turns = f.fits
		if v.status.Sample.PowerCapped() {
			st.powerCapped = now
		}
		if f.fits && !st.powerCapped.IsZero() && now.Sub(st.powerCapped) < alloc.WidthMemory {
			f.fits, f.powerCapped = false, true
		}
		var busBound bool
		busBound, f.busOnline, f.busOffline = st.bus.Observe(bus, now)
		if f.fits && busBound {
			f.fits, f.busBound = false, true
		}
		if d.Burst {
			f.fits = false
		}
		if f.turns {
			g.fitHeld(&f, v.offline, now)
		}
	}
	// not on every turn of the fitted set (fitHeld): that changes every few seconds
	if f.width != st.fit.width || f.budget != st.fit.budget || f.fits != st.fit.fits || f.held != st.fit.held {
		g.Log.Info("offline MPS budget", "gpu", v.status.UUID, "online_width", pct(f.width*100), "budget", pct(f.budget*100), "fits", f.fits, "power_capped", f.powerCapped, "held", f.held, "fitted", f.fitted(), "offline", len(v.offline))
	}
	if f.busBound != st.fit.busBound {
		g.Log.Info("memory bandwidth", "gpu", v.status.UUID, "contended", f.busBound, "online_bw", pct(f.busOnline), "offline_bw", pct(f.busOffline), "max", pct(alloc.BusMax))
	}
	st.fit = f
	return f
}

// fitHeld says which of a GPU's offline containers fit its MPS budget (f.fitIn, by
// alloc.FitHeld) from the percentages their processes may hold: all of them unless, from
// before their neighbours came, those sum above the budget (f.held, percent); then they
// take turns (alloc.TurnAt), in the order muxd lists them, and those whose turn it is
// not wait for theirs (f.waits): each runs alone on the budget in its turn, and their
// blocks together never cover the online kernels' room. A container that launched
// nothing while free to (idle) takes no turn, so that it does not keep a busy
// neighbour waiting; it stays bounded, and takes turns again once it launches. A
// container on several GPUs does not wait (their turns need not coincide): it stays
// bounded. g.mu held.
func (g *Guard) fitHeld(f *mpsFit, offline []api.Container, now time.Time) {
	held := make([]uint32, len(offline))
	var sum uint32
	for j, c := range offline {
		held[j] = g.heldMPS(c.ID)
		sum += held[j]
	}
	f.fitPct = held
	f.waits = make([]bool, len(offline))
	if float64(sum) <= f.budget*100+0.5 {
		f.fitIn = alloc.FitHeld(held, f.budget*100, -1) // they all fit
		return
	}
	f.held = float64(sum)
	turns := make([]uint32, len(offline)) // 0: takes no turn
	for j, c := range offline {
		if !g.idle(c.ID) {
			turns[j] = held[j]
		}
	}
	f.fitIn = alloc.FitHeld(turns, f.budget*100, alloc.TurnAt(turns, now))
	for j, c := range offline {
		if !f.fitIn[j] && turns[j] > 0 && len(c.GPUs) <= 1 && alloc.FitsBeside(0, f.budget, turns[j]) {
			f.waits[j] = true
			g.loop.waited[c.ID] = now
		}
	}
}

// idle says whether an offline container launched nothing in its last usage read
// (OfflineUsagePeriod) while it was not waiting for its turn. g.mu held.
func (g *Guard) idle(id string) bool {
	t := &g.loop.trust
	rate, ok := t.rate[id]
	if !ok || rate > 0 {
		return false
	}
	w, ok := g.loop.waited[id]
	return !ok || t.readAt[id].Sub(w) > OfflineUsagePeriod*3/2
}

// heldMPS is the MPS active-thread percentage an offline container's processes may hold
// (loop.given), reading its block the first time it is seen (its first limits,
// blocks.InitialLimits). g.mu held.
func (g *Guard) heldMPS(id string) uint32 {
	p, ok := g.loop.given[id]
	if !ok {
		b := g.Blocks.Block(id)
		if b == nil {
			return 100 // no limits yet: nothing bounds it (remembered once they exist)
		}
		p = blocks.OfferedMPS(b.Limits().MPSActiveThreadPercent)
		g.loop.given[id] = p
	}
	return p
}

// fittedGate is the launch-gate share of an offline container whose processes hold at
// most fitPct percent of the SMs, apart from the online kernels' room, on a GPU whose
// offline ceiling is share. The dynamic allocator's ceiling is a share of the GPU: such a
// container running a fraction t of the time takes t × fitPct of it, so it may run
// share ÷ fitPct of the time (all of it once that reaches 1; the caller still bounds it
// by the container's own ceiling). The static mode keeps MuxFlow's static baseline, a
// fixed share of GPU time.
func fittedGate(share float64, fitPct uint32, p *policy.Policy) float64 {
	if p.Alloc.Mode != string(alloc.Dynamic) || fitPct == 0 {
		return share
	}
	return math.Min(1, share*100/float64(fitPct))
}

// FewLaunches is the launch rate (launches a second) up to which a fitted offline
// container's own ceiling is counted in SM time, as the GPU's is (fittedGate): its
// blocks hold only its MPS percentage, so an own ceiling of 70% of the SMs lets a job
// that holds 37.5% of them run all of the time. Above it the own ceiling stays a share
// of GPU time.
// Every launch passes the GPU's front end, which sets up one kernel at a time for all
// contexts (a few µs each, gpusim/README.md), and the online launches queue there
// behind the offline ones whatever the SM split: a job of 20 µs kernels let run all
// the time put tiny-kernels-a100's online p99 at 1.22× (its GPU-side p99 1.0 → 1.8 ms;
// docs/results.md, *Since 170a721*).
const FewLaunches = 2000

// FitSMTime is the most of the GPU's SM time that counting a fitted offline container's
// own ceiling in SM time (it launches few kernels) may give it, and never less than its
// own ceiling as a share of GPU time: a job holding 37.5% of the SMs runs all of the
// time, one holding 50% of them runs 80% of the time, one holding 70% runs 70%. Its blocks leave the online
// kernels their room, but the online kernels' blocks are spread over every SM and slow
// where they share one with offline blocks (issue slots, L2): beside a training job
// holding 70% of an H100's SMs all of the time, a steady service on a quarter of them
// ran its kernels 5% slower at the median and its p99 at 1.07–1.15× of alone (49% of
// the SM time: 1.3% slower, 1.02–1.04×); at half of the SM time diurnal-a100 read 1.06×
// against static's 0.98× (docs/results.md, *Since 2a05b1a*). Jobs taking turns follow
// the same rule: the one whose turn it is holds the budget's SMs alone.
const FitSMTime = 0.4

// fewLaunches says whether an offline container launching rate kernels a second
// launches few (at most FewLaunches), given what its previous read said (wasFew) and its
// own ceiling: its rate rises by up to 1 ÷ own once that ceiling no longer bounds it, so
// one found few keeps that up to FewLaunches ÷ own rather than go back and forth. The
// usage read decides it once per read of the container's block.
func fewLaunches(rate float64, wasFew bool, own float64) bool {
	limit := float64(FewLaunches)
	if wasFew && own > 0 {
		limit /= own
	}
	return rate <= limit
}

// ceilingParts is one period's split of the GPUs' budgets, per offline container.
type ceilingParts struct {
	ceilings map[string]api.Ceiling
	mpsPart  map[string]float64 // part of the GPU's MPS budget, for the MPS percentage
	fits     map[string]bool    // it fits every GPU's MPS budget, which leaves the online kernels room
	fitPct   map[string]uint32  // the MPS percentage its processes may hold, as fitted
	paused   map[string]bool
	waiting  map[string]bool // it waits for its turn to fit (alloc.TurnAt)
	// manyLaunches: it fits, but its own ceiling bounds its GPU time (fewLaunches)
	manyLaunches map[string]bool
	// smTimeCapped: it fits and launches few, but FitSMTime bounds its GPU time
	smTimeCapped map[string]bool
	claims       []alloc.Claim
	mpsClaims    []alloc.Claim // claims on the MPS budget (blocks.MPSClaim)
}

// applyCeilings splits each GPU's offline ceiling among its offline containers and
// writes each container's part into its block. The budget is split twice: the launch-gate
// shares from the allocator's ceiling, the MPS active-thread percentages from the GPU's
// MPS budget (the class's sm_max, or less so that the online kernels fit:
// alloc.FitBudget), or, where that budget fits and a container's part does not fit beside
// what its neighbours' processes hold, the whole budget for its turns (alloc.TurnOffer); a
// container on several GPUs gets the smallest of its parts, and never more than its own
// ceiling (blocks.OwnCeiling). Where every GPU of a container has a
// budget that fits, and the container is among those that fit it (fitHeld), its block
// says up to which percentage its processes leave the online kernels room (their
// launches then need not be bounded for them), and its launch-gate share on that GPU is
// the whole ceiling rather than a split of it; the others there keep the part of their
// split that the fitted ones leave of the MPS budget (alloc.BoundedBeside). A GPU whose
// health stops offline work pauses its offline containers.
func (g *Guard) applyCeilings(sv *stepView, decisions []alloc.Decision, p *policy.Policy) {
	cp := &g.loop.parts
	if cp.ceilings == nil {
		cp.ceilings, cp.mpsPart, cp.fits, cp.fitPct, cp.paused, cp.waiting = map[string]api.Ceiling{}, map[string]float64{}, map[string]bool{}, map[string]uint32{}, map[string]bool{}, map[string]bool{}
		cp.manyLaunches, cp.smTimeCapped = map[string]bool{}, map[string]bool{}
	}
	clear(cp.ceilings)
	clear(cp.mpsPart)
	clear(cp.fits)
	clear(cp.fitPct)
	clear(cp.paused)
	clear(cp.waiting)
	clear(cp.manyLaunches)
	clear(cp.smTimeCapped)
	for i, v := range sv.views {
		claims := cp.claims[:0]
		for _, c := range v.offline {
			claims = append(claims, blocks.OfflineClaim(c, p))
		}
		cp.claims = claims
		fit := g.loop.fits[i]
		gate, parts := alloc.SplitBudget(decisions[i].Share, claims)
		turnShares(gate, parts, decisions[i].Share, claims, fit)
		mpsClaims := cp.mpsClaims[:0]
		for _, c := range v.offline {
			mpsClaims = append(mpsClaims, blocks.MPSClaim(c, p, fit.budget))
		}
		cp.mpsClaims = mpsClaims
		mps, _ := alloc.SplitBudget(fit.budget, mpsClaims)
		if fit.turns {
			var held uint32
			for _, h := range fit.fitPct {
				held += h
			}
			for j := range mps {
				mps[j] = alloc.TurnOffer(mps[j], fit.budget, claims[j].Cap, held-fit.fitPct[j])
			}
		}
		stop := healthOf(v.status.State) == alloc.Stop
		var fittedPct float64
		for j := range v.offline {
			if fit.fits && fit.fitIn[j] {
				fittedPct += float64(fit.fitPct[j])
			}
		}
		beside := alloc.BoundedBeside(fit.budget*100, fittedPct)
		for j, c := range v.offline {
			id := c.ID
			fitted := fit.fits && fit.fitIn[j]
			if fitted {
				// Its kernels hold only its part of the SMs, apart from the online
				// kernels' room and from the other fitted containers' parts: it may
				// run as often as the GPU's ceiling lets offline work run at all,
				// counted in SM time under the dynamic allocator (fittedGate), and so
				// is its own ceiling while it launches few kernels (fewLaunches), up
				// to FitSMTime.
				own, few := claims[j].Cap, g.loop.trust.few[id]
				gate[j] = fittedGate(math.Min(decisions[i].Share, own), fit.fitPct[j], p)
				switch capped := FitSMTime * 100 / float64(fit.fitPct[j]); {
				case gate[j] <= own:
				case !few:
					gate[j] = own
					cp.manyLaunches[id] = true
				case capped < gate[j]:
					gate[j] = math.Max(own, capped)
					cp.smTimeCapped[id] = true
				}
				parts[j] = decisions[i].Share
			} else {
				// Its blocks may take any SM: it splits the ceiling with the others,
				// and beside fitted ones keeps the part of it their SMs leave.
				gate[j] *= beside
				parts[j] *= beside
				if fit.turns && fit.waits[j] {
					cp.waiting[id] = true
				}
			}
			old, ok := cp.ceilings[id]
			if !ok || gate[j] < old.Percent {
				old.Percent = gate[j]
			}
			if !ok || parts[j] < old.Part {
				old.Part = parts[j]
			}
			old.Own = claims[j].Cap
			cp.ceilings[id] = old
			if m, ok := cp.mpsPart[id]; !ok || mps[j] < m {
				cp.mpsPart[id] = mps[j]
			}
			if f, ok := cp.fits[id]; !ok || f {
				cp.fits[id] = fitted
			}
			if fitted {
				cp.fitPct[id] = max(cp.fitPct[id], fit.fitPct[j])
			}
			if stop {
				cp.paused[id] = true
			}
		}
	}
	for id, c := range cp.ceilings {
		c.MPSThreadPercent = mpsPercent(cp.mpsPart[id])
		c.ConfinePercent = g.loop.confine[id]
		if cp.fits[id] && !cp.paused[id] {
			// what its processes were counted at: those started at a larger part, before
			// their neighbours came, fit where that was counted; a part that grew this
			// period is counted from the next
			c.FitPercent = cp.fitPct[id]
		}
		switch {
		case cp.paused[id]:
			c.BoundBy = "paused"
		case cp.waiting[id]:
			c.BoundBy = "waiting for its turn"
		case cp.manyLaunches[id]:
			c.BoundBy = "own sm-percent, many launches"
		case cp.smTimeCapped[id]:
			c.BoundBy = "SM-time cap"
		case c.Own < c.Part:
			c.BoundBy = "own sm-percent"
		default:
			c.BoundBy = "GPU budget"
		}
		c.Percent, c.Own, c.Part = pct(c.Percent), pct(c.Own), pct(c.Part)
		g.apply(id, c, cp.paused[id] || cp.waiting[id])
		cp.ceilings[id] = c
	}
	g.mu.Lock()
	for id, c := range cp.ceilings {
		g.ceilings[id] = c
	}
	g.mu.Unlock()
}

// turnShares gives the containers whose turn it is, where others wait for theirs, the
// GPU's ceiling split among themselves rather than among all (bounded ones in a burst,
// at the power cap or on a busy bus; a fitted one gets the whole ceiling anyway), so
// that the turns leave offline work the GPU's budget, not a part of it. Those waiting
// keep their split of it, which they launch at, bounded, should muxd stop (EndTurns).
func turnShares(gate, parts []float64, share float64, claims []alloc.Claim, fit mpsFit) {
	if !fit.turns || !slices.Contains(fit.waits, true) {
		return
	}
	inTurn := slices.Clone(claims)
	for j, w := range fit.waits {
		if w {
			inTurn[j].Weight = 0
		}
	}
	g, p := alloc.SplitBudget(share, inTurn)
	for j, w := range fit.waits {
		if !w {
			gate[j], parts[j] = g[j], p[j]
		}
	}
}

// apply writes an offline container's ceiling into its control block (its launch-gate
// share, and the MPS active-thread percentage its new processes get), keeping every other
// limit as it is. The share is rounded down, so the parts never sum above the budget.
func (g *Guard) apply(id string, c api.Ceiling, paused bool) {
	b := g.Blocks.Block(id)
	if b == nil {
		return
	}
	want := gate{block: b, shareBP: uint32(math.Floor(c.Percent/100*ctlblock.ShareFull + 1e-6)), paused: paused, mps: c.MPSThreadPercent, fit: c.FitPercent, confine: c.ConfinePercent}
	if g.loop.applied[id] == want {
		return // this block holds it since the guard wrote it (only the guard changes these)
	}
	l := b.Limits()
	if l.ShareBP != want.shareBP || l.Paused != paused || l.MPSActiveThreadPercent != want.mps || l.Signal.FitPercent != want.fit || l.ConfinePercent != want.confine {
		l.ShareBP, l.Paused, l.MPSActiveThreadPercent, l.Signal.FitPercent, l.ConfinePercent = want.shareBP, paused, want.mps, want.fit, want.confine
		if err := b.SetLimits(l); err != nil {
			g.Log.Error("cannot set offline share", "id", id, "err", err)
			delete(g.loop.applied, id)
			return
		}
	}
	g.loop.applied[id] = want
	if p := blocks.OfferedMPS(want.mps); p > g.loop.given[id] {
		g.loop.given[id] = p
	}
}

// gate is what apply last wrote into (or found in) one container's block: a new block
// for the same container is read again.
type gate struct {
	block   *ctlblock.Block
	shareBP uint32
	paused  bool
	mps     uint32
	fit     uint32
	confine uint32
}

// mpsPercent turns a part of the GPU (0..1) into an MPS active-thread percentage with the
// one rounding rule of MPS percentages (blocks.MPSThreadPercent, which InitialLimits and
// the wiring use too).
func mpsPercent(part float64) uint32 { return blocks.MPSThreadPercent(part * 100) }

// estimateOnline is the online utilisation the allocator is given for one GPU: what
// onlineUtil measured when the online processes were found, else a conservative
// fallback (the larger of the GPU's whole utilisation and the last good measurement),
// with the reason recorded in the GPU's state and logged when it starts and ends (g.mu
// held).
func (g *Guard) estimateOnline(v gpuView, st *gpuState, m demand) float64 {
	u, why := m.util, m.why
	if m.ok {
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
// give offline work its maximum. why says which case it was. The same samples' memory
// utilisation, by class, goes into bus (alloc.Bus reads the GPU's bandwidth from it).
func (g *Guard) onlineUtil(v gpuView, bus *alloc.BusUse) (util float64, ok bool, why string) {
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
	pids := &g.loop.pids
	if pids.online == nil {
		pids.online, pids.offline = map[int]string{}, map[int]string{}
	}
	online, offline := pids.online, pids.offline
	clear(online)
	clear(offline)
	for _, c := range v.online {
		online[c.PID] = c.ID
	}
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
		sm, mem := float64(*ps.SMUtilPercent)/100, -1.0
		if ps.MemUtilPercent != nil {
			mem = float64(*ps.MemUtilPercent) / 100
		}
		switch {
		case isOnline:
			onlineSamples++
			sum += sm
			if mem >= 0 {
				bus.OnlineUtil += sm
				bus.OnlineMem += mem
				bus.Known = true
			}
		case len(offline) > 0:
			if _, isOffline := g.Owner(int(ps.PID), offline); isOffline {
				offlineSamples++
				if mem >= 0 {
					bus.OfflineUtil = math.Max(bus.OfflineUtil, sm)
					bus.OfflineMem += mem
					bus.Known = true
				}
			}
		}
	}
	if s.GPUUtilPercent != nil {
		// The offline jobs ran at least whenever the GPU ran and no online kernel did.
		bus.OfflineUtil = math.Max(bus.OfflineUtil, float64(*s.GPUUtilPercent)/100-bus.OnlineUtil)
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
	names := make([]string, 0, len(v.online))
	for _, c := range v.online {
		names = append(names, c.ID)
	}
	return whole(), false, fmt.Sprintf("attribution failed: %d per-process sample(s), none from online container(s) %s; using %s",
		samples, strings.Join(names, ","), wholeText())
}

// noteChange records why a GPU's offline ceiling changed (g.mu held): the allocator's
// reason and figures, the demand source, and a "/fallback" mark on the key while the
// online utilisation is a conservative stand-in. A new reason, or a change of the
// ceiling by half a percent or more, is a change; each is also kept in the GPU's recent
// changes for the API and the experiment plot.
func (g *Guard) noteChange(st *gpuState, v gpuView, d alloc.Decision, now time.Time) {
	key := string(d.Reason)
	if st.failing && d.Reason != alloc.ReasonFallback {
		key += "/fallback"
	}
	if st.changed.IsZero() || key != st.reasonKey || math.Abs(d.Share-st.share) >= 0.005 {
		// The text is built only for a change: most periods change nothing.
		why := d.Detail
		switch d.Reason {
		case alloc.ReasonHealth:
			why = fmt.Sprintf("GPU %s (%s): %s", v.status.State, v.status.Reason.Text, d.Detail)
		case alloc.ReasonStatic, alloc.ReasonIdle:
		default:
			why = fmt.Sprintf("%s; online demand %.0f%% + headroom %.0f%%; utilisation from %s", d.Detail, 100*d.Demand, 100*g.loop.allocCfg.Headroom, st.source)
		}
		// A new reason at the same ceiling reads as one, not as "70% → 70%".
		change := fmt.Sprintf("%.0f%% → %.0f%%", 100*st.share, 100*d.Share)
		if math.Round(100*st.share) == math.Round(100*d.Share) && !st.changed.IsZero() {
			change = fmt.Sprintf("stays %.0f%%", 100*d.Share)
		}
		st.reason, st.reasonKey, st.changed = change+": "+why, key, now
		st.history = append(st.history, api.CeilingChange{At: now, From: pct(st.share), To: pct(d.Share), Demand: pct(d.Demand), Reason: key, Detail: why})
		if len(st.history) > historyLen {
			st.history = st.history[len(st.history)-historyLen:]
		}
	}
	st.share, st.offline = d.Share, len(v.offline)
}

// historyLen is how many ceiling changes the guard keeps per GPU.
const historyLen = 64
