package plan

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/muxflow/muxflow/matcher/predict"
	"github.com/muxflow/muxflow/matcher/profile"
)

// rule is a transparent predictor: a job slows down by its partner's
// utilisation share.
type rule struct{}

func (rule) Name() string { return "rule" }
func (rule) Predict(a, b profile.Profile) float64 {
	return 1 - 0.8*b.GPUUtil/100*a.GPUUtil/100
}

func gpu(uuid, typ string, free float64, online *profile.Profile) profile.GPUReport {
	g := profile.GPUReport{UUID: uuid, Type: typ, MemoryTotalMiB: 80000, MemoryFreeMiB: free, Health: profile.Healthy}
	if online != nil {
		g.Online = &profile.Workload{ID: "svc/" + uuid, Profile: *online}
	}
	return g
}

func prof(util float64) *profile.Profile {
	return &profile.Profile{GPUUtil: util, MemBWUtil: util / 2, MemoryMiB: 1000}
}

func job(id string, util, mem float64, types ...string) Job {
	return Job{ID: id, Profile: *prof(util), MemoryMiB: mem, GPUTypes: types}
}

func TestPlanConstraints(t *testing.T) {
	sick := gpu("g-sick", "A100", 50000, prof(10))
	sick.Health = profile.Unhealthy
	unknown := gpu("g-unknown", "A100", 0, prof(10))
	unknown.MemoryTotalMiB = 0
	busy := gpu("g-busy", "A100", 50000, prof(10))
	busy.Offline = []profile.Workload{{ID: "batch/running", Profile: *prof(50)}}
	reports := []profile.NodeReport{
		{Node: profile.NodeInfo{Name: "n1"}, GPUs: []profile.GPUReport{sick, busy, unknown, gpu("g-small", "A100", 4000, prof(20))}},
		{Node: profile.NodeInfo{Name: "n2"}, GPUs: []profile.GPUReport{gpu("g-t4", "T4", 15000, prof(90)), gpu("g-big", "A100", 60000, prof(30))}},
	}
	jobs := []Job{
		job("batch/running", 50, 1000), // already placed: skipped
		job("batch/needs-t4", 40, 8000, "T4"),
		job("batch/huge", 40, 70000),
		job("batch/small", 40, 2000),
		job("batch/a100-only", 40, 10000, "A100"),
	}
	for _, mode := range []Mode{Exact, TopK} {
		t.Run(string(mode), func(t *testing.T) {
			p, err := NewPlanner(Config{Predictor: rule{}, Mode: mode, MinOnlineTput: 0.5})
			if err != nil {
				t.Fatal(err)
			}
			pl, err := p.Plan(reports, jobs)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, a := range pl.Assignments {
				got[a.Job] = a.Node + "/" + a.GPU
			}
			// small (2000 MiB) fits g-small or g-big; a100-only needs g-big
			// (10000 MiB): the matching must give g-big to a100-only.
			want := map[string]string{"batch/needs-t4": "n2/g-t4", "batch/a100-only": "n2/g-big", "batch/small": "n1/g-small"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("assignments (-want +got):\n%s", diff)
			}
			if pl.Unassigned["batch/huge"] != ReasonNoGPU {
				t.Errorf("huge job: reason %q, want %q", pl.Unassigned["batch/huge"], ReasonNoGPU)
			}
			if pl.Stats.Jobs != 4 || pl.Stats.GPUs != 6 || pl.Stats.EligibleGPUs != 3 {
				t.Errorf("stats %+v", pl.Stats)
			}
		})
	}
}

func TestPlanProtectsOnline(t *testing.T) {
	reports := []profile.NodeReport{{Node: profile.NodeInfo{Name: "n"}, GPUs: []profile.GPUReport{gpu("g", "H200", 80000, prof(100))}}}
	for _, mode := range []Mode{Exact, TopK} {
		t.Run(string(mode), func(t *testing.T) { testProtectsOnline(t, reports, mode) })
	}
}

func testProtectsOnline(t *testing.T, reports []profile.NodeReport, mode Mode) {
	p, err := NewPlanner(Config{Predictor: rule{}, MinOnlineTput: 0.5, Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	// rule: online keeps 1 - 0.8*util_job → a 100% job leaves it 0.2.
	pl, err := p.Plan(reports, []Job{job("b/heavy", 100, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if len(pl.Assignments) != 0 || pl.Unassigned["b/heavy"] != ReasonFloor {
		t.Fatalf("heavy job paired with a busy online GPU or wrong reason: %+v", pl)
	}
	pl, err = p.Plan(reports, []Job{job("b/light", 30, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if len(pl.Assignments) != 1 || math.Abs(pl.Assignments[0].OnlineTput-0.76) > 1e-9 {
		t.Fatalf("light job: %+v", pl.Assignments)
	}
}

// randomCluster builds n GPUs hosting a few online services and m jobs of a
// few kinds, as clusters look: many replicas, few distinct profiles.
func randomCluster(r *rand.Rand, n, m int) ([]profile.NodeReport, []Job) {
	services := []*profile.Profile{nil, prof(10), prof(35), prof(60), prof(85)}
	var reports []profile.NodeReport
	for i := 0; i < n; i += 8 {
		rep := profile.NodeReport{Node: profile.NodeInfo{Name: fmt.Sprintf("node-%d", i/8)}}
		for g := i; g < min(n, i+8); g++ {
			typ := []string{"A100", "H200"}[r.IntN(2)]
			rep.GPUs = append(rep.GPUs, gpu(fmt.Sprintf("GPU-%d", g), typ, float64(5000+r.IntN(40000)), services[r.IntN(len(services))]))
		}
		reports = append(reports, rep)
	}
	var jobs []Job
	for j := 0; j < m; j++ {
		var types []string
		if r.IntN(4) == 0 {
			types = []string{"H200"}
		}
		jobs = append(jobs, job(fmt.Sprintf("batch/j%d", j), float64(10*(1+r.IntN(9))), float64(1000*(1+r.IntN(30))), types...))
	}
	return reports, jobs
}

func TestTopKMatchesExactOnClusterShapes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 5; trial++ {
		reports, jobs := randomCluster(r, 200, 150+r.IntN(100))
		ex, _ := NewPlanner(Config{Predictor: rule{}, Mode: Exact})
		tk, _ := NewPlanner(Config{Predictor: rule{}, Mode: TopK, K: 64})
		a, err := ex.Plan(reports, jobs)
		if err != nil {
			t.Fatal(err)
		}
		b, err := tk.Plan(reports, jobs)
		if err != nil {
			t.Fatal(err)
		}
		if b.Stats.TotalWeight < 0.995*a.Stats.TotalWeight {
			t.Errorf("trial %d: top-k weight %.3f below 99.5%% of exact %.3f", trial, b.Stats.TotalWeight, a.Stats.TotalWeight)
		}
		// A second round warm-starts and must be as good as a cold one.
		c, err := tk.Plan(reports, jobs)
		if err != nil {
			t.Fatal(err)
		}
		if !c.Stats.WarmStart || math.Abs(c.Stats.TotalWeight-b.Stats.TotalWeight) > 1e-9*b.Stats.TotalWeight {
			t.Errorf("trial %d: warm round %+v vs cold %.6f", trial, c.Stats, b.Stats.TotalWeight)
		}
		if c.Generation != b.Generation+1 {
			t.Errorf("generation %d after %d", c.Generation, b.Generation)
		}
	}
}

func TestPlanRejectsBadInput(t *testing.T) {
	good := []profile.NodeReport{{Node: profile.NodeInfo{Name: "n"}, GPUs: []profile.GPUReport{gpu("g", "T4", 1000, nil)}}}
	tests := []struct {
		name    string
		reports []profile.NodeReport
		jobs    []Job
		want    string
	}{
		{"gpu on two nodes", append(good, profile.NodeReport{Node: profile.NodeInfo{Name: "m"}, GPUs: good[0].GPUs}), nil, "two nodes"},
		{"invalid report", []profile.NodeReport{{}}, nil, "without node name"},
		{"duplicate job", good, []Job{job("a/b", 1, 1), job("a/b", 1, 1)}, "listed twice"},
		{"job without id", good, []Job{{Profile: *prof(1)}}, "without id"},
		{"bad job profile", good, []Job{{ID: "x/y", Profile: profile.Profile{GPUUtil: 300}}}, "gpu_util"},
		{"negative memory", good, []Job{job("a/b", 1, -5)}, "memory_mib"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := NewPlanner(Config{Predictor: rule{}})
			_, err := p.Plan(tc.reports, tc.jobs)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, profile.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid containing %q", err, tc.want)
			}
		})
	}
	for _, cfg := range []Config{{}, {Predictor: rule{}, Mode: "fast"}, {Predictor: rule{}, K: -1}, {Predictor: predict.Analytic{}, OnlineWeight: -1}} {
		if _, err := NewPlanner(cfg); err == nil {
			t.Errorf("NewPlanner(%+v) accepted", cfg)
		}
	}
}

func TestPlanEmpty(t *testing.T) {
	p, _ := NewPlanner(Config{Predictor: predict.Analytic{}})
	pl, err := p.Plan(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &Plan{Generation: 1, Predictor: "analytic", Mode: Exact, Assignments: []Assignment{}, Unassigned: map[string]string{}}
	if diff := cmp.Diff(want, pl, cmpopts.IgnoreFields(Plan{}, "Time"), cmpopts.IgnoreFields(Stats{}, "SolveSeconds")); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestTopKListsHaveNoDuplicates(t *testing.T) {
	// Fewer GPUs than k: every list must still name each GPU at most once.
	reports, jobs := randomCluster(rand.New(rand.NewPCG(5, 6)), 10, 30)
	p, _ := NewPlanner(Config{Predictor: rule{}, Mode: TopK, K: 64})
	pl, err := p.Plan(reports, jobs)
	if err != nil {
		t.Fatal(err)
	}
	if pl.Stats.Edges > len(jobs)*pl.Stats.EligibleGPUs {
		t.Errorf("%d candidate edges for %d jobs × %d GPUs: lists repeat GPUs", pl.Stats.Edges, len(jobs), pl.Stats.EligibleGPUs)
	}
	ex, _ := NewPlanner(Config{Predictor: rule{}, Mode: Exact})
	want, err := ex.Plan(reports, jobs)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(pl.Stats.TotalWeight-want.Stats.TotalWeight) > 1e-9 {
		t.Errorf("top-k weight %v, exact %v: with every GPU listed they must agree", pl.Stats.TotalWeight, want.Stats.TotalWeight)
	}
}

func TestCoarseFirstRoundKeepsTheOptimum(t *testing.T) {
	defer func(old int) { coarseMin = old }(coarseMin)
	coarseMin = 32 // 1000 jobs: a coarse round of 250, itself started from one of 63
	reports, jobs := clusterOf(1000, 1000, 30, 20, 3)
	with, _ := NewPlanner(Config{Predictor: predict.Analytic{}, Mode: TopK})
	without, _ := NewPlanner(Config{Predictor: predict.Analytic{}, Mode: TopK})
	without.noCoarse = true
	a, err := with.Plan(reports, jobs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := without.Plan(reports, jobs)
	if err != nil {
		t.Fatal(err)
	}
	// Prices only change where the solve starts; the optimum over the same
	// candidate lists is the same.
	if !a.Stats.CoarseStart || b.Stats.CoarseStart {
		t.Fatalf("coarse start used: %v and %v, want true and false", a.Stats.CoarseStart, b.Stats.CoarseStart)
	}
	if len(a.Assignments) == 0 || math.Abs(a.Stats.TotalWeight-b.Stats.TotalWeight) > 1e-9*b.Stats.TotalWeight {
		t.Errorf("with coarse round %.9f (%d pairs), without %.9f (%d pairs)", a.Stats.TotalWeight, len(a.Assignments), b.Stats.TotalWeight, len(b.Assignments))
	}
}

// TestWarmReplan: re-planning an unchanged round keeps every pair without a search; after
// 1% of GPUs and jobs change, the warm plan reaches the cold plan's optimum.
func TestWarmReplan(t *testing.T) {
	reports, jobs := clusterOf(2000, 2000, 40, 30, 5)
	p, _ := NewPlanner(Config{Predictor: predict.Analytic{}, Mode: TopK})
	a, err := p.Plan(reports, jobs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Plan(reports, jobs)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Stats.WarmStart || b.Stats.Augmentations != 0 || !slices.Equal(a.Assignments, b.Assignments) {
		t.Errorf("same round again: warm %v, %d searches, same pairs %v; want warm, 0, true", b.Stats.WarmStart, b.Stats.Augmentations, slices.Equal(a.Assignments, b.Assignments))
	}
	reports2, jobs2 := perturbed(reports, jobs, 0.01, 5)
	warm, err := p.Plan(reports2, jobs2)
	if err != nil {
		t.Fatal(err)
	}
	fresh, _ := NewPlanner(Config{Predictor: predict.Analytic{}, Mode: TopK})
	cold, err := fresh.Plan(reports2, jobs2)
	if err != nil {
		t.Fatal(err)
	}
	if len(warm.Assignments) != len(cold.Assignments) || math.Abs(warm.Stats.TotalWeight-cold.Stats.TotalWeight) > 1e-9*cold.Stats.TotalWeight {
		t.Errorf("after 1%% churn: warm %.9f (%d pairs), cold %.9f (%d pairs)", warm.Stats.TotalWeight, len(warm.Assignments), cold.Stats.TotalWeight, len(cold.Assignments))
	}
}

// Issue 14: a job whose kernels are many times as long as the requests of a service whose
// kernels fill the GPU is never paired with it (no offline share keeps the service's requests from
// waiting for them), in either solver; it goes to a service whose kernels leave it room
// or are long enough, or stays pending with the floors' reason. AllowKernelRisk pairs it.
func TestPlanAvoidsKernelRisk(t *testing.T) {
	filling := &profile.Profile{GPUUtil: 20, MemBWUtil: 10, MemoryMiB: 1000, RequestUS: 240, WidthPct: 100}
	narrow := &profile.Profile{GPUUtil: 40, MemBWUtil: 10, MemoryMiB: 1000, RequestUS: 240, WidthPct: 30}
	long := &profile.Profile{GPUUtil: 40, MemBWUtil: 10, MemoryMiB: 1000, RequestUS: 4000, WidthPct: 100}
	longJob := Job{ID: "batch/long", Profile: profile.Profile{GPUUtil: 60, MemBWUtil: 20, MemoryMiB: 1000, KernelUS: 3000}}
	shortJob := Job{ID: "batch/short", Profile: profile.Profile{GPUUtil: 60, MemBWUtil: 20, MemoryMiB: 1000, KernelUS: 200}}
	node := func(gs ...profile.GPUReport) []profile.NodeReport {
		return []profile.NodeReport{{Node: profile.NodeInfo{Name: "n1"}, GPUs: gs}}
	}
	for _, mode := range []Mode{Exact, TopK} {
		for _, tc := range []struct {
			name    string
			reports []profile.NodeReport
			allow   bool
			want    map[string]string // job -> GPU ("" pending)
		}{
			{"the long job goes beside the narrow service, the short one beside the filling one",
				node(gpu("g-fill", "A100", 50000, filling), gpu("g-narrow", "A100", 50000, narrow)), false,
				map[string]string{"batch/long": "g-narrow", "batch/short": "g-fill"}},
			{"beside a service of long requests the long job is no risk",
				node(gpu("g-fill", "A100", 50000, filling), gpu("g-long", "A100", 50000, long)), false,
				map[string]string{"batch/long": "g-long", "batch/short": "g-fill"}},
			{"only filling services: the long job waits",
				node(gpu("g-fill", "A100", 50000, filling), gpu("g-fill2", "A100", 50000, filling)), false,
				map[string]string{"batch/long": "", "batch/short": "g-fill*"}},
			{"allowed: paired all the same",
				node(gpu("g-fill", "A100", 50000, filling), gpu("g-fill2", "A100", 50000, filling)), true,
				map[string]string{"batch/long": "g-fill*", "batch/short": "g-fill*"}},
		} {
			t.Run(fmt.Sprintf("%s/%s", mode, tc.name), func(t *testing.T) {
				p, err := NewPlanner(Config{Predictor: rule{}, Mode: mode, AllowKernelRisk: tc.allow})
				if err != nil {
					t.Fatal(err)
				}
				pl, err := p.Plan(tc.reports, []Job{longJob, shortJob})
				if err != nil {
					t.Fatal(err)
				}
				got := map[string]string{}
				for _, a := range pl.Assignments {
					got[a.Job] = a.GPU
				}
				for j, g := range tc.want {
					switch {
					case g == "" && got[j] != "":
						t.Errorf("%s placed on %s, want pending", j, got[j])
					case g == "" && pl.Unassigned[j] != ReasonFloor:
						t.Errorf("%s pending for %q, want %q", j, pl.Unassigned[j], ReasonFloor)
					case strings.HasSuffix(g, "*") && !strings.HasPrefix(got[j], strings.TrimSuffix(g, "*")):
						t.Errorf("%s on %q, want one of %s", j, got[j], g)
					case g != "" && !strings.HasSuffix(g, "*") && got[j] != g:
						t.Errorf("%s on %q, want %s", j, got[j], g)
					}
				}
			})
		}
	}
}
