package plan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/muxflow/muxflow/matcher/assign"
	"github.com/muxflow/muxflow/matcher/predict"
	"github.com/muxflow/muxflow/matcher/profile"
)

// churn applies one pattern of change to a copy of a round.
func churn(r *rand.Rand, pattern string, reports []profile.NodeReport, jobs []Job, svc []profile.Profile, round int) ([]profile.NodeReport, []Job) {
	reports, jobs = CloneRound(reports, jobs)
	n := 0
	for _, rep := range reports {
		n += len(rep.GPUs)
	}
	pick := func() *profile.GPUReport {
		for {
			rep := &reports[r.IntN(len(reports))]
			if len(rep.GPUs) > 0 {
				return &rep.GPUs[r.IntN(len(rep.GPUs))]
			}
		}
	}
	some := max(1, n/50)
	switch pattern {
	case "unchanged":
	case "gpus-removed":
		for range some {
			rep := &reports[r.IntN(len(reports))]
			if len(rep.GPUs) > 0 {
				k := r.IntN(len(rep.GPUs))
				rep.GPUs = slices.Delete(rep.GPUs, k, k+1)
			}
		}
		// A whole node goes too.
		k := r.IntN(len(reports))
		reports = slices.Delete(reports, k, k+1)
	case "gpus-added":
		for k := range some {
			rep := &reports[r.IntN(len(reports))]
			p := svc[r.IntN(len(svc))]
			rep.GPUs = append(rep.GPUs, profile.GPUReport{UUID: fmt.Sprintf("GPU-r%d-%d", round, k), Type: "H200", MemoryTotalMiB: 81920,
				MemoryFreeMiB: 81920 - p.MemoryMiB, Health: profile.Healthy, Online: &profile.Workload{ID: "svc", Profile: p}})
		}
	case "jobs-removed":
		for range max(1, len(jobs)/50) {
			k := r.IntN(len(jobs))
			jobs = slices.Delete(jobs, k, k+1)
		}
	case "jobs-added":
		for k := range max(1, len(jobs)/50) {
			j := jobs[r.IntN(len(jobs))]
			j.ID = fmt.Sprintf("batch/r%d-%d", round, k)
			if r.IntN(3) == 0 {
				j.GPUTypes = []string{"A100", "L40S"}[r.IntN(2):]
			}
			if r.IntN(3) == 0 {
				j.MemoryMiB = 1000 + 60000*r.Float64()
			}
			k := r.IntN(len(jobs) + 1)
			jobs = slices.Insert(jobs, k, j)
		}
	case "group-change":
		// Another online service, same free memory: only the group changes.
		for range some {
			g := pick()
			on := *g.Online
			on.Profile = svc[r.IntN(len(svc))]
			g.Online = &on
		}
	case "service-change":
		for range some {
			g := pick()
			p := svc[r.IntN(len(svc))]
			g.Online = &profile.Workload{ID: "svc", Profile: p}
			g.MemoryFreeMiB = 81920 - p.MemoryMiB
		}
	case "memory":
		// Free memory only (same group): fits change for the jobs whose need it crosses.
		for range 4 * some {
			pick().MemoryFreeMiB = 2000 + 40000*r.Float64()
		}
	case "type-change":
		rep := &reports[r.IntN(len(reports))]
		for k := range rep.GPUs {
			rep.GPUs[k].Type = "L40S"
		}
	case "mixed":
		for range some {
			g := pick()
			switch r.IntN(4) {
			case 0:
				g.Health = profile.Unhealthy
			case 1:
				g.Health = profile.Healthy
			case 2:
				g.MemoryFreeMiB = math.Max(0, g.MemoryFreeMiB-5000*r.Float64())
			case 3:
				// A pending job starts on this GPU: it is no longer offered,
				// and the job is no longer pending.
				j := jobs[r.IntN(len(jobs))]
				g.Offline = []profile.Workload{{ID: j.ID, Profile: j.Profile}}
			}
		}
		for range max(1, len(jobs)/100) {
			k := r.IntN(len(jobs))
			jobs[k].MemoryMiB = 1000 + 50000*r.Float64()
		}
	}
	return reports, jobs
}

// TestWarmReplanMatchesCold: after each of several kinds of change, and over a
// sequence of them, the warm planner builds the same candidate graph as a fresh one
// and reaches the same optimum.
func TestWarmReplanMatchesCold(t *testing.T) {
	patterns := []string{"unchanged", "service-change", "group-change", "gpus-removed", "jobs-removed", "unchanged",
		"gpus-added", "jobs-added", "memory", "type-change", "mixed", "memory", "mixed", "unchanged"}
	shapes := []struct {
		name                 string
		gpus, jobs, svc, knd int
	}{
		{"saturated", 1000, 1000, 30, 20},
		{"few-jobs", 2400, 300, 40, 15}, // depths hold a few groups: rings of their own
		{"few-gpus", 300, 900, 10, 12},
	}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			c := NewSyntheticCluster(sh.gpus, sh.jobs, sh.svc, sh.knd, 7)
			reports, jobs := c.Reports, c.Jobs
			r := rand.New(rand.NewPCG(3, uint64(sh.gpus)))
			warmP, _ := NewPlanner(Config{Predictor: predict.Analytic{}, Mode: TopK})
			if _, err := warmP.Plan(reports, jobs); err != nil {
				t.Fatal(err)
			}
			for round, pat := range patterns {
				reports, jobs = churn(r, pat, reports, jobs, c.Services, round)
				warm, err := warmP.Plan(reports, jobs)
				if err != nil {
					t.Fatal(err)
				}
				coldP, _ := NewPlanner(Config{Predictor: predict.Analytic{}, Mode: TopK})
				cold, err := coldP.Plan(reports, jobs)
				if err != nil {
					t.Fatal(err)
				}
				if !warm.Stats.WarmStart || warm.Stats.Edges != cold.Stats.Edges || len(warm.Assignments) != len(cold.Assignments) ||
					math.Abs(warm.Stats.TotalWeight-cold.Stats.TotalWeight) > 1e-9*math.Max(1, cold.Stats.TotalWeight) {
					t.Errorf("round %d (%s): warm %v, %d edges, %d pairs, %.9f; cold %d edges, %d pairs, %.9f", round, pat, warm.Stats.WarmStart,
						warm.Stats.Edges, len(warm.Assignments), warm.Stats.TotalWeight, cold.Stats.Edges, len(cold.Assignments), cold.Stats.TotalWeight)
				}
				if a, b := listsOf(warmP, jobs, reports), listsOf(coldP, jobs, reports); !slices.Equal(a, b) {
					for i := range min(len(a), len(b)) {
						if a[i] != b[i] {
							t.Errorf("round %d (%s): first differing list: warm %s, cold %s", round, pat, a[i], b[i])
							break
						}
					}
					t.Errorf("round %d (%s): candidate lists differ (%d and %d)", round, pat, len(a), len(b))
				}
				if len(warm.Unassigned) != len(cold.Unassigned) {
					t.Errorf("round %d (%s): %d unassigned warm, %d cold", round, pat, len(warm.Unassigned), len(cold.Unassigned))
				}
				for id, why := range cold.Unassigned {
					if why != ReasonOutbid && warm.Unassigned[id] != why {
						t.Errorf("round %d (%s): job %s warm %q, cold %q", round, pat, id, warm.Unassigned[id], why)
					}
				}
				if warm.Stats.WarmFallback {
					t.Errorf("round %d (%s): the warm start's repairs ran past their bound (%d repairs, %d searches)", round, pat, warm.Stats.Repairs, warm.Stats.Augmentations)
				}
				if pat == "unchanged" && warm.Stats.Augmentations != 0 {
					t.Errorf("round %d: unchanged round made %d searches", round, warm.Stats.Augmentations)
				}
			}
		})
	}
}

// listsOf is every pending job's candidate list as this round left it, GPUs by UUID.
func listsOf(p *Planner, jobs []Job, reports []profile.NodeReport) []string {
	running := map[string]bool{}
	for _, rep := range reports {
		for _, g := range rep.GPUs {
			for _, w := range g.Offline {
				running[w.ID] = true
			}
		}
	}
	uuid := map[*gpuState]string{}
	for u, st := range p.inc.gpus {
		uuid[st] = u
	}
	var out []string
	for _, j := range jobs {
		if running[j.ID] {
			continue
		}
		js := p.inc.jobs[j.ID]
		s := j.ID + ":"
		for _, c := range js.list {
			s += fmt.Sprintf(" %s/%.6f", uuid[p.inc.colGPU[c]], js.kind.gw[p.inc.colGroup[c]])
		}
		out = append(out, s)
	}
	return out
}

// TestWarmPricesFollowTheHolder: the warm start of a round moves the price of a GPU that
// changed service by its holder's change of weight (the holder keeps what it gained
// there), keeps the price of an unchanged held GPU, and starts a GPU whose holder left
// at 0.
func TestWarmPricesFollowTheHolder(t *testing.T) {
	c := NewSyntheticCluster(400, 400, 12, 8, 5)
	reports, jobs := c.Reports, c.Jobs
	p, _ := NewPlanner(Config{Predictor: predict.Analytic{}, Mode: TopK})
	if _, err := p.Plan(reports, jobs); err != nil {
		t.Fatal(err)
	}
	// Columns held last round, by the job holding them.
	type held struct {
		job   string
		uuid  string
		col   int32
		group int32
		price float64
	}
	var hs []held
	for id, js := range p.inc.jobs {
		if js.col < 0 {
			continue
		}
		st := p.inc.colGPU[js.col]
		for uuid, s := range p.inc.gpus {
			if s == st {
				hs = append(hs, held{id, uuid, js.col, st.group, p.inc.prices[js.col]})
			}
		}
	}
	slices.SortFunc(hs, func(a, b held) int { return cmpString(a.job, b.job) })
	if len(hs) < 3 {
		t.Fatalf("only %d jobs paired", len(hs))
	}
	moved, same, left := hs[0], hs[1], hs[2]
	// moved's GPU runs another service (same free memory, so the lists stay); left's
	// job goes away.
	reports, jobs = CloneRound(reports, jobs)
	var svc profile.Profile
	for _, rep := range reports {
		for gi := range rep.GPUs {
			g := &rep.GPUs[gi]
			if g.UUID != moved.uuid {
				continue
			}
			for _, s := range c.Services {
				if keyOf(s) != keyOf(g.Online.Profile) {
					svc = s
					break
				}
			}
			on := *g.Online
			on.Profile = svc
			g.Online = &on
		}
	}
	jobs = slices.DeleteFunc(jobs, func(j Job) bool { return j.ID == left.job })
	var warm []float64
	solveHook = func(_ *assign.Candidates, w *assign.Prices) { warm = slices.Clone(w.Col) }
	defer func() { solveHook = nil }()
	if _, err := p.Plan(reports, jobs); err != nil {
		t.Fatal(err)
	}
	k := p.inc.jobs[moved.job].kind
	newGroup := p.inc.colGroup[moved.col]
	if newGroup == moved.group {
		t.Fatal("the GPU did not change group")
	}
	want := math.Max(0, moved.price+k.gw[newGroup]-k.gw[moved.group])
	if math.IsInf(k.gw[newGroup], -1) {
		t.Skip("the new service rules the job out; pick another seed")
	}
	if got := warm[moved.col]; math.Abs(got-want) > 1e-12 {
		t.Errorf("changed GPU: warm price %v, want %v (was %v, weight %v -> %v)", got, want, moved.price, k.gw[moved.group], k.gw[newGroup])
	}
	if got := warm[same.col]; got != same.price {
		t.Errorf("unchanged held GPU: warm price %v, want %v", got, same.price)
	}
	if got := warm[left.col]; got != 0 {
		t.Errorf("GPU whose job left: warm price %v, want 0", got)
	}
}
