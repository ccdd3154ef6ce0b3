package guard

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/monitor"
	"github.com/muxflow/muxflow/muxd/alloc"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/workloadprofile"
	"github.com/muxflow/muxflow/policy"
)

// busyBlocks adds the signal page's online busy periods to the fixture's blocks.
type busyBlocks struct {
	fakeBlocks
	ns, spans uint64 // GPU 0's
}

func (b *busyBlocks) OnlineBusy(i int) (uint64, uint64) {
	if i != 0 {
		return 0, 0
	}
	return b.ns, b.spans
}

// publishBusy gives the fixture's guard blocks that publish GPU 0's online busy periods.
func (f *fixture) publishBusy() *busyBlocks {
	bb := &busyBlocks{fakeBlocks: f.blk}
	f.g.Blocks = bb
	return bb
}

// kernelFixture runs 4 s of 100 ms periods of an online service ("svc", kernels width
// basis points wide, requests of request each, ten a period, published as busy periods
// unless request is 0) beside an offline job ("train", created at started percent of the
// SMs, ten measured launches of kernel a period).
func kernelFixture(t *testing.T, width, started uint32, request, kernel time.Duration) *fixture {
	t.Helper()
	return kernelFixtureWith(t, policy.Default(), width, started, request, kernel)
}

// kernelFixtureWith is kernelFixture under policy p.
func kernelFixtureWith(t *testing.T, p *policy.Policy, width, started uint32, request, kernel time.Duration) *fixture {
	t.Helper()
	return kernelSteps(t, p, width, started, request, kernel, func(*fixture, int) bool { return true })
}

// kernelSteps is kernelFixtureWith, calling each after every period (i from 0) and
// stopping early where it returns false; jobs (default "train") are the offline
// containers, each created at started percent and launching alike.
func kernelSteps(t *testing.T, p *policy.Policy, width, started uint32, request, kernel time.Duration, each func(f *fixture, i int) bool, jobs ...string) *fixture {
	t.Helper()
	if len(jobs) == 0 {
		jobs = []string{"train"}
	}
	cs := []api.Container{running("svc", api.Online, 100, "0")}
	for i, id := range jobs {
		cs = append(cs, running(id, api.Offline, 200+i, "0"))
	}
	f := setup(t, cs...)
	f.g.Policy = func() *policy.Policy { return p }
	for _, id := range jobs {
		f.startedAt(t, id, started)
	}
	bb := f.publishBusy()
	f.g.Profiler = workloadprofile.New()
	now := time.Now()
	for i := range 40 {
		f.mon.set(0, monitor.Healthy, 20)
		f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) {
			r.Launches += 200
			r.OnlineWidth[0] = widthBP(width)
		})
		if request > 0 {
			bb.ns, bb.spans = bb.ns+10*uint64(request), bb.spans+10
		}
		for _, id := range jobs {
			f.launchKernels(t, id, 10, kernel)
		}
		f.g.Step(context.Background(), now.Add(time.Duration(i)*100*time.Millisecond))
		if !each(f, i) {
			break
		}
	}
	return f
}

// launchKernels adds n measured launches of length k to a container's usage block.
func (f *fixture) launchKernels(t *testing.T, id string, n uint64, k time.Duration) {
	t.Helper()
	f.writeUsage(t, id, func(r *ctlblock.RawUsage) {
		us := uint64(k / time.Microsecond)
		r.Launches += n
		r.MeasuredLaunch += n
		r.GPUTimeNS += n * uint64(k)
		r.GPUTimeSqUS2 += n * us * us
	})
}

// Issue 14, the random scenarios: an offline job whose kernels are many times as long as
// the online requests, with blocks that may hold the SMs the online kernels need, delays
// the requests whatever its share. The guard measures both (the job's from libxcuda's
// measured launches, the requests from the busy periods the online side publishes),
// names the job in the GPU's status, records one event when it starts, and gives the
// lengths to the profiles the matcher reads.
func TestKernelRisks(t *testing.T) {
	for _, tc := range []struct {
		name            string
		width, started  uint32
		request, kernel time.Duration
		risky           bool
	}{
		{"GPU-filling online kernels beside 3 ms offline kernels", 10000, 100, 100 * time.Microsecond, 3 * time.Millisecond, true},
		{"beside offline kernels half as long again as a request", 10000, 100, 100 * time.Microsecond, 150 * time.Microsecond, false},
		{"beside requests longer than the offline kernels", 10000, 100, 10 * time.Millisecond, 3 * time.Millisecond, false},
		{"a job confined to the SMs the online kernels leave", 6000, 40, 100 * time.Microsecond, 3 * time.Millisecond, false},
		{"a job whose percentage is above the room they leave", 6000, 70, 100 * time.Microsecond, 3 * time.Millisecond, true},
		{"no online width seen: nothing is said", 0, 100, 100 * time.Microsecond, 3 * time.Millisecond, false},
		{"no busy periods published (an older libxcuda): nothing is said", 10000, 100, 0, 3 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := kernelFixture(t, tc.width, tc.started, tc.request, tc.kernel)
			st := f.status(t, "GPU-a")
			job, _, _ := f.g.Profiler.Profile("train")
			svc, _, _ := f.g.Profiler.Profile("svc")
			if tc.request > 0 && (math.Abs(job.KernelUS-float64(tc.kernel.Microseconds())) > 1 ||
				math.Abs(svc.RequestUS-float64(tc.request.Microseconds())) > 1 || svc.WidthPct != float64(tc.width)/100) {
				t.Errorf("profiles: job %v µs, service %v µs %v%% wide", job.KernelUS, svc.RequestUS, svc.WidthPct)
			}
			if !tc.risky {
				if len(st.KernelRisks) != 0 || len(f.mon.events) != 0 {
					t.Fatalf("risks %+v, events %q; want none", st.KernelRisks, f.mon.events)
				}
				return
			}
			// The matcher reads the same rule from the profiles muxd reports.
			if !job.DelaysOnline(svc) && tc.width >= 9000 {
				t.Error("the profiles do not say the job delays the service")
			}
			if len(st.KernelRisks) != 1 {
				t.Fatalf("risks %+v, want train's", st.KernelRisks)
			}
			r := st.KernelRisks[0]
			near := func(a, b time.Duration) bool { return (a - b).Abs() <= time.Microsecond }
			if r.ID != "train" || !near(r.OfflineKernel, tc.kernel) || !near(r.OfflinePerLaunch, tc.kernel) || r.OnlineRequest != tc.request {
				t.Errorf("risk %#v, want train at %v beside %v requests", r, tc.kernel, tc.request)
			}
			if len(f.mon.events) != 1 || !strings.Contains(f.mon.events[0], "GPU-a train: a request that meets one of its kernels waits for up to 3ms, 30× an online request (100µs)") ||
				!strings.Contains(f.mon.events[0], "muxflow.io/sm-percent") {
				t.Errorf("events %q, want one saying what to do", f.mon.events)
			}
			// The job's kernels get short: the risk ends, without another event, once the
			// short ones hold most of the GPU time the job's recent seconds had (the long
			// ones' weigh by their length).
			now := time.Now().Add(4 * time.Second)
			bb := f.g.Blocks.(*busyBlocks)
			for i := range 300 {
				f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) { r.Launches += 200 })
				bb.ns, bb.spans = bb.ns+10*uint64(tc.request), bb.spans+10
				f.launchKernels(t, "train", 10, 50*time.Microsecond)
				f.g.Step(context.Background(), now.Add(time.Duration(i)*100*time.Millisecond))
			}
			if st := f.status(t, "GPU-a"); len(st.KernelRisks) != 0 || len(f.mon.events) != 1 {
				t.Errorf("after 30 s of 50 µs kernels: risks %+v, events %q", st.KernelRisks, f.mon.events)
			}
		})
	}
}

// A container's usage block and the online containers' signal slot are their own word:
// counters that go back or leap start a new baseline or are clamped; nothing written
// there crashes the guard or names a neighbour.
func TestKernelRisksFromHostileCounters(t *testing.T) {
	f := setup(t, running("svc", api.Online, 100, "0"), running("train", api.Offline, 200, "0"), running("other", api.Offline, 201, "0"))
	bb := f.publishBusy()
	now := time.Now()
	for i := range 40 {
		f.mon.set(0, monitor.Healthy, 20)
		f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) {
			r.Launches += 200
			r.OnlineWidth[0] = widthBP(10000)
		})
		switch i % 3 {
		case 0:
			bb.ns, bb.spans = math.MaxUint64, math.MaxUint64
		case 1:
			bb.ns, bb.spans = 0, 0
		default:
			bb.ns, bb.spans = bb.ns+1, bb.spans+1<<62
		}
		f.writeUsage(t, "train", func(r *ctlblock.RawUsage) {
			r.Launches++
			switch i % 3 {
			case 0:
				r.MeasuredLaunch, r.GPUTimeNS, r.GPUTimeSqUS2 = math.MaxUint64, math.MaxUint64, math.MaxUint64
			case 1:
				r.MeasuredLaunch, r.GPUTimeNS, r.GPUTimeSqUS2 = 0, 0, 0
			default:
				r.MeasuredLaunch += 1 << 62
				r.GPUTimeNS = math.MaxUint64 - uint64(i)
				r.GPUTimeSqUS2 = math.MaxUint64
			}
		})
		f.launchKernels(t, "other", 10, 50*time.Microsecond)
		f.g.Step(context.Background(), now.Add(time.Duration(i)*100*time.Millisecond))
	}
	for _, r := range f.status(t, "GPU-a").KernelRisks {
		if r.ID != "train" {
			t.Errorf("a neighbour's hostile counters named %+v", r)
		}
		if r.OfflineKernel < 0 || r.OfflineKernel > 10*time.Second || r.OnlineRequest < 0 || r.OnlineRequest > 10*time.Second {
			t.Errorf("hostile counters gave %+v", r)
		}
	}
}

// Issue 14, the shape no share protects: a job named for kernels too long beside the
// online requests, with blocks that may hold the SMs those need, is confined to the
// policy's alloc.confine of the SMs while it is named beside GPU-filling online kernels,
// or to what narrower ones leave (its block's confine_pct, which libxcuda turns into a
// green context), says so in its ceiling, its risk and the event, and is released
// ConfineHold after its kernels stop being too long. A job named for the memory bus alone
// is not confined (its MPS percentage fits the room, so MPS would ignore a green context),
// nor is any job under alloc.confine = 0%.
func TestRiskyJobIsConfined(t *testing.T) {
	confine := func(f *fixture) uint32 { return f.blk["train"].Limits().ConfinePercent }
	f := kernelFixture(t, 10000, 100, 100*time.Microsecond, 3*time.Millisecond)
	st := f.status(t, "GPU-a")
	if got := confine(f); got != 50 {
		t.Fatalf("named job's block confine_pct %d, want the default policy's 50", got)
	}
	if c, _ := f.g.Ceiling("train"); len(st.KernelRisks) != 1 || st.KernelRisks[0].ConfinePercent != 50 || c.ConfinePercent != 50 {
		t.Errorf("risks %+v, ceiling %+v: want both to say 50%%", st.KernelRisks, c)
	}
	if len(f.mon.events) != 1 || !strings.Contains(f.mon.events[0], "muxd confines its kernels to 50% of the SMs while it is named") {
		t.Errorf("events %q, want the one event to say it is confined", f.mon.events)
	}
	// Its kernels get short: the risk ends within a few seconds, the confinement
	// ConfineHold after the last period that named it.
	now := time.Now().Add(4 * time.Second)
	bb := f.g.Blocks.(*busyBlocks)
	named, released := time.Duration(-1), time.Duration(-1)
	for i := range 400 {
		f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) { r.Launches += 200 })
		bb.ns, bb.spans = bb.ns+10*uint64(100*time.Microsecond), bb.spans+10
		f.launchKernels(t, "train", 10, 50*time.Microsecond)
		at := time.Duration(i) * 100 * time.Millisecond
		f.g.Step(context.Background(), now.Add(at))
		if len(f.status(t, "GPU-a").KernelRisks) == 1 {
			named = at
		}
		if released < 0 && confine(f) == 0 {
			released = at
		}
	}
	if named < 0 || released-named < ConfineHold || released-named > ConfineHold+200*time.Millisecond {
		t.Errorf("last named at %v, released at %v: want released %v after", named, released, ConfineHold)
	}

	// Online kernels 60% wide, a job started at 70%: confined to the 40% they leave, so
	// that they never wait for its blocks.
	f = kernelFixture(t, 6000, 70, 100*time.Microsecond, 3*time.Millisecond)
	if got := confine(f); got != 40 {
		t.Errorf("beside 60%%-wide online kernels: confine_pct %d, want the 40 they leave", got)
	}
	// The same job started at 40%: in the room they leave, it is not named for its SMs.
	f = kernelFixture(t, 6000, 40, 100*time.Microsecond, 3*time.Millisecond)
	if got := confine(f); got != 0 {
		t.Errorf("a job in the room the online kernels leave: confine_pct %d, want 0", got)
	}

	// alloc.confine = 0%: named, not confined.
	p := policy.Default()
	p.Alloc.Confine = 0
	g := kernelFixtureWith(t, p, 10000, 100, 100*time.Microsecond, 3*time.Millisecond)
	if st := g.status(t, "GPU-a"); len(st.KernelRisks) != 1 || st.KernelRisks[0].ConfinePercent != 0 || confine(g) != 0 {
		t.Errorf("under alloc.confine = 0%%: risks %+v, confine_pct %d; want named and not confined", st.KernelRisks, confine(g))
	}
}

// A job whose kernels are too long beside the online requests is named and confined
// within a few periods of its first launches (KernelWarmup: its measured launches are read
// every period until their length is known), not a second or two later, when the
// requests it met meanwhile have waited for its kernels.
func TestRiskyJobNamedWithinPeriods(t *testing.T) {
	confinedAt := -1
	kernelSteps(t, policy.Default(), 10000, 100, 100*time.Microsecond, 3*time.Millisecond, func(f *fixture, i int) bool {
		if f.blk["train"].Limits().ConfinePercent == 0 {
			return true
		}
		confinedAt = i
		return false
	})
	if confinedAt < 0 || confinedAt > 4 {
		t.Errorf("confined in period %d of 40, want within the first 5", confinedAt)
	}
}

// Two jobs named on one GPU share its confinement share: a green context is a process's
// own partition, and two of half the SMs each could hold every SM between them.
func TestConfinedJobsSplitTheShare(t *testing.T) {
	f := kernelSteps(t, policy.Default(), 10000, 100, 100*time.Microsecond, 3*time.Millisecond,
		func(*fixture, int) bool { return true }, "a", "b")
	if a, b := f.blk["a"].Limits().ConfinePercent, f.blk["b"].Limits().ConfinePercent; a != 25 || b != 25 {
		t.Errorf("two named jobs confined to %d%% and %d%%, want a quarter each", a, b)
	}
}

// evict.kernel_risk: a job named for its SMs, that no confinement protects the requests
// from, is evicted alone once it has been so named that long without a break; the risk
// says when beforehand. Protected (its libxcuda confines it into the room narrower online
// kernels leave), or under the default 0s, it is not.
func TestUnprotectedJobIsEvicted(t *testing.T) {
	p := policy.Default()
	p.Evict.KernelRisk = policy.Duration(2 * time.Second)
	evictAt := func(f *fixture) time.Time {
		st := f.status(t, "GPU-a")
		if len(st.KernelRisks) != 1 {
			return time.Time{}
		}
		return st.KernelRisks[0].EvictAt
	}

	// Beside GPU-filling online kernels half the SMs leave them waiting: evicted 2 s
	// after it was first named, once.
	named, evicted := -1, -1
	var first, at time.Time
	f := kernelSteps(t, p, 10000, 100, 100*time.Microsecond, 3*time.Millisecond, func(f *fixture, i int) bool {
		now := f.g.loop.lastStep
		if e := evictAt(f); !e.IsZero() && named < 0 {
			named, at, first = i, e, now
		}
		switch {
		case named < 0 || now.Before(at):
			if got := f.rec.ids(); got != "" {
				t.Fatalf("evicted (%q) in period %d, before %v", got, i, at)
			}
		case evicted < 0:
			// the eviction runs beside the guard's step
			waitFor(t, func() bool { return f.rec.ids() != "" })
			evicted = i
		}
		return evicted < 0 || i < evicted+5
	})
	if named < 0 || at.Sub(first) != 2*time.Second || evicted-named != 20 {
		t.Fatalf("named in period %d, evicted in period %d, at %v after: want 20 periods, 2s", named, evicted, at.Sub(first))
	}
	if st := f.status(t, "GPU-a"); !strings.Contains(st.KernelRisks[0].String(), "muxd evicts it at") {
		t.Errorf("risk %q does not say when muxd evicts it", st.KernelRisks[0].String())
	}
	if !strings.Contains(f.mon.eventLog(), "evicted, alone: named for 2s") {
		t.Errorf("events %q, want one saying it was evicted and why", f.mon.events)
	}
	time.Sleep(50 * time.Millisecond)
	if got := f.rec.ids(); got != "train" {
		t.Errorf("evictions %q, want train once", got)
	}

	// Beside online kernels 60% wide, a job started at 100%: confined into the 40% they
	// leave, which its libxcuda reports, it is protected and stays.
	f = kernelSteps(t, p, 6000, 100, 100*time.Microsecond, 3*time.Millisecond, func(f *fixture, i int) bool {
		f.writeUsage(t, "train", func(r *ctlblock.RawUsage) { r.ConfineState = uint32(ctlblock.ConfineOn) })
		return true
	})
	if c := f.blk["train"].Limits().ConfinePercent; c != 40 || !evictAt(f).IsZero() || f.rec.ids() != "" {
		t.Errorf("confined into the room: confine_pct %d, evict at %v, evicted %q; want 40 and never", c, evictAt(f), f.rec.ids())
	}
	// The same job whose libxcuda could not confine it (an MPS percentage below 100):
	// unprotected, evicted.
	f = kernelSteps(t, p, 6000, 100, 100*time.Microsecond, 3*time.Millisecond, func(f *fixture, i int) bool {
		f.writeUsage(t, "train", func(r *ctlblock.RawUsage) { r.ConfineState = uint32(ctlblock.ConfineMPSPct) })
		return true
	})
	waitFor(t, func() bool { return f.rec.ids() == "train" })

	// The default, 0s: named and confined, never evicted.
	f = kernelFixture(t, 10000, 100, 100*time.Microsecond, 3*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	if !evictAt(f).IsZero() || f.rec.ids() != "" {
		t.Errorf("under evict.kernel_risk = 0s: evict at %v, evicted %q; want never", evictAt(f), f.rec.ids())
	}
}

// The burst test counts requests by the online busy spans the signal page publishes: a
// service that starts idle and then takes a request of 24 kernels every third period
// is calm when its spans are published, and reads as a burst at each request when
// they are not (the launch count alone cannot tell 24 kernels of one request from a
// surge of requests).
func TestBurstTestCountsRequestsByBusySpans(t *testing.T) {
	for _, published := range []bool{true, false} {
		f := setup(t, running("svc", api.Online, 100, "0"), running("train", api.Offline, 200, "0"))
		bb := f.publishBusy()
		now := time.Now()
		for i := range 150 {
			f.mon.set(0, monitor.Healthy, 20)
			f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) {
				if i >= 30 && i%3 == 0 {
					r.Launches += 24
				}
			})
			if published && i >= 30 && i%3 == 0 {
				bb.ns, bb.spans = bb.ns+uint64(72*time.Millisecond), bb.spans+1
			}
			f.g.Step(context.Background(), now.Add(time.Duration(i)*100*time.Millisecond))
		}
		bursts := 0
		for _, c := range f.status(t, "GPU-a").History {
			if c.Reason == string(alloc.ReasonBurst) {
				bursts++
			}
		}
		switch {
		case published && bursts > 0:
			t.Errorf("spans published: %d bursts, want none", bursts)
		case !published && bursts < 10:
			t.Errorf("no spans published: %d bursts, want one at most requests (the test shows nothing)", bursts)
		}
	}
}
