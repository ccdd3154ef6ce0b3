package harness

import (
	"context"
	"math"
	"strconv"
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
// load rises, and online request p99 under muxflow is below plain MPS's.
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
	// A relative work directory, as `muxexp run --logs logs` gives it.
	t.Chdir(t.TempDir())
	r := &Runner{Scenario: s, Artifacts: art, Dir: "logs", NoOfflineBaseline: true}
	rep, err := r.Run(ctx, []Strategy{PlainMPS, Muxflow})
	if err != nil {
		t.Fatal(err)
	}
	mps, _ := rep.Result(PlainMPS)
	mux, _ := rep.Result(Muxflow)
	t.Logf("online request p50/p99 ms: mps %.2f/%.2f, muxflow %.2f/%.2f; GPU-side: mps %.2f/%.2f, muxflow %.2f/%.2f; util mps %.0f%%, muxflow %.0f%%",
		mps.ReqP50, mps.ReqP99, mux.ReqP50, mux.ReqP99, mps.GPUP50, mps.GPUP99, mux.GPUP50, mux.GPUP99, 100*mps.Util, 100*mux.Util)
	for _, x := range []Result{mps, mux} {
		if x.Errors != 0 || x.Evictions != 0 || x.Requests == 0 {
			t.Errorf("%s: %d errors, %d evictions, %d requests: %v", x.Strategy, x.Errors, x.Evictions, x.Requests, x.Notes)
		}
	}
	if !(mux.ReqP99 < mps.ReqP99) {
		t.Errorf("online request p99 under muxflow %.2f ms is not below plain MPS's %.2f ms", mux.ReqP99, mps.ReqP99)
	}
	for _, x := range []Result{mps, mux} {
		// Queueing only adds: a request's latency is at least its GPU time.
		if x.ReqP50 < x.GPUP50 || x.ReqP99 < x.GPUP99 {
			t.Errorf("%s: request p50/p99 %.2f/%.2f ms below GPU-side %.2f/%.2f ms", x.Strategy, x.ReqP50, x.ReqP99, x.GPUP50, x.GPUP99)
		}
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

// overloadScenario asks for twice what the GPU can serve: each request is two kernels
// of about 1 ms, so about 500 requests/s fit, and 1000/s arrive for 2 s. Requests queue
// behind each other, the backlog reaching about a second.
const overloadScenario = `
name = "overload"
gpu = "h100"
duration = "2s"
sample = "250ms"
[online]
rate = "constant"
max_qps = 1000
kernels = 2
kernel_us = 1000
[[offline]]
name = "unused"
`

// TestOverloadShowsInRequestLatency runs an overloaded online service alone: its
// GPU-side time per request stays near 2 ms, but its request latency — the primary
// figure — shows the backlog, and infer's per-request trace agrees with the queue
// rebuilt from its own arrivals and GPU times.
func TestOverloadShowsInRequestLatency(t *testing.T) {
	art, err := FindArtifacts()
	if err != nil {
		t.Fatalf("%v", err)
	}
	if !art.TraceSupported() {
		t.Fatalf("%s has no %s option", art.Infer, TraceFlag)
	}
	s, err := ParseScenario([]byte(overloadScenario))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := &Runner{Scenario: s, Artifacts: art, Dir: t.TempDir(), NoOfflineBaseline: true}
	rep, err := r.Run(ctx, []Strategy{OnlineAlone})
	if err != nil {
		t.Fatal(err)
	}
	x, _ := rep.Result(OnlineAlone)
	t.Logf("%d requests; request p50/p99 %.1f/%.1f ms, GPU-side %.2f/%.2f ms, host clock %.1f/%.1f ms",
		x.Requests, x.ReqP50, x.ReqP99, x.GPUP50, x.GPUP99, x.HostP50, x.HostP99)
	if x.Errors != 0 || x.Requests < 1500 || len(x.Trace) != x.Requests {
		t.Fatalf("%d errors, %d requests, %d traced: %v", x.Errors, x.Requests, len(x.Trace), x.Notes)
	}
	if x.GPUP99 > 10 {
		t.Errorf("GPU-side p99 %.2f ms: want the service's own time (about 2 ms), not its waits", x.GPUP99)
	}
	if x.ReqP99 < 300 || x.ReqP99 < 50*x.GPUP99 {
		t.Errorf("request p99 %.1f ms against GPU-side %.2f ms: the backlog does not show", x.ReqP99, x.GPUP99)
	}
	if row := rep.Rows()[0]; row[2] != strconv.FormatFloat(x.ReqP99, 'f', 2, 64) {
		t.Errorf("the table's p99 column %q is not the request p99 %.2f", row[2], x.ReqP99)
	}
	// infer's req_ms is the FIFO queue over its own arrivals and GPU times.
	want := requestLatencies(x.Trace)
	for i, q := range x.Trace {
		if math.Abs(q.ReqMs-want[i]) > 0.01 {
			t.Fatalf("request %d (arrival %v, GPU %.3f ms): req_ms %.3f, the rebuilt queue gives %.3f", i, q.Start, q.GPUMs, q.ReqMs, want[i])
		}
	}
	// The last requests waited behind the backlog; the first did not.
	if first, last := x.Trace[0], x.Trace[len(x.Trace)-1]; first.ReqMs > 10 || last.ReqMs < 300 {
		t.Errorf("first request %.1f ms, last %.1f ms: want no wait at first and a long one at the end", first.ReqMs, last.ReqMs)
	}
}
