package harness

import (
	"context"
	"testing"
	"time"
)

// BenchmarkDiurnal runs the shipped diurnal scenario (shortened to 20 s a run) under
// every strategy and reports the targets as metrics: muxflow's online request
// p99 (arrival to completion, queueing included) ÷ online-alone (target ≤ 1.10),
// offline normalised throughput (≥ 0.5) and GPU utilisation ÷ online-alone (≥ 2.5),
// with the baselines' p99 ratios and muxflow's GPU-side p99 ratio beside them.
func BenchmarkDiurnal(b *testing.B) {
	art, err := FindArtifacts()
	if err != nil {
		b.Fatalf("%v", err)
	}
	s, err := LoadScenario("../scenarios/diurnal.toml")
	if err != nil {
		b.Fatal(err)
	}
	if s, err = s.WithDuration(20 * time.Second); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		r := &Runner{Scenario: s, Artifacts: art, Dir: b.TempDir()}
		rep, err := r.Run(context.Background(), Strategies)
		if err != nil {
			b.Fatal(err)
		}
		base, _ := rep.Result(OnlineAlone)
		mux, _ := rep.Result(Muxflow)
		if base.ReqP99 <= 0 || base.GPUP99 <= 0 || base.Util <= 0 {
			b.Fatalf("online-alone measured nothing: %+v", base)
		}
		b.ReportMetric(mux.ReqP99/base.ReqP99, "muxflow-p99/alone")
		b.ReportMetric(mux.GPUP99/base.GPUP99, "muxflow-gpu-p99/alone")
		b.ReportMetric(mux.OfflineNorm, "muxflow-offline-norm")
		b.ReportMetric(mux.Util/base.Util, "muxflow-util/alone")
		for _, st := range []Strategy{TimeSharing, PlainMPS, StaticShare} {
			if x, ok := rep.Result(st); ok && x.Skipped == "" {
				b.ReportMetric(x.ReqP99/base.ReqP99, string(st)+"-p99/alone")
			}
		}
	}
}
