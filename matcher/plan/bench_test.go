package plan

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/muxflow/muxflow/matcher/predict"
	"github.com/muxflow/muxflow/matcher/profile"
)

// clusterOf builds a synthetic cluster of n GPUs and m pending jobs (SyntheticCluster).
func clusterOf(n, m, services, kinds int, seed uint64) ([]profile.NodeReport, []Job) {
	c := NewSyntheticCluster(n, m, services, kinds, seed)
	return c.Reports, c.Jobs
}

// BenchmarkPlanRound is a whole planning round at cluster scale: constraints,
// predictions (analytic), candidate lists and the top-k solve.
func BenchmarkPlanRound(b *testing.B) {
	reports, jobs := clusterOf(20000, 20000, 300, 200, 1)
	for _, warm := range []bool{false, true} {
		b.Run(fmt.Sprintf("gpus=20000,jobs=20000,warm=%v", warm), func(b *testing.B) {
			p, err := NewPlanner(Config{Predictor: predict.Analytic{}, Mode: TopK})
			if err != nil {
				b.Fatal(err)
			}
			var pl *Plan
			if warm {
				if pl, err = p.Plan(reports, jobs); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				if pl, err = p.Plan(reports, jobs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(pl.Assignments)), "assigned")
			b.ReportMetric(pl.Stats.SolveSeconds, "solve-s")
		})
	}
}

// perturbed returns a copy of a round with frac of its GPUs running another service and
// frac of its jobs replaced by new ones: one round's churn.
func perturbed(reports []profile.NodeReport, jobs []Job, frac float64, seed uint64) ([]profile.NodeReport, []Job) {
	r := rand.New(rand.NewPCG(seed, 2))
	out, nj := CloneRound(reports, jobs)
	total := 0
	for _, rep := range out {
		total += len(rep.GPUs)
	}
	for range int(frac * float64(total)) {
		a := &out[r.IntN(len(out))].GPUs[r.IntN(8)]
		b := out[r.IntN(len(out))].GPUs[r.IntN(8)]
		a.Online, a.MemoryFreeMiB = b.Online, b.MemoryFreeMiB
	}
	for k := range int(frac * float64(len(jobs))) {
		nj[r.IntN(len(nj))] = Job{ID: fmt.Sprintf("batch/new%d", k), Profile: jobs[r.IntN(len(jobs))].Profile}
	}
	return out, nj
}

// BenchmarkReplan is a round after 1% of the GPUs and jobs changed: warm (the planner
// planned the round before) against cold (a fresh planner), on the same input.
func BenchmarkReplan(b *testing.B) {
	reports, jobs := clusterOf(20000, 20000, 300, 200, 1)
	reports2, jobs2 := perturbed(reports, jobs, 0.01, 1)
	for _, warm := range []bool{false, true} {
		b.Run(fmt.Sprintf("gpus=20000,jobs=20000,churn=1%%,warm=%v", warm), func(b *testing.B) {
			var pl *Plan
			for b.Loop() {
				b.StopTimer()
				p, err := NewPlanner(Config{Predictor: predict.Analytic{}, Mode: TopK})
				if err != nil {
					b.Fatal(err)
				}
				if warm {
					if _, err := p.Plan(reports, jobs); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				if pl, err = p.Plan(reports2, jobs2); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(pl.Assignments)), "assigned")
			b.ReportMetric(pl.Stats.TotalWeight, "weight")
			b.ReportMetric(float64(pl.Stats.Augmentations), "augmentations")
			b.ReportMetric(float64(pl.Stats.EdgesScanned), "edges-scanned")
		})
	}
}
