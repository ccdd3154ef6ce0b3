package guard

import (
	"cmp"
	"context"
	"math"
	"testing"
	"time"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/monitor"
	"github.com/muxflow/muxflow/muxd/alloc"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/policy"
)

// widthBP packs a width as libxcuda publishes it (epoch 7).
func widthBP(bp uint32) uint32 { return 7<<16 | bp }

// startedAt gives an offline container's block the MPS percentage its processes were
// created with (the fixture's blocks start unlimited; blocks.InitialLimits gives a
// container registered after the online width was seen its part of the fitted budget).
func (f *fixture) startedAt(t *testing.T, id string, pct uint32) {
	t.Helper()
	l := f.blk[id].Limits()
	l.MPSActiveThreadPercent = pct
	if err := f.blk[id].SetLimits(l); err != nil {
		t.Fatal(err)
	}
}

// Issue 14: the offline contexts' MPS budget is sized from the online kernels' width so
// that they fit beside the offline ones; the blocks of offline containers say up to which
// percentage their processes fit, and muxctl's status shows the budget and the width.
func TestMPSBudgetFitsOnlineKernels(t *testing.T) {
	for _, tc := range []struct {
		name    string
		widths  []uint32 // the online container's published widths, per device ordinal
		offline int
		mps     uint32 // each offline container's MPS percentage
		fit     uint32 // and the percentage its block says fits (0: none)
		fits    bool
		started uint32 // the MPS percentage the offline processes started with (0: mps)
		held    float64
		budget  float64 // the GPU's MPS budget where fits (0: mps × offline)
	}{
		{name: "no width published: sm_max, nothing fits", offline: 1, mps: 70},
		{name: "half-GPU kernels: 50%", widths: []uint32{widthBP(5000)}, offline: 1, mps: 50, fit: 50, fits: true},
		{name: "half-GPU kernels, two offline: 25% each", widths: []uint32{widthBP(5000)}, offline: 2, mps: 25, fit: 25, fits: true},
		{name: "two offline that started at sm_max before the width was seen: sized, but bounded; new processes take turns on all of it", widths: []uint32{widthBP(5000)},
			offline: 2, mps: 50, fits: true, started: 70, held: 140, budget: 0.5},
		{name: "an offline container without an MPS limit may hold the whole GPU", widths: []uint32{widthBP(2000)},
			offline: 1, mps: 70, fits: true, started: 100, held: 100},
		{name: "narrow kernels: sm_max still binds", widths: []uint32{widthBP(2000)}, offline: 1, mps: 70, fit: 70, fits: true},
		{name: "kernels 75% wide: fitted on the 25% they leave", widths: []uint32{widthBP(7500)}, offline: 1, mps: 25, fit: 25, fits: true},
		{name: "kernels 87.5% wide: fitted on the eighth they leave", widths: []uint32{widthBP(8750)}, offline: 1, mps: 12, fit: 12, fits: true},
		{name: "kernels too wide to fit above fit_min: the whole GPU, nothing fits", widths: []uint32{widthBP(9500)}, offline: 1, mps: 100},
		{name: "GPU-filling kernels: the whole GPU", widths: []uint32{widthBP(10000)}, offline: 1, mps: 100},
		{name: "GPU-filling kernels, two offline: half the GPU each", widths: []uint32{widthBP(10000)}, offline: 2, mps: 50},
		{name: "a width above 100% is clamped (and noted)", widths: []uint32{widthBP(60000)}, offline: 1, mps: 70},
		{name: "another GPU's width does not count", widths: []uint32{0, widthBP(9000)}, offline: 1, mps: 70},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := []api.Container{running("svc", api.Online, 100, "0")}
			for i := range tc.offline {
				cs = append(cs, running(string(rune('a'+i))+"-train", api.Offline, 200+i, "0"))
			}
			if len(tc.widths) > 1 {
				cs[0].GPUs = []string{"0", "1"}
			}
			f := setup(t, cs...)
			for _, c := range cs[1:] {
				f.startedAt(t, c.ID, cmp.Or(tc.started, tc.mps))
			}
			f.mon.set(0, monitor.Healthy, 20)
			f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) { copy(r.OnlineWidth[:], tc.widths) })
			f.g.Step(context.Background(), time.Now())
			for _, c := range cs[1:] {
				l := f.blk[c.ID].Limits()
				if l.MPSActiveThreadPercent != tc.mps || l.Signal.FitPercent != tc.fit {
					t.Errorf("%s: MPS %d%%, fit %d%%; want %d%% and %d%%", c.ID, l.MPSActiveThreadPercent, l.Signal.FitPercent, tc.mps, tc.fit)
				}
				if ce, _ := f.g.Ceiling(c.ID); ce.FitPercent != tc.fit {
					t.Errorf("%s: API ceiling says fit %d%%, want %d%%", c.ID, ce.FitPercent, tc.fit)
				}
			}
			st := f.status(t, "GPU-a")
			budget := cmp.Or(tc.budget, float64(tc.mps*uint32(tc.offline))/100)
			if st.Fits != tc.fits || (tc.fits && math.Abs(st.MPSBudget-budget) > 0.011) {
				t.Errorf("GPU status: budget %v fits %v (width %v), want fits %v", st.MPSBudget, st.Fits, st.OnlineWidth, tc.fits)
			}
			if st.MPSHeld != tc.held {
				t.Errorf("GPU status: offline processes hold %v%%, want %v%%", st.MPSHeld, tc.held)
			}
			if want := map[bool]int{true: tc.offline}[tc.fit > 0]; st.MPSFitted != want {
				t.Errorf("GPU status: %d offline containers fit, want %d", st.MPSFitted, want)
			}
		})
	}
}

// The width is remembered: a narrower reading (a new libxcuda epoch that has not met the
// wide kernel yet) does not widen the offline budget until alloc.WidthMemory has passed,
// and an online container that stops leaves the next one a clean slate.
func TestOnlineWidthIsRemembered(t *testing.T) {
	f := setup(t, running("svc", api.Online, 100, "0"), running("train", api.Offline, 200, "0"))
	now := time.Now()
	step := func(bp uint32, at time.Time) uint32 {
		f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) { r.OnlineWidth[0] = widthBP(bp) })
		f.g.Step(context.Background(), at)
		return f.blk["train"].Limits().MPSActiveThreadPercent
	}
	if got := step(6000, now); got != 40 {
		t.Fatalf("60%%-wide kernels: offline MPS %d%%, want 40%%", got)
	}
	if got := step(2000, now.Add(10*time.Second)); got != 40 {
		t.Errorf("a narrower reading 10s later: offline MPS %d%%, want 40%% still", got)
	}
	if got := step(2000, now.Add(31*time.Second)); got != 70 {
		t.Errorf("narrower for longer than the width memory: offline MPS %d%%, want 70%%", got)
	}
}

// A GPU that ran at its power cap with online work on it keeps its fitted budget (new
// offline processes still leave the online kernels their SMs) but no longer tells the
// offline blocks they fit: every offline SM lowers the clock the online kernels run at,
// so offline keeps its launches bounded, until the cap has not been seen for the width memory.
func TestPowerCapKeepsOfflineHolding(t *testing.T) {
	f := setup(t, running("svc", api.Online, 100, "0"), running("train", api.Offline, 200, "0"))
	f.startedAt(t, "train", 50)
	f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) { r.OnlineWidth[0] = widthBP(5000) })
	now := time.Now()
	capped := uint64(0x4) // NVML's software power cap
	f.mon.set(0, monitor.Healthy, 20)
	f.mon.gpus[0].Sample.ClockEventReasons = &capped
	f.g.Step(context.Background(), now)
	l := f.blk["train"].Limits()
	st := f.status(t, "GPU-a")
	if l.MPSActiveThreadPercent != 50 || l.Signal.FitPercent != 0 || st.Fits || !st.PowerCapped {
		t.Errorf("power-capped: MPS %d%%, fit %d%%, status fits %v capped %v; want 50%%, 0, false, true",
			l.MPSActiveThreadPercent, l.Signal.FitPercent, st.Fits, st.PowerCapped)
	}
	f.mon.set(0, monitor.Healthy, 20)
	f.g.Step(context.Background(), now.Add(10*time.Second))
	if l := f.blk["train"].Limits(); l.Signal.FitPercent != 0 {
		t.Errorf("10s after the power cap: fit %d%%, want still 0", l.Signal.FitPercent)
	}
	f.g.Step(context.Background(), now.Add(31*time.Second))
	if l := f.blk["train"].Limits(); l.Signal.FitPercent != 50 {
		t.Errorf("31s after the power cap: fit %d%%, want 50%%", l.Signal.FitPercent)
	}
}

// MPS fixes a process's active-thread percentage when it creates its context: an offline
// container that started alone beside the online service (the whole fitted budget) keeps
// that much when a second one joins, so the two together no longer leave the online
// kernels room. They take turns as the one that fits; the other keeps its launches
// bounded for the turn. New processes of a container whose part does not fit beside what
// the other's processes may hold are offered the whole budget for their turns
// (alloc.TurnOffer), so after one period both are offered all of it and the turns are
// equal; once one has gone, the other fits alone.
func TestPercentagesGivenBeforeAreHeld(t *testing.T) {
	svc, first, second := running("svc", api.Online, 100, "0"), running("first", api.Offline, 200, "0"), running("second", api.Offline, 201, "0")
	f := setup(t, svc, first, second)
	f.g.Containers = list{svc, first}
	f.startedAt(t, "first", 50)
	f.mon.set(0, monitor.Healthy, 45)
	f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) { r.OnlineWidth[0] = widthBP(5000) })
	// the start of the first container's turn (alloc.FitTurn; "first" is listed first)
	now := time.Now().Truncate(2 * alloc.FitTurn)
	step := func(at time.Time) { // both jobs launch kernels, as training does
		f.launch(t, "first", "second")
		f.g.Step(context.Background(), at)
	}
	step(now)
	if l := f.blk["first"].Limits(); l.MPSActiveThreadPercent != 50 || l.Signal.FitPercent != 50 {
		t.Fatalf("alone: MPS %d%%, fit %d%%; want 50%% and 50%%", l.MPSActiveThreadPercent, l.Signal.FitPercent)
	}
	f.g.Containers = list{svc, first, second}
	f.startedAt(t, "second", 25) // its processes started at its split of the budget
	step(now.Add(100 * time.Millisecond))
	// the first's part (25%) fits beside the second's 25%; the second's does not fit
	// beside the first's 50%
	for id, want := range map[string][2]uint32{"first": {25, 50}, "second": {50, 0}} {
		if l := f.blk[id].Limits(); l.MPSActiveThreadPercent != want[0] || l.Signal.FitPercent != want[1] {
			t.Errorf("a neighbour joins: %s MPS %d%%, fit %d%%; want %d%% and %d%%", id, l.MPSActiveThreadPercent, l.Signal.FitPercent, want[0], want[1])
		}
	}
	for i := range 2 { // the second may now hold 50% too; the set that fits stays for the turn
		step(now.Add(time.Duration(i+2) * 100 * time.Millisecond))
		for id, want := range map[string]uint32{"first": 50, "second": 0} {
			if l := f.blk[id].Limits(); l.MPSActiveThreadPercent != 50 || l.Signal.FitPercent != want || l.Paused != (want == 0) {
				t.Errorf("period %d: %s beside a neighbour, together 100%%: MPS %d%%, fit %d%%, paused %v; want 50%%, %d%% and %v", i+2, id, l.MPSActiveThreadPercent, l.Signal.FitPercent, l.Paused, want, want == 0)
			}
		}
	}
	if c, _ := f.g.Ceiling("second"); c.BoundBy != "waiting for its turn" {
		t.Errorf("the second's ceiling: %+v, want bound by its turn", c)
	}
	// muxd stopping: nobody would give it its turn, so it launches again, bounded
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.g.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if l := f.blk["second"].Limits(); l.Paused || l.ShareBP == 0 {
		t.Errorf("the guard stopped: the waiting one is still paused (%v) or unbounded (share %d bp)", l.Paused, l.ShareBP)
	}
	st := f.status(t, "GPU-a")
	if !st.Fits || st.MPSHeld != 100 || st.MPSFitted != 1 {
		t.Errorf("GPU status: fits %v, held %v%%, %d fitted; want true, 100%%, 1", st.Fits, st.MPSHeld, st.MPSFitted)
	}
	// the one that fits keeps to its SMs and may run for the whole ceiling, counted in
	// SM time (its processes hold half the SMs), up to its own ceiling; the other may
	// take any SM: its half of the ceiling, of which it keeps the floor, as the first
	// holds the whole budget
	own := policy.Default().Classes.Offline.SMMax.Fraction()
	for id, want := range map[string]float64{"first": math.Min(own, st.OfflineShare/0.5), "second": st.OfflineShare / 2 * alloc.BoundedFloor} {
		l := f.blk[id].Limits()
		if got := float64(l.ShareBP) / ctlblock.ShareFull; math.Abs(got-want) > 1e-3 {
			t.Errorf("%s: launch-gate share %.4f of a %.4f ceiling, want %.4f", id, got, st.OfflineShare, want)
		}
	}
	// the second's turn, the second half of the cycle (each may hold 50%): it fits and
	// the first waits
	step(now.Add(2 * alloc.FitTurn * 5 / 6))
	for id, want := range map[string]uint32{"first": 0, "second": 50} {
		if l := f.blk[id].Limits(); l.Signal.FitPercent != want || l.Paused != (want == 0) {
			t.Errorf("the second's turn: %s fit %d%%, paused %v; want %d%% and %v", id, l.Signal.FitPercent, l.Paused, want, want == 0)
		}
	}

	step(now.Add(2 * alloc.FitTurn))
	if l := f.blk["first"].Limits(); l.Signal.FitPercent != 50 {
		t.Errorf("the first's turn again: fit %d%%, want 50%%", l.Signal.FitPercent)
	}
	now = now.Add(2 * alloc.FitTurn)
	f.g.Containers = list{svc, second}
	step(now.Add(500 * time.Millisecond))
	if l := f.blk["second"].Limits(); l.MPSActiveThreadPercent != 50 || l.Signal.FitPercent != 50 || l.Paused {
		t.Errorf("the first gone: MPS %d%%, fit %d%%, paused %v; want 50%%, 50%% and no", l.MPSActiveThreadPercent, l.Signal.FitPercent, l.Paused)
	}
	if st := f.status(t, "GPU-a"); st.MPSHeld != 0 || st.MPSFitted != 1 {
		t.Errorf("GPU status alone: held %v%%, %d fitted; want 0 and 1", st.MPSHeld, st.MPSFitted)
	}
}

// holdingHalfEach is a GPU whose online kernels need half its SMs beside two offline
// jobs whose processes started at 50% each: together above the budget, so they take turns.
func holdingHalfEach(t *testing.T, a, b string) *fixture {
	f := setup(t, running("svc", api.Online, 100, "0"), running(a, api.Offline, 200, "0"), running(b, api.Offline, 201, "0"))
	f.startedAt(t, a, 50)
	f.startedAt(t, b, 50)
	f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) { r.OnlineWidth[0] = widthBP(5000) })
	f.mon.set(0, monitor.Healthy, 20)
	return f
}

// Where offline jobs take turns, a burst bounds the one whose turn it is and the others
// still wait for theirs: released together at the burst's start, each on a percentage
// the budget fits only alone, their blocks would crowd the online kernels. The one whose
// turn it is launches for the whole ceiling, not its half. At the power cap (remembered
// for alloc.WidthMemory) no one fits either, and the turns go on the same way.
func TestTurnsGoOnThroughABurst(t *testing.T) {
	f := holdingHalfEach(t, "first", "second")
	now := time.Now().Truncate(2 * alloc.FitTurn) // a cycle's start: the first's turn
	var launches uint64
	step := func(online uint64) {
		launches += online
		f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) { r.Launches = launches })
		f.launch(t, "first", "second")
		f.g.Step(context.Background(), now)
		now = now.Add(100 * time.Millisecond)
	}
	for range 40 { // calm, 4 s: two whole cycles of turns
		step(40)
	}
	step(200)
	if st := f.status(t, "GPU-a"); !st.Burst {
		t.Fatalf("5x the online launches: no burst: %+v", st)
	}
	for id, paused := range map[string]bool{"first": false, "second": true} {
		if l := f.blk[id].Limits(); l.Signal.FitPercent != 0 || l.Paused != paused {
			t.Errorf("a burst in the first's turn: %s fit %d%%, paused %v; want 0%% and %v", id, l.Signal.FitPercent, l.Paused, paused)
		}
	}
	own := policy.Default().Classes.Offline.SMMax.Fraction()
	wholeCeiling := func(when string) {
		t.Helper()
		st := f.status(t, "GPU-a")
		want := math.Min(own, st.OfflineShare)
		if got := float64(f.blk["first"].Limits().ShareBP) / ctlblock.ShareFull; math.Abs(got-want) > 1e-3 {
			t.Errorf("%s: the first's launch-gate share %.4f, want the whole ceiling %.4f", when, got, want)
		}
	}
	wholeCeiling("a burst in the first's turn")
	capped := uint64(0x4) // NVML's software power cap
	f.mon.gpus[0].Sample.ClockEventReasons = &capped
	for range 3 {
		step(40)
	}
	for id, paused := range map[string]bool{"first": false, "second": true} {
		if l := f.blk[id].Limits(); l.Signal.FitPercent != 0 || l.Paused != paused {
			t.Errorf("power-capped in the first's turn: %s fit %d%%, paused %v; want 0%% and %v", id, l.Signal.FitPercent, l.Paused, paused)
		}
	}
	wholeCeiling("power-capped in the first's turn")
	if st := f.status(t, "GPU-a"); !st.PowerCapped || st.Fits || st.MPSWaiting != 1 {
		t.Errorf("power-capped: status capped %v, fits %v, %d waiting; want true, false, 1", st.PowerCapped, st.Fits, st.MPSWaiting)
	}
}

// A job that launches nothing while free to (an idle notebook, a job loading its data)
// takes no turn: the busy neighbour fits the budget all the time instead of waiting half
// of it for nothing. Once the idle one launches again, they take turns again.
func TestIdleJobTakesNoTurn(t *testing.T) {
	f := holdingHalfEach(t, "busy", "idle")
	at := time.Now().Truncate(2 * alloc.FitTurn).Add(2 * alloc.FitTurn * 3 / 4) // the idle one's turn
	// two usage reads (a second apart) with launches by the busy one only
	for i := range 25 {
		f.launch(t, "busy")
		f.g.Step(context.Background(), at.Add(time.Duration(i)*100*time.Millisecond))
	}
	// the busy one fits all the time; the idle one is bounded, not waiting
	for id, fit := range map[string]uint32{"busy": 50, "idle": 0} {
		if l := f.blk[id].Limits(); l.Paused || l.Signal.FitPercent != fit {
			t.Errorf("the idle one launched nothing: %s paused %v, fit %d%%; want running, fit %d%%", id, l.Paused, l.Signal.FitPercent, fit)
		}
	}
	if st := f.status(t, "GPU-a"); st.MPSHeld != 100 || st.MPSFitted != 1 {
		t.Errorf("GPU status: held %v%%, %d fitted; want 100%% and 1", st.MPSHeld, st.MPSFitted)
	}
	at = at.Add(2500 * time.Millisecond)
	for i := range 12 {
		f.launch(t, "busy", "idle")
		f.g.Step(context.Background(), at.Add(time.Duration(i)*100*time.Millisecond))
	}
	// both busy: whose turn it is runs, the other waits
	l1, l2 := f.blk["busy"].Limits(), f.blk["idle"].Limits()
	if l1.Paused == l2.Paused {
		t.Errorf("both launching: paused %v and %v, want one of them waiting for its turn", l1.Paused, l2.Paused)
	}
}

// Issue 14 (membw): where the online kernels and the offline ones beside them together
// ask for more memory bandwidth than the GPU has (NVML's per-process memory utilisation
// per unit of running time), the fitted budget stays but the offline blocks no longer
// say it fits: offline keeps its launches bounded, whatever the SM split. Light traffic
// leaves it fitted; the status shows the two classes' bandwidth.
func TestMemoryBandwidthKeepsOfflineBounded(t *testing.T) {
	for _, tc := range []struct {
		name                string
		onMem, offMem       uint32 // percent, at online 20% and offline 60% utilisation
		fit                 uint32
		bound               bool
		wantOnBW, wantOffBW float64
	}{
		{name: "both bandwidth-heavy", onMem: 10, offMem: 36, fit: 0, bound: true, wantOnBW: 0.5, wantOffBW: 0.6},
		{name: "light traffic", onMem: 6, offMem: 18, fit: 50, wantOnBW: 0.3, wantOffBW: 0.3},
		{name: "garbage above 100% is clamped", onMem: 400, offMem: 36, fit: 0, bound: true, wantOnBW: 1, wantOffBW: 0.6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t, running("svc", api.Online, 100, "0"), running("train", api.Offline, 200, "0"))
			f.startedAt(t, "train", 50)
			f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) { r.OnlineWidth[0] = widthBP(5000) })
			f.mon.mu.Lock()
			f.mon.gpus[0].State, f.mon.gpus[0].AdmitsOffline = monitor.Healthy, true
			f.mon.gpus[0].Sample = &monitor.Sample{GPUUtilPercent: u32(70), Processes: []monitor.ProcessSample{
				{PID: 100, SMUtilPercent: u32(20), MemUtilPercent: u32(tc.onMem)},
				{PID: 200, SMUtilPercent: u32(60), MemUtilPercent: u32(tc.offMem)},
			}}
			f.mon.mu.Unlock()
			f.g.Step(context.Background(), time.Now())
			l := f.blk["train"].Limits()
			st := f.status(t, "GPU-a")
			if l.MPSActiveThreadPercent != 50 || l.Signal.FitPercent != tc.fit || st.MemBound != tc.bound {
				t.Errorf("MPS %d%%, fit %d%%, status mem-bound %v; want 50%%, %d%%, %v", l.MPSActiveThreadPercent, l.Signal.FitPercent, st.MemBound, tc.fit, tc.bound)
			}
			if math.Abs(st.OnlineMemBW-tc.wantOnBW) > 0.01 || math.Abs(st.OfflineMemBW-tc.wantOffBW) > 0.01 {
				t.Errorf("status bandwidth online %.2f offline %.2f, want %.2f %.2f", st.OnlineMemBW, st.OfflineMemBW, tc.wantOnBW, tc.wantOffBW)
			}
		})
	}
}

// A container that fits is charged in SM time under the dynamic allocator, and in GPU
// time under the static one.
func TestFittedGate(t *testing.T) {
	dyn, static := policy.Default(), policy.Default()
	static.Alloc.Mode = string(alloc.Static)
	for _, tc := range []struct {
		share  float64
		fitPct uint32
		p      *policy.Policy
		want   float64
	}{
		{0.3, 50, dyn, 0.6},
		{0.3, 25, dyn, 1},
		{0.7, 70, dyn, 1},
		{0.3, 0, dyn, 0.3},
		{0.3, 50, static, 0.3},
	} {
		if got := fittedGate(tc.share, tc.fitPct, tc.p); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("fittedGate(%v, %d%%, %s) = %v, want %v", tc.share, tc.fitPct, tc.p.Alloc.Mode, got, tc.want)
		}
	}
}

// A fitted job that launches few kernels has its own ceiling (sm_max, 70%) counted in SM
// time, up to FitSMTime: on a fitted 37% it may run all of the time, on a fitted 50% 80%
// of it, on a fitted 70% 70% (its own ceiling as a share of GPU time, no less). One that
// launches many keeps it as a share of GPU time, since its launches would queue the
// online ones in the GPU's front end; the status says which.
func TestFewLaunchesCountOwnCeilingInSMTime(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fit       uint32 // the MPS percentage its processes hold
		width     uint32 // the online kernels' width, basis points
		perStep   uint64 // launches every 100 ms period
		wantShare float64
		boundBy   string
	}{
		{name: "1,000 launches a second", fit: 37, width: 6250, perStep: 100, wantShare: 1, boundBy: "GPU budget"},
		{name: "10,000 launches a second", fit: 37, width: 6250, perStep: 1000, wantShare: 0.7, boundBy: "own sm-percent, many launches"},
		// all of the time on 70% of the SMs would be 70% of the SM time; FitSMTime ÷ 0.7
		// of it is less than its own ceiling as a share of GPU time, which it keeps
		{name: "holding 70% of the SMs", fit: 70, width: 2500, perStep: 100, wantShare: 0.7, boundBy: "SM-time cap"},
		{name: "holding 50% of the SMs", fit: 50, width: 5000, perStep: 100, wantShare: FitSMTime / 0.5, boundBy: "SM-time cap"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t, running("svc", api.Online, 100, "0"), running("train", api.Offline, 200, "0"))
			f.startedAt(t, "train", tc.fit)
			f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) { r.OnlineWidth[0] = widthBP(tc.width) })
			f.mon.set(0, monitor.Healthy, 20)
			now := time.Now()
			for i := range 25 { // two usage reads of the offline block, a second apart
				f.writeUsage(t, "train", func(r *ctlblock.RawUsage) { r.Launches += tc.perStep })
				f.g.Step(context.Background(), now.Add(time.Duration(i)*100*time.Millisecond))
			}
			l := f.blk["train"].Limits()
			if got := float64(l.ShareBP) / ctlblock.ShareFull; math.Abs(got-tc.wantShare) > 1e-3 || l.Signal.FitPercent != tc.fit {
				t.Errorf("launch-gate share %v, fit %d%%; want %.4f and %d%%", got, l.Signal.FitPercent, tc.wantShare, tc.fit)
			}
			if ce, _ := f.g.Ceiling("train"); ce.Own != 70 || ce.BoundBy != tc.boundBy {
				t.Errorf("ceiling %+v, want its own 70%%, bound by %s", ce, tc.boundBy)
			}
		})
	}
}

// Jobs that take turns follow the same rule: the one whose turn it is, holding half of
// the SMs, runs FitSMTime ÷ 0.5 of the time (80%), above its own ceiling in GPU time.
func TestTurnsCountOwnCeilingInSMTime(t *testing.T) {
	f := holdingHalfEach(t, "first", "second")
	now := time.Now().Truncate(2 * alloc.FitTurn) // a cycle's start: the first's turn
	for i := range 25 {
		f.launch(t, "first", "second") // 1,000 launches a second each
		f.g.Step(context.Background(), now.Add(time.Duration(i)*100*time.Millisecond))
	}
	running := 0
	for _, id := range []string{"first", "second"} {
		l := f.blk[id].Limits()
		if l.Paused {
			continue // waits for its turn
		}
		running++
		if got := float64(l.ShareBP) / ctlblock.ShareFull; l.Signal.FitPercent != 50 || math.Abs(got-FitSMTime/0.5) > 1e-3 {
			t.Errorf("%s, in its turn: share %v, fit %d%%; want %v and fit 50%%", id, got, l.Signal.FitPercent, FitSMTime/0.5)
		}
		if ce, _ := f.g.Ceiling(id); ce.BoundBy != "SM-time cap" {
			t.Errorf("%s: ceiling %+v, want bound by the SM-time cap", id, ce)
		}
	}
	if running != 1 {
		t.Errorf("%d of the two run, want the one whose turn it is", running)
	}
}

// Once its own ceiling no longer bounds it, a job's launch rate may rise by 1 ÷ that
// ceiling: it keeps counting in SM time up to FewLaunches ÷ own, so that the step does
// not go back and forth. A job first seen at that rate does not start there.
func TestFewLaunchesHysteresis(t *testing.T) {
	few := false // what the previous read said; none yet: not
	for _, tc := range []struct {
		rate float64
		ok   bool
		want bool
	}{
		{0, false, false},   // no rate read yet
		{2500, true, false}, // above FewLaunches, not few before
		{1500, true, true},  // few
		{2500, true, true},  // risen by less than 1 ÷ 0.7 since: still few
		{FewLaunches / 0.7 * 1.01, true, false},
		{2500, true, false},
	} {
		if tc.ok {
			few = fewLaunches(tc.rate, few, 0.7)
		}
		if few != tc.want {
			t.Errorf("at %.0f launches/s (read: %v): few %v, want %v", tc.rate, tc.ok, few, tc.want)
		}
	}
}
