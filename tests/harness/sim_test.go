package harness

import (
	"context"
	"math"
	"testing"
	"time"
)

// simScenario is short and shaped so that the outcome does not hang on this machine's
// noise: the load climbs from a trough to a peak of 50% of the GPU's time, and the
// offline job's long GPU-filling blocks make an uncapped MPS neighbour delay every
// online kernel by their drain time, which muxflow's SM cap for offline work avoids.
const simScenario = `
name = "sim-test"
gpu = "h100"
duration = "14s"
days = 1
sample = "250ms"
[online]
rate = "diurnal"
min_qps = 20
max_qps = 500
kernels = 4
kernel_us = 250
grid = 264
bw = 0.3
[[offline]]
name = "train"
kernels = 6
kernel_us = 2000
big_share = 1
bw = 0.4
mem = "1GiB"
[muxflow]
offline_sm_max = "70%"
`

// TestMuxflowOnGpusim runs plain MPS and muxflow (real muxd, libxcuda and MPS on
// gpusim) and checks the qualitative outcome: the offline share falls as the online
// load rises, and online p99 under muxflow is below plain MPS's.
func TestMuxflowOnGpusim(t *testing.T) {
	art, err := FindArtifacts()
	if err != nil {
		t.Fatalf("%v", err)
	}
	s, err := ParseScenario([]byte(simScenario))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r := &Runner{Scenario: s, Artifacts: art, Dir: t.TempDir(), NoOfflineBaseline: true}
	rep, err := r.Run(ctx, []Strategy{PlainMPS, Muxflow})
	if err != nil {
		t.Fatal(err)
	}
	mps, _ := rep.Result(PlainMPS)
	mux, _ := rep.Result(Muxflow)
	t.Logf("online GPU p50/p99 ms: mps %.2f/%.2f, muxflow %.2f/%.2f; util mps %.0f%%, muxflow %.0f%%",
		mps.GPUP50, mps.GPUP99, mux.GPUP50, mux.GPUP99, 100*mps.Util, 100*mux.Util)
	for _, x := range []Result{mps, mux} {
		if x.Errors != 0 || x.Evictions != 0 || x.Requests == 0 {
			t.Errorf("%s: %d errors, %d evictions, %d requests: %v", x.Strategy, x.Errors, x.Evictions, x.Requests, x.Notes)
		}
	}
	if !(mux.GPUP99 < mps.GPUP99) {
		t.Errorf("online p99 under muxflow %.2f ms is not below plain MPS's %.2f ms", mux.GPUP99, mps.GPUP99)
	}
	if mux.Util < 0.4 {
		t.Errorf("muxflow kept the GPU only %.0f%% busy: the offline job hardly ran", 100*mux.Util)
	}

	// The share at the trough of the load against the share around the peak.
	low, high := meanWhere(mux.Samples, s, 0, 0.2), meanWhere(mux.Samples, s, 0.8, 1)
	t.Logf("offline share: %.0f%% at low load, %.0f%% at high load", low, high)
	if math.IsNaN(low) || math.IsNaN(high) {
		t.Fatalf("no muxd samples at low or high load: %+v", mux.Samples)
	}
	if low-high < 15 {
		t.Errorf("offline share %.0f%% at low load and %.0f%% at high load: want it to fall by at least 15 points", low, high)
	}
}

// meanWhere averages muxd's offline share over samples whose nominal load is within
// [lo, hi] of the trace's range.
func meanWhere(ss []Sample, s *Scenario, lo, hi float64) float64 {
	var sum float64
	var n int
	span := s.Online.MaxQPS - s.Online.MinQPS
	for _, x := range ss {
		f := (s.RateAt(x.T) - s.Online.MinQPS) / span
		if f >= lo && f <= hi && !math.IsNaN(x.OfflineShare) {
			sum += x.OfflineShare
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}
