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
	"github.com/muxflow/muxflow/muxd/workloadprofile"
)

// Issue 14, the random scenarios: an offline job whose kernels are many times as long as
// the online ones, with blocks that may hold the SMs those need, delays online requests
// whatever its share. The guard measures both lengths (the job's from libxcuda's measured
// launches, the service's from NVML's utilisation over its launch rate), reports the job
// in the GPU's status and records one event when it starts, and one log line when it ends.
func TestKernelRisks(t *testing.T) {
	for _, tc := range []struct {
		name      string
		width     uint32        // the online kernels' width, basis points (0: none seen)
		started   uint32        // the MPS percentage the job's processes hold
		offKernel time.Duration // the job's measured GPU time per launch
		wide      float64       // the share of it in wide launches
		risky     bool
	}{
		{"GPU-filling online kernels beside 3 ms offline kernels", 10000, 100, 3 * time.Millisecond, 1, true},
		{"beside 3 ms offline kernels, a third of their time wide", 10000, 100, 3 * time.Millisecond, 0.33, true},
		{"beside 3 ms offline kernels that are all narrow", 10000, 100, 3 * time.Millisecond, 0, false},
		{"beside offline kernels twice as long as the online ones", 10000, 100, 200 * time.Microsecond, 1, false},
		{"a job confined to the SMs the online kernels leave", 6000, 40, 3 * time.Millisecond, 1, false},
		{"a job whose percentage is above the room they leave", 6000, 70, 3 * time.Millisecond, 1, true},
		{"no online width seen: nothing is said", 0, 100, 3 * time.Millisecond, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t, running("svc", api.Online, 100, "0"), running("train", api.Offline, 200, "0"))
			f.startedAt(t, "train", tc.started)
			f.g.Profiler = workloadprofile.New()
			now := time.Now()
			// 4 s of 100 ms periods: the service runs 20% of the time in 2,000 launches a
			// second (100 µs a launch), the job launches 10 measured kernels a second.
			for i := range 40 {
				f.mon.set(0, monitor.Healthy, 20)
				f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) {
					r.Launches += 200
					r.OnlineWidth[0] = widthBP(tc.width)
				})
				f.writeUsage(t, "train", func(r *ctlblock.RawUsage) {
					r.Launches++
					r.MeasuredLaunch++
					r.GPUTimeNS += uint64(tc.offKernel)
					r.WideGPUTimeNS += uint64(tc.wide * float64(tc.offKernel))
				})
				f.g.Step(context.Background(), now.Add(time.Duration(i)*100*time.Millisecond))
			}
			st := f.status(t, "GPU-a")
			if !tc.risky {
				if len(st.KernelRisks) != 0 || len(f.mon.events) != 0 {
					t.Fatalf("risks %+v, events %q; want none", st.KernelRisks, f.mon.events)
				}
				return
			}
			if len(st.KernelRisks) != 1 {
				t.Fatalf("risks %+v, want train's", st.KernelRisks)
			}
			// The lengths reach the profiles the node reports to the matcher, which
			// then refuses the pair (profile.Profile.DelaysOnline) where the service's
			// kernels fill the GPU.
			job, _, _ := f.g.Profiler.Profile("train")
			svc, _, _ := f.g.Profiler.Profile("svc")
			if math.Abs(job.KernelUS-tc.wide*float64(tc.offKernel.Microseconds())) > 1 || math.Abs(svc.KernelUS-100) > 10 || svc.WidthPct != float64(tc.width)/100 {
				t.Errorf("profiles: job %v µs, service %v µs %v%% wide", job.KernelUS, svc.KernelUS, svc.WidthPct)
			}
			if job.DelaysOnline(svc) != (tc.width >= 9000) {
				t.Errorf("the profiles say the job delays the service: %v", job.DelaysOnline(svc))
			}
			r := st.KernelRisks[0]
			if r.ID != "train" || r.OfflineKernel != tc.offKernel || math.Abs(float64(r.OnlineKernel-100*time.Microsecond)) > float64(10*time.Microsecond) {
				t.Errorf("risk %+v, want train at %v beside about 100µs", r, tc.offKernel)
			}
			if len(f.mon.events) != 1 || !strings.Contains(f.mon.events[0], "GPU-a train: ") || !strings.Contains(f.mon.events[0], "a launch in kernels at least half the GPU wide (of 3ms)") ||
				!strings.Contains(f.mon.events[0], "muxflow.io/sm-percent") {
				t.Errorf("events %q, want one saying what to do", f.mon.events)
			}
			// The job's kernels get short: the risk ends, without another event.
			for i := range 80 {
				f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) { r.Launches += 200 })
				f.writeUsage(t, "train", func(r *ctlblock.RawUsage) {
					r.Launches += 10
					r.MeasuredLaunch += 10
					r.GPUTimeNS += uint64(10 * 50 * time.Microsecond)
				})
				f.g.Step(context.Background(), now.Add(4*time.Second+time.Duration(i)*100*time.Millisecond))
			}
			if st := f.status(t, "GPU-a"); len(st.KernelRisks) != 0 || len(f.mon.events) != 1 {
				t.Errorf("after 8 s of 50 µs kernels: risks %+v, events %q", st.KernelRisks, f.mon.events)
			}
		})
	}
}

// A job's usage block is its own word: counters that go back or leap start a new
// baseline or are clamped; nothing it writes crashes the guard or reports its neighbour.
func TestKernelRisksFromHostileCounters(t *testing.T) {
	f := setup(t, running("svc", api.Online, 100, "0"), running("train", api.Offline, 200, "0"), running("other", api.Offline, 201, "0"))
	now := time.Now()
	for i := range 40 {
		f.mon.set(0, monitor.Healthy, 20)
		f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) {
			r.Launches += 200
			r.OnlineWidth[0] = widthBP(10000)
		})
		f.writeUsage(t, "train", func(r *ctlblock.RawUsage) {
			r.Launches++
			switch i % 3 {
			case 0:
				r.MeasuredLaunch, r.GPUTimeNS, r.WideGPUTimeNS = math.MaxUint64, math.MaxUint64, math.MaxUint64
			case 1:
				r.MeasuredLaunch, r.GPUTimeNS, r.WideGPUTimeNS = 0, 0, math.MaxUint64
			default:
				r.MeasuredLaunch += 1 << 62
				r.GPUTimeNS = math.MaxUint64 - uint64(i)
				r.WideGPUTimeNS = uint64(i)
			}
		})
		f.writeUsage(t, "other", func(r *ctlblock.RawUsage) {
			r.Launches += 10
			r.MeasuredLaunch += 10
			r.GPUTimeNS += uint64(10 * 50 * time.Microsecond)
			r.WideGPUTimeNS += uint64(10 * 50 * time.Microsecond)
		})
		f.g.Step(context.Background(), now.Add(time.Duration(i)*100*time.Millisecond))
	}
	for _, r := range f.status(t, "GPU-a").KernelRisks {
		if r.ID != "train" {
			t.Errorf("a neighbour's hostile counters reported %+v", r)
		}
		if r.OfflineKernel < 0 || r.OfflineKernel > 10*time.Second || r.OfflineWide < 0 || r.OfflineWide > r.OfflineKernel {
			t.Errorf("hostile counters gave a kernel of %v", r.OfflineKernel)
		}
	}
}
