package guard

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/monitor"
	"github.com/muxflow/muxflow/muxd/api"
)

func u32(v uint32) *uint32 { return &v }

// sample sets GPU i's NVML sample: its whole utilisation (nil: not reported) and
// per-process utilisation samples (pid -> percent; a nil percent lists the process
// without a utilisation sample).
func (f *fakeMonitor) sample(i int, gpuUtil *uint32, procs map[uint32]*uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := &monitor.Sample{GPUUtilPercent: gpuUtil}
	for pid, u := range procs {
		s.Processes = append(s.Processes, monitor.ProcessSample{PID: pid, SMUtilPercent: u})
	}
	f.gpus[i].Sample = s
}

func (f *fixture) status(t *testing.T, uuid string) Status {
	t.Helper()
	for _, s := range f.g.Statuses() {
		if s.UUID == uuid {
			return s
		}
	}
	t.Fatalf("no status for %s", uuid)
	return Status{}
}

// Issue 14, cause 5: when the online containers' processes cannot be found in NVML's
// per-process samples, the demand estimate must not fall to 0 (offline would get its
// maximum): the guard falls back to the GPU's whole utilisation or the last good
// estimate, whichever is larger, and says why.
func TestOnlineAttributionFailureIsConservative(t *testing.T) {
	const svc, train, mpsServer = 100, 200, 999
	for _, tc := range []struct {
		name string
		// first is an optional period with good attribution before the one tested.
		first    map[uint32]*uint32
		gpuUtil  *uint32
		procs    map[uint32]*uint32
		maxShare float64 // the offline ceiling must not be above this
		minShare float64 // ... nor below this (a good attribution is not a fallback)
		source   string  // in Status.DemandSource
	}{
		{name: "samples only from a process of no container (MPS server)", gpuUtil: u32(90),
			procs: map[uint32]*uint32{mpsServer: u32(90)}, maxShare: 0.051, source: "none from online container(s) svc"},
		{name: "samples only from the offline container", gpuUtil: u32(60),
			procs: map[uint32]*uint32{train: u32(60)}, maxShare: 0.301, source: "none from online container(s) svc"},
		{name: "no utilisation at all", procs: map[uint32]*uint32{mpsServer: u32(50)}, maxShare: 0.051, source: "the whole GPU"},
		{name: "no per-process samples: last good is larger than the GPU's", first: map[uint32]*uint32{svc: u32(60), train: u32(30)},
			gpuUtil: u32(30), procs: map[uint32]*uint32{svc: nil, train: nil}, maxShare: 0.301, source: "last good estimate 60%"},
		{name: "samples from others, last good larger", first: map[uint32]*uint32{svc: u32(50), train: u32(10)},
			gpuUtil: u32(20), procs: map[uint32]*uint32{mpsServer: u32(20)}, maxShare: 0.401, source: "last good estimate 50%"},
		{name: "attributed (control)", gpuUtil: u32(90), procs: map[uint32]*uint32{svc: u32(20), train: u32(70)},
			minShare: 0.69, maxShare: 0.701, source: "per-process utilisation of 1 online process"},
		{name: "online idle, offline attributed (control)", gpuUtil: u32(70), procs: map[uint32]*uint32{svc: nil, train: u32(70)},
			minShare: 0.69, maxShare: 0.701, source: "idle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t, running("svc", api.Online, svc, "0"), running("train", api.Offline, train, "0"))
			now := time.Now()
			if tc.first != nil {
				f.mon.sample(0, u32(90), tc.first)
				f.g.Step(context.Background(), now)
				now = now.Add(100 * time.Millisecond)
			}
			f.mon.sample(0, tc.gpuUtil, tc.procs)
			f.g.Step(context.Background(), now)
			st := f.status(t, "GPU-a")
			s, _ := f.share("train")
			if st.OfflineShare > tc.maxShare || s > tc.maxShare+1e-4 || st.OfflineShare < tc.minShare {
				t.Errorf("offline ceiling %v (train's share %v), want %v..%v; demand %v (%s)", st.OfflineShare, s, tc.minShare, tc.maxShare, st.OnlineDemand, st.DemandSource)
			}
			if !strings.Contains(st.DemandSource, tc.source) {
				t.Errorf("demand source %q does not say %q", st.DemandSource, tc.source)
			}
			if tc.minShare == 0 && !strings.Contains(st.Reason, st.DemandSource) {
				t.Errorf("reason %q does not carry the fallback %q", st.Reason, st.DemandSource)
			}
		})
	}
}

// Issue 14, cause 2: the GPU's offline ceiling is one budget for all its offline
// containers: their launch-gate shares and MPS active-thread percentages sum to at most
// the GPU's ceiling (and the class's sm_max for MPS).
func TestOfflineContainersSplitTheGPUsCeiling(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		cs := []api.Container{running("svc", api.Online, 100, "0")}
		for i := range n {
			cs = append(cs, running(string(rune('a'+i))+"-train", api.Offline, 200+i, "0"))
		}
		f := setup(t, cs...)
		f.mon.set(0, monitor.Healthy, 20) // ceiling 1 - 0.2 - 0.1 headroom = 0.7
		f.g.Step(context.Background(), time.Now())
		st := f.status(t, "GPU-a")
		if math.Abs(st.OfflineShare-0.7) > 1e-9 || st.OfflineContainers != n {
			t.Errorf("%d offline: GPU status %+v, want ceiling 0.7 split by %d", n, st, n)
		}
		var gate float64
		var mps uint32
		for _, c := range cs[1:] {
			l := f.blk[c.ID].Limits()
			gate += float64(l.ShareBP) / 10000
			mps += l.MPSActiveThreadPercent
			if l.MPSActiveThreadPercent == 0 {
				t.Errorf("%d offline: %s has no MPS active-thread percentage (unlimited)", n, c.ID)
			}
			ce, ok := f.g.Ceiling(c.ID)
			if !ok || ce.BoundBy != "GPU budget" || math.Abs(ce.Percent-float64(l.ShareBP)/100) > 0.01 {
				t.Errorf("%d offline: %s ceiling %+v, limits %+v", n, c.ID, ce, l)
			}
		}
		if gate > 0.7+1e-9 || gate < 0.69 {
			t.Errorf("%d offline containers: launch-gate shares sum to %v, want ≤ the GPU's ceiling 0.7 (and all of it)", n, gate)
		}
		if mps > 70 {
			t.Errorf("%d offline containers: MPS active-thread percentages sum to %d, want ≤ 70", n, mps)
		}
	}
}

// Issue 14, cause 6: a container's own sm-percent is its own ceiling (asked 40, got 70),
// and what it leaves of the GPU's budget goes to the others.
func TestOwnSMPercentIsACeiling(t *testing.T) {
	asking := func(c api.Container, pct int) api.Container { c.Limits.SMPercent = pct; return c }
	f := setup(t,
		asking(running("small", api.Offline, 200, "GPU-b"), 40),
		asking(running("tiny", api.Offline, 300, "0"), 20),
		running("big", api.Offline, 400, "0"),
	)
	f.mon.sample(0, nil, nil)
	f.g.Containers = list{
		asking(running("small", api.Offline, 200, "GPU-b"), 40),
		asking(running("tiny", api.Offline, 300, "0"), 20),
		running("big", api.Offline, 400, "0"),
	}
	f.g.Step(context.Background(), time.Now())
	for _, tc := range []struct {
		id      string
		share   float64
		mps     uint32
		boundBy string
	}{
		{"small", 0.40, 40, "own sm-percent"}, // alone on GPU-b (ceiling 0.7): its own 40
		{"tiny", 0.20, 20, "own sm-percent"},  // GPU 0 (ceiling 0.7): 20 of its own...
		{"big", 0.50, 50, "GPU budget"},       // ...and the rest to the other
	} {
		l := f.blk[tc.id].Limits()
		if got := float64(l.ShareBP) / 10000; math.Abs(got-tc.share) > 1e-9 || l.MPSActiveThreadPercent != tc.mps {
			t.Errorf("%s: share %v, MPS %d%%; want %v and %d%%", tc.id, got, l.MPSActiveThreadPercent, tc.share, tc.mps)
		}
		if ce, _ := f.g.Ceiling(tc.id); ce.BoundBy != tc.boundBy {
			t.Errorf("%s: ceiling %+v, want bound by %s", tc.id, ce, tc.boundBy)
		}
	}
}

// Issue 14: the online containers' launch counts reach the burst detector. A steady
// Poisson-free launch rate for a few seconds, then five times the rate while NVML's
// utilisation still shows the calm value: the ceiling is cut in that period, the reason
// says "burst", and the change is in the GPU's history; two calm periods later the
// burst is over and the ceiling is back.
func TestLaunchBurstCutsTheCeilingWithAReason(t *testing.T) {
	const svc, train = 100, 200
	f := setup(t, running("svc", api.Online, svc, "0"), running("train", api.Offline, train, "0"))
	f.startedAt(t, "train", 50) // registered after the online width was seen
	f.mon.sample(0, u32(40), map[uint32]*uint32{svc: u32(10), train: u32(30)})
	now := time.Now()
	var launches uint64
	step := func(perPeriod uint64) Status {
		launches += perPeriod
		f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) { r.Launches = launches; r.OnlineWidth[0] = widthBP(5000) })
		f.g.Step(context.Background(), now)
		now = now.Add(100 * time.Millisecond)
		return f.status(t, "GPU-a")
	}
	fit := func() uint32 { return f.blk["train"].Limits().Signal.FitPercent }
	// Calm: 40 launches a period (400/s) at 10% utilisation.
	var st Status
	for range 40 {
		st = step(40)
	}
	if st.Burst || math.Abs(st.OfflineShare-0.7) > 1e-9 || st.ReasonKey != "calm" {
		t.Fatalf("calm: %+v", st)
	}
	if fit() != 50 {
		t.Errorf("calm, half-GPU online kernels: offline block says %d%% fits, want 50%%", fit())
	}
	st = step(200)
	if !st.Burst || st.ReasonKey != "burst" || st.OfflineShare > 0.45 || st.OnlineDemand < 0.45 {
		t.Fatalf("5x launches: %+v", st)
	}
	if fit() != 0 {
		t.Errorf("in a burst the offline launches are bounded again, but the block says %d%% fits", fit())
	}
	if h := st.History; len(h) == 0 || h[len(h)-1].Reason != "burst" || math.Abs(h[len(h)-1].To-100*st.OfflineShare) > 0.01 {
		t.Errorf("history does not end with the burst: %+v", st.History)
	}
	if !strings.Contains(st.Reason, "burst detected") {
		t.Errorf("reason %q", st.Reason)
	}
	step(40)
	st = step(40)
	if st.Burst || st.ReasonKey != "burst over" || math.Abs(st.OfflineShare-0.7) > 0.02 {
		t.Errorf("two calm periods after the burst: %+v", st)
	}
	if fit() != 50 {
		t.Errorf("after the burst: offline block says %d%% fits, want 50%% again", fit())
	}
	// Calm again at the same ceiling: the new reason says the ceiling stayed.
	for range 20 {
		st = step(40)
	}
	if st.ReasonKey != "calm" || !strings.HasPrefix(st.Reason, "stays 70%: ") {
		t.Errorf("calm after the burst, at the same ceiling: %q (%s)", st.Reason, st.ReasonKey)
	}
}
