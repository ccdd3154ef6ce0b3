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
// delay the simulated processes (three MPS clients that wait for the CPU overlap
// less: on the 2-core VM nos_mps_3 read 1.45-1.53 of a published 1.86 in
// consecutive runs, on the edge of the tolerance, and 1.47 beside the other
// packages' tests), so a point that misses is played up to twice more before it
// counts, and make test runs this package on its own.
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
	for i := range rs {
		for try := 0; try < 2 && !rs[i].OK(); try++ {
			again, err := Run(context.Background(), []Point{rs[i].Point}, nil)
			if err != nil {
				t.Fatal(err)
			}
			rs[i] = again[0]
		}
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

func TestOnRealGPU(t *testing.T) {
	orig := Points()
	pts, err := OnRealGPU("h200", orig)
	if err != nil {
		t.Fatal(err)
	}
	if len(pts) != len(realH200) {
		t.Fatalf("%d points replayed, want the %d measured", len(pts), len(realH200))
	}
	byID := map[string]Point{}
	for _, p := range pts {
		byID[p.ID] = p
		if p.GPU.SMs != 132 || p.Published != realH200[p.ID] {
			t.Errorf("%s: GPU %d SMs, reference %v; want 132 and %v", p.ID, p.GPU.SMs, p.Published, realH200[p.ID])
		}
	}
	// ResNet's convolution is three waves of eight blocks per SM: resized to
	// the H200's SMs; BERT's 216-block GEMM is not a whole number of waves.
	conv := byID["tally_bert_resnet_mps_p99"].Others[0].Kernels[0]
	if conv.Grid != 132*8*3 {
		t.Errorf("ResNet convolution grid %d on the H200, want %d", conv.Grid, 132*8*3)
	}
	if g := byID["tally_bert_resnet_mps_p99"].Subject.Kernels[0].Grid; g != 216 {
		t.Errorf("BERT GEMM grid %d, want it unchanged at 216", g)
	}
	if orig[9].ID != "tally_bert_resnet_mps_p99" || orig[9].Others[0].Kernels[0].Grid != 108*8*3 {
		t.Error("OnRealGPU changed the published points' kernels")
	}
	if _, err := OnRealGPU("t4", Points()); err == nil || !strings.Contains(err.Error(), "h200") {
		t.Errorf("unknown GPU: err %v, want one naming the GPUs measured", err)
	}
	if _, err := OnRealGPU("h200", Points()[:0]); err == nil {
		t.Error("no points: no error")
	}
}
