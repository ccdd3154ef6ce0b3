package harness

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/muxflow/muxflow/gpusim/sim"
)

// Random scenarios (`muxexp gen`): the shipped scenarios and the probes were each written
// to exercise one thing, and muxflow was tuned on them; scenarios drawn at random over the
// axes the evaluation names (GPU, online kernel width, length and count, rate shape,
// memory bandwidth, copies; one to four offline jobs of any kernel length, width,
// bandwidth, batch copy and CUDA graph) find the workloads nobody thought to write. Each
// draw depends only on (seed, index), so `muxexp gen --seed S` makes the same files on
// every machine and a finding can be re-run by name.

// RandomScenario returns the TOML text of scenario index of the sweep with this seed.
// The online service alone takes 5-50% of the GPU's time at its peak (kernels × kernel
// time × peak rate, capped at 1,000 requests/s), the range where the evaluation's
// offline-throughput target applies.
func RandomScenario(seed uint64, index int) string {
	r := rand.New(rand.NewPCG(seed, uint64(index)))
	pick := func(vs ...float64) float64 { return vs[r.IntN(len(vs))] }
	gpus := []string{"t4", "a100", "h100", "h200"}
	gpu := gpus[r.IntN(len(gpus))]
	p, err := sim.LookupProfile(gpu)
	if err != nil {
		panic(err) // the list above names built-in profiles only
	}
	var b strings.Builder
	name := fmt.Sprintf("rand-%d-%03d", seed, index)

	// The online service.
	threads := int(pick(64, 128, 256, 256, 512, 1024))
	perSM := min(p.MaxThreadsPerSM/threads, p.MaxBlocksPerSM)
	width := pick(0.05, 0.15, 0.3, 0.5, 0.75, 1, 1)
	grid := max(1, int(float64(p.SMs*perSM)*width))
	kernels := int(pick(1, 2, 3, 4, 6, 8, 12, 24))
	kernelUS := pick(10, 20, 40, 80, 150, 300, 600, 1200, 3000)
	alone := 0.05 + 0.45*r.Float64()
	maxQPS := math.Round(math.Min(1000, math.Max(2, alone/(float64(kernels)*kernelUS*1e-6))))
	rate := []string{"constant", "diurnal", "bursty"}[r.IntN(3)]
	bw := pick(0.05, 0.2, 0.4, 0.6, 0.8)
	var io string
	if r.Float64() < 0.25 && maxQPS <= 400 {
		io = fmt.Sprintf("%.0fKiB", pick(64, 1024, 8192))
	}
	share := float64(kernels) * kernelUS * 1e-6 * maxQPS
	var jobs []string
	var shape strings.Builder
	nJobs := int(pick(1, 1, 1, 2, 2, 3, 4))
	memGiB := float64(p.MemoryBytes) / (1 << 30)
	for j := 0; j < nJobs; j++ {
		var o strings.Builder
		jk, jus := int(pick(1, 4, 10, 30, 100)), pick(15, 50, 200, 500, 1000, 3000)
		big, jbw := pick(0, 0.2, 0.5, 1), pick(0.1, 0.3, 0.5, 0.7, 0.9)
		mem := max(1, int(memGiB*(0.02+0.18*r.Float64())))
		fmt.Fprintf(&o, "[[offline]]\nname = \"j%d\"\nkernels = %d\nkernel_us = %g\nbig_share = %g\nbw = %g\nmem = \"%dGiB\"\n", j, jk, jus, big, jbw, mem)
		fmt.Fprintf(&shape, "; j%d: %d × %g µs kernels, %.0f%% GPU-filling, bw %g", j, jk, jus, 100*big, jbw)
		if r.Float64() < 0.2 {
			batch := int(pick(1, 8, 32))
			fmt.Fprintf(&o, "batch = \"%dMiB\"\n", batch)
			fmt.Fprintf(&shape, ", %d MiB batch", batch)
		}
		if r.Float64() < 0.2 {
			o.WriteString("graph = true\n")
			shape.WriteString(", CUDA graph")
		}
		jobs = append(jobs, o.String())
	}

	fmt.Fprintf(&b, "# Drawn by `muxexp gen --seed %d` (index %d): see tests/scenarios/README.md, *Random scenarios*.\n", seed, index)
	fmt.Fprintf(&b, "name = %q\n", name)
	fmt.Fprintf(&b, "description = \"\"\"\n%s: %s requests of %d × %g µs kernels of %d × %d threads (they hold %.0f%% of the SMs), bw %g, alone %.0f%% of the GPU at %g req/s%s\n\"\"\"\n",
		gpu, rate, kernels, kernelUS, grid, threads, 100*math.Min(1, float64(grid)/float64(p.SMs*perSM)), bw, 100*share, maxQPS, shape.String())
	fmt.Fprintf(&b, "gpu = %q\nduration = \"40s\"\ndays = 1\n[online]\nrate = %q\n", gpu, rate)
	switch rate {
	case "bursty":
		fmt.Fprintf(&b, "min_qps = %g\nmax_qps = %g\nburst_on = \"%gms\"\nburst_every = \"%gs\"\n",
			math.Max(1, math.Round(maxQPS/pick(3, 5, 10))), maxQPS, pick(60, 150, 400, 1000), pick(1, 2, 4))
	case "diurnal":
		fmt.Fprintf(&b, "min_qps = %g\nmax_qps = %g\n", math.Max(1, math.Round(maxQPS/pick(4, 10))), maxQPS)
	default:
		fmt.Fprintf(&b, "min_qps = %g\nmax_qps = %g\n", maxQPS, maxQPS)
	}
	fmt.Fprintf(&b, "kernels = %d\nkernel_us = %g\ngrid = %d\nthreads = %d\nbw = %g\n", kernels, kernelUS, grid, threads, bw)
	if io != "" {
		fmt.Fprintf(&b, "io_bytes = %q\n", io)
	}
	fmt.Fprintf(&b, "seed = %d\n", seed*1000+uint64(index))
	for _, j := range jobs {
		b.WriteString(j)
	}
	return b.String()
}
