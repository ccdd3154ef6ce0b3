package calibration

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/muxflow/muxflow/gpusim/sim"
)

// TestShortCalibration replays the quick subset of the published points and
// fails when any is off by more than Tolerance. The machine's load can only
// delay the simulated processes, so a point that misses is played once more
// before it counts.
func TestShortCalibration(t *testing.T) {
	if testing.Short() {
		t.Skip("replays published measurements in real time")
	}
	var pts []Point
	for _, p := range Points() {
		if p.Short {
			pts = append(pts, p)
		}
	}
	if len(pts) < 5 {
		t.Fatalf("only %d points in the short subset", len(pts))
	}
	rs, err := Run(context.Background(), pts, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.OK() {
			continue
		}
		again, err := Run(context.Background(), []Point{r.Point}, nil)
		if err != nil {
			t.Fatal(err)
		}
		rs[i] = again[0]
	}
	var out bytes.Buffer
	if bad := WriteTable(&out, rs); bad > 0 {
		t.Errorf("%d points off by more than %.0f%%:\n%s", bad, 100*Tolerance, out.String())
	}
	t.Log("\n" + out.String())
}

// TestPointsAreWellFormed: every point names its source, has a published
// ratio, and its workloads are valid launches on its GPU.
func TestPointsAreWellFormed(t *testing.T) {
	ids := map[string]bool{}
	sources := map[string]bool{}
	for _, p := range Points() {
		if ids[p.ID] {
			t.Errorf("point %s twice", p.ID)
		}
		ids[p.ID] = true
		if p.Source == "" || p.Published <= 0 {
			t.Errorf("%s: source %q, published %v", p.ID, p.Source, p.Published)
		}
		sources[strings.SplitN(p.Source, " ", 2)[0]] = true
		if p.Metric == SMsGranted {
			continue
		}
		if p.Seconds <= 0 || len(p.Subject.Kernels) == 0 {
			t.Errorf("%s: no run to make", p.ID)
		}
		for _, w := range append([]Workload{p.Subject}, p.Others...) {
			if w.Arrival == Poisson && w.Rate <= 0 {
				t.Errorf("%s: %s has Poisson arrivals without a rate", p.ID, w.Name)
			}
			for _, k := range w.Kernels {
				if k.Grid <= 0 || k.Threads <= 0 || k.Threads > 1024 || k.BlockUs <= 0 || k.BW < 0 || k.BW > 1 {
					t.Errorf("%s: %s has a bad kernel %+v", p.ID, w.Name, k)
				}
			}
		}
	}
	if len(ids) < 8 || len(sources) < 3 {
		t.Errorf("%d points from %d sources; the calibration needs at least 8 from 3", len(ids), len(sources))
	}
}

// TestRatiosMoveWithTheModel guards against a runner that reports the
// published figure whatever happens: the same kernels give 1.00 alone beside
// nothing and about 2.00 when they cannot share SMs.
func TestRatiosMoveWithTheModel(t *testing.T) {
	h100, _ := sim.LookupProfile("h100")
	base := Point{ID: "x", GPU: h100, Sharing: Streams, Metric: MeanLatency, Lockstep: true, Published: 1, Seconds: 0.3}
	fit, full := base, base
	fit.Subject, fit.Others = sleepKernel(132), []Workload{sleepKernel(132)}
	full.Subject, full.Others = sleepKernel(264), []Workload{sleepKernel(264)}
	rs, err := Run(context.Background(), []Point{fit, full}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Ratio < 0.95 || rs[0].Ratio > 1.05 || rs[1].Ratio < 1.8 || rs[1].Ratio > 2.1 {
		t.Errorf("ratios %.2f and %.2f, want about 1 and 2", rs[0].Ratio, rs[1].Ratio)
	}
}
