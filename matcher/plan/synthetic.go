package plan

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/muxflow/muxflow/matcher/profile"
)

// SyntheticCluster is a reproducible stand-in for a large cluster, for benchmarks and
// tests of the planner: n GPUs (8 per node, one node type each) running `services`
// distinct online services, and m pending jobs of `kinds` distinct profiles.
type SyntheticCluster struct {
	Reports []profile.NodeReport
	Jobs    []Job
	// Services and Kinds are the profiles the GPUs and jobs were drawn from (to make
	// churn of the same kind).
	Services, Kinds []profile.Profile
}

// NewSyntheticCluster draws a SyntheticCluster from seed.
func NewSyntheticCluster(n, m, services, kinds int, seed uint64) SyntheticCluster {
	r := rand.New(rand.NewPCG(seed, 1))
	svc := make([]profile.Profile, services)
	for i := range svc {
		svc[i] = profile.Profile{GPUUtil: 5 + 60*r.Float64(), MemBWUtil: 40 * r.Float64(), MemoryMiB: 2000 + 30000*r.Float64()}
	}
	var reports []profile.NodeReport
	for i := 0; i < n; i += 8 {
		rep := profile.NodeReport{Node: profile.NodeInfo{Name: fmt.Sprintf("node-%d", i/8)}}
		typ := []string{"A100", "H200", "L40S"}[r.IntN(3)]
		for g := i; g < min(n, i+8); g++ {
			p := svc[r.IntN(services)]
			rep.GPUs = append(rep.GPUs, profile.GPUReport{UUID: fmt.Sprintf("GPU-%d", g), Type: typ, MemoryTotalMiB: 81920,
				MemoryFreeMiB: 81920 - p.MemoryMiB, Health: profile.Healthy, Online: &profile.Workload{ID: "svc", Profile: p}})
		}
		reports = append(reports, rep)
	}
	kind := make([]profile.Profile, kinds)
	for i := range kind {
		kind[i] = profile.Profile{GPUUtil: 20 + 80*r.Float64(), MemBWUtil: 70 * r.Float64(), MemoryMiB: 2000 + 40000*r.Float64(), BatchSize: 32 << r.IntN(3)}
	}
	jobs := make([]Job, m)
	for j := range jobs {
		jobs[j] = Job{ID: fmt.Sprintf("batch/j%d", j), Profile: kind[r.IntN(kinds)]}
	}
	return SyntheticCluster{Reports: reports, Jobs: jobs, Services: svc, Kinds: kind}
}

// CloneRound copies a round's reports (each node's GPU list too) and jobs, so that
// churn can edit the copy and leave the round it came from as it was.
func CloneRound(reports []profile.NodeReport, jobs []Job) ([]profile.NodeReport, []Job) {
	out := make([]profile.NodeReport, len(reports))
	for i, rep := range reports {
		out[i] = rep
		out[i].GPUs = slices.Clone(rep.GPUs)
	}
	return out, slices.Clone(jobs)
}
