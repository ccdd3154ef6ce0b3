package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/muxflow/muxflow/matcher/plan"
	"github.com/muxflow/muxflow/matcher/predict"
	"github.com/muxflow/muxflow/matcher/profile"
)

// cluster is matcher/plan's synthetic cluster (the one its benchmark plans).
func cluster(n, m, services, kinds int, seed uint64) ([]profile.NodeReport, []plan.Job, []profile.Profile, []profile.Profile) {
	c := plan.NewSyntheticCluster(n, m, services, kinds, seed)
	return c.Reports, c.Jobs, c.Services, c.Kinds
}

// perturb changes frac of the GPUs (another online service) and replaces frac of the
// jobs (new ids, other profiles): one round's worth of churn.
func perturb(reports []profile.NodeReport, jobs []plan.Job, svc, kind []profile.Profile, frac float64, seed uint64) ([]profile.NodeReport, []plan.Job) {
	r := rand.New(rand.NewPCG(seed, 2))
	out, nj := plan.CloneRound(reports, jobs)
	total := 0
	for _, rep := range out {
		total += len(rep.GPUs)
	}
	for range int(frac * float64(total)) {
		rep := &out[r.IntN(len(out))]
		g := &rep.GPUs[r.IntN(len(rep.GPUs))]
		p := svc[r.IntN(len(svc))]
		g.Online = &profile.Workload{ID: "svc", Profile: p}
		g.MemoryFreeMiB = 81920 - p.MemoryMiB
	}
	for k := range int(frac * float64(len(jobs))) {
		nj[r.IntN(len(nj))] = plan.Job{ID: fmt.Sprintf("batch/new%d", k), Profile: kind[r.IntN(len(kind))]}
	}
	// Replacing may hit the same slot twice: ids stay unique because each new id is.
	return out, nj
}

// cpuSeconds is this process's user+system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func benchPlan(reps int) error {
	const n = 20000
	fmt.Printf("\n== muxmatch re-plan: %d GPUs × %d jobs, top-64, analytic predictor, after 1%% of GPUs and jobs change; %d runs, medians (target warm ≤ 0.1 s CPU, same optimum as cold)\n", n, n, reps)
	fmt.Printf("%-6s %10s %10s %9s %14s\n", "solve", "CPU s", "wall s", "assigned", "total weight")
	var cold, warm, coldWall, warmWall, again, againWall []float64
	var lastCold, lastWarm *plan.Plan
	same := true
	var searches, scanned []string
	for rep := range reps {
		reports, jobs, svc, kind := cluster(n, n, 300, 200, uint64(rep+1))
		reports2, jobs2 := perturb(reports, jobs, svc, kind, 0.01, uint64(rep+1))
		cfg := plan.Config{Predictor: predict.Analytic{}, Mode: plan.TopK}
		// Warm: a planner that planned the previous round.
		pw, err := plan.NewPlanner(cfg)
		if err != nil {
			return err
		}
		if _, err := pw.Plan(reports, jobs); err != nil {
			return err
		}
		runtime.GC() // the rounds before leave no collection for this one to pay
		c0, t0 := cpuSeconds(), time.Now()
		w, err := pw.Plan(reports2, jobs2)
		if err != nil {
			return err
		}
		warm, warmWall = append(warm, cpuSeconds()-c0), append(warmWall, time.Since(t0).Seconds())
		// The same round once more: nothing changed.
		runtime.GC()
		c0, t0 = cpuSeconds(), time.Now()
		a, err := pw.Plan(reports2, jobs2)
		if err != nil {
			return err
		}
		again, againWall = append(again, cpuSeconds()-c0), append(againWall, time.Since(t0).Seconds())
		// Cold: a fresh planner on the same (changed) round.
		pc, err := plan.NewPlanner(cfg)
		if err != nil {
			return err
		}
		runtime.GC()
		c0, t0 = cpuSeconds(), time.Now()
		c, err := pc.Plan(reports2, jobs2)
		if err != nil {
			return err
		}
		cold, coldWall = append(cold, cpuSeconds()-c0), append(coldWall, time.Since(t0).Seconds())
		for _, x := range []*plan.Plan{w, a} {
			if len(c.Assignments) != len(x.Assignments) || math.Abs(c.Stats.TotalWeight-x.Stats.TotalWeight) > 1e-9*math.Max(1, c.Stats.TotalWeight) {
				same = false
			}
		}
		searches = append(searches, fmt.Sprintf("%d/%d/%d", w.Stats.Augmentations, a.Stats.Augmentations, c.Stats.Augmentations))
		scanned = append(scanned, fmt.Sprintf("%.1fM", float64(w.Stats.EdgesScanned)/1e6))
		lastCold, lastWarm = c, w
	}
	fmt.Printf("%-6s %10.3f %10.3f %9d %14.4f\n", "cold", median(cold), median(coldWall), len(lastCold.Assignments), lastCold.Stats.TotalWeight)
	fmt.Printf("%-6s %10.3f %10.3f %9d %14.4f\n", "warm", median(warm), median(warmWall), len(lastWarm.Assignments), lastWarm.Stats.TotalWeight)
	fmt.Printf("%-6s %10.3f %10.3f   (warm again, nothing changed)\n", "again", median(again), median(againWall))
	fmt.Printf("warm/cold CPU %.3f×; same optimum as cold (1e-9 relative, warm and again) in every run: %v\n", median(warm)/median(cold), same)
	fmt.Printf("searches warm/again/cold per run: %s; edges the warm searches scanned: %s; warm CPU per run: %s\n",
		strings.Join(searches, " "), strings.Join(scanned, " "), fmtSecs(warm))
	return nil
}

func fmtSecs(xs []float64) string {
	var b []string
	for _, x := range xs {
		b = append(b, fmt.Sprintf("%.3f", x))
	}
	return strings.Join(b, " ")
}
