// Command bench measures muxflow's own overhead (issue 19) and prints each figure next
// to its baseline, measured in the same run:
//
//   - muxd: CPU share and RSS on a gpusim node of 8 H100s at 10 Hz sampling, idle, with
//     16 containers per GPU and with 1,000 containers; the baseline is a muxd built from
//     an older revision (-base-muxd), run interleaved with the current one on the same
//     simulator settings; gpusimd's own CPU is shown beside it, and the floor (floor.go:
//     a process that only wakes ten times a second for a round trip to another) with it.
//     Each is measured twice: free to run on any CPU, and with muxd and gpusimd pinned to
//     one (-placements), because a VM charges a wake-up that crosses virtual CPUs to the
//     process woken;
//   - NVML calls per GPU per sample, counted through a wrapper around gpusim's NVML
//     adapter, for the monitor's schedule against sampling everything every period;
//   - GPU container start: muxflow-runtime against plain runc on the same bundle
//     (see tests/bench/start.sh);
//   - muxmatch: warm re-plan of 20k × 20k top-64 after 1% of jobs and GPUs change,
//     against a cold solve of the same problem.
//
// Run it with `make bench` or `go run ./tests/bench` after `make build`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/muxflow/muxflow/gpusim/simclient"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	if floorMain(os.Args[1:]) {
		return nil
	}
	only := flag.String("only", "muxd,nvml,plan", "comma-separated parts to run: muxd, nvml, plan")
	baseMuxd := flag.String("base-muxd", "", "a muxd binary of the baseline revision (empty: no baseline muxd rows)")
	window := flag.Duration("window", 10*time.Second, "CPU measurement window per repetition")
	reps := flag.Int("reps", 3, "repetitions (the median is reported)")
	nodes := flag.String("nodes", "idle,8x16,1000", "comma-separated muxd rows to run: idle (8 GPUs, no containers), 8x16, 1000 (1 GPU, 1,000 containers)")
	placements := flag.String("placements", "all,0", "comma-separated placements of muxd and gpusimd for the muxd rows: all (any CPU) or a CPU number to pin both to")
	hold := flag.Int("hold", -1, "start muxd on 8 GPUs with this many containers, print its pid and keep it for -window (for profiling)")
	flag.Parse()
	ctx := context.Background()
	b, err := simclient.Build()
	if err != nil {
		return err
	}
	if *hold >= 0 {
		r, err := startMuxd(ctx, filepath.Join(b, "bin", "muxd"), "h100x8")
		if err != nil {
			return err
		}
		defer r.stop()
		t0 := time.Now()
		if err := r.addContainers(ctx, 0, *hold, 8); err != nil {
			return err
		}
		fmt.Printf("registered %d in %v; muxd pid %d\n", *hold, time.Since(t0), r.cmd.Process.Pid)
		time.Sleep(*window)
		return nil
	}
	parts := strings.Split(*only, ",")
	if slices.Contains(parts, "nvml") {
		if err := benchNVML(ctx); err != nil {
			return err
		}
	}
	if slices.Contains(parts, "muxd") {
		cpus, err := parsePlacements(*placements)
		if err != nil {
			return err
		}
		if err := benchMuxd(ctx, filepath.Join(b, "bin", "muxd"), *baseMuxd, *window, *reps, cpus, strings.Split(*nodes, ",")); err != nil {
			return err
		}
	}
	if slices.Contains(parts, "plan") {
		if err := benchPlan(*reps); err != nil {
			return err
		}
	}
	return nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func fmtAll(xs []float64, f string) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprintf(f, x))
	}
	return strings.Join(parts, " ")
}

// findPID returns the pid of the process whose command line contains all of words.
func findPID(words ...string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		s := string(b)
		ok := true
		for _, w := range words {
			if !strings.Contains(s, w) {
				ok = false
				break
			}
		}
		if ok {
			return pid
		}
	}
	return 0
}

type muxdFigures struct {
	cpu, simCPU []float64
	rss         float64
}

// parsePlacements reads -placements: "all" is -1 (no pinning), a number a CPU.
func parsePlacements(s string) ([]int, error) {
	var cpus []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "all" {
			cpus = append(cpus, -1)
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("-placements: %q is neither \"all\" nor a CPU number", f)
		}
		cpus = append(cpus, n)
	}
	return cpus, nil
}

func placementName(cpu int) string {
	if cpu < 0 {
		return "any CPU"
	}
	return "CPU " + strconv.Itoa(cpu)
}

// measureMuxd runs one muxd with n containers (8 GPUs unless gpus says otherwise), muxd
// and its gpusimd pinned to cpu unless it is negative, and measures it once.
func measureMuxd(ctx context.Context, bin, gpus string, ngpu, n int, window time.Duration, cpu int) (muxdFigures, error) {
	var f muxdFigures
	r, err := startMuxd(ctx, bin, gpus)
	if err != nil {
		return f, err
	}
	defer r.stop()
	sim := findPID("gpusimd", r.sim.Socket)
	if sim == 0 {
		return f, fmt.Errorf("gpusimd serving %s not found in /proc", r.sim.Socket)
	}
	for _, pid := range []int{r.cmd.Process.Pid, sim} {
		if err := pin(pid, cpu); err != nil {
			return f, err
		}
	}
	if err := r.addContainers(ctx, 0, n, ngpu); err != nil {
		return f, err
	}
	time.Sleep(time.Second) // let the guard see every container
	pct, err := cpuPercent(window, r.cmd.Process.Pid, sim)
	if err != nil {
		return f, err
	}
	f.cpu, f.simCPU = []float64{pct[0]}, []float64{pct[1]}
	f.rss = rssMiB(r.cmd.Process.Pid)
	return f, nil
}

func benchMuxd(ctx context.Context, bin, base string, window time.Duration, reps int, cpus []int, nodes []string) error {
	type cfg struct {
		key, name string
		gpus      string
		ngpu, n   int
	}
	var cfgs []cfg
	for _, c := range []cfg{
		{"idle", "8 GPUs, no containers", "h100x8", 8, 0},
		{"8x16", "8 GPUs x 16 containers", "h100x8", 8, 128},
		{"1000", "1 GPU, 1,000 containers", "h100", 1, 1000},
	} {
		if slices.Contains(nodes, c.key) {
			cfgs = append(cfgs, c)
		}
	}
	if len(cfgs) == 0 {
		return fmt.Errorf("-nodes %q names none of idle, 8x16, 1000", strings.Join(nodes, ","))
	}
	bins := []string{bin}
	names := []string{"muxd"}
	if base != "" {
		bins = append(bins, base)
		names = append(names, "baseline")
	}
	fmt.Printf("\n== muxd overhead: gpusim node, 10 Hz sampling; %d × %v windows, medians (target ≤ 1%% of a core at 8×16; RSS ≤ 30 MiB at 8×16, ≤ 40 MiB at 1,000)\n", reps, window)
	fmt.Printf("%-26s %-9s %-8s %10s %10s %12s   %s\n", "node", "binary", "placed", "CPU %core", "RSS MiB", "gpusimd CPU", "CPU runs")
	for _, cpu := range cpus {
		var floor []float64
		for range reps {
			pct, err := measureFloor(cpu, window)
			if err != nil {
				return fmt.Errorf("floor, %s: %w", placementName(cpu), err)
			}
			floor = append(floor, pct)
		}
		fmt.Printf("%-26s %-9s %-8s %9.2f%% %10s %12s   %s\n", "10 Hz wake + round trip", "floor", placementName(cpu), median(floor), "-", "-", fmtAll(floor, "%.2f"))
		for _, c := range cfgs {
			res := make([]muxdFigures, len(bins))
			for range reps {
				// Interleaved: the current and the baseline muxd take turns.
				for i, b := range bins {
					f, err := measureMuxd(ctx, b, c.gpus, c.ngpu, c.n, window, cpu)
					if err != nil {
						return fmt.Errorf("%s, %s, %s: %w", c.name, names[i], placementName(cpu), err)
					}
					res[i].cpu = append(res[i].cpu, f.cpu...)
					res[i].simCPU = append(res[i].simCPU, f.simCPU...)
					res[i].rss = max(res[i].rss, f.rss)
				}
			}
			for i := range bins {
				fmt.Printf("%-26s %-9s %-8s %9.2f%% %10.1f %11.2f%%   %s\n", c.name, names[i], placementName(cpu), median(res[i].cpu), res[i].rss, median(res[i].simCPU), fmtAll(res[i].cpu, "%.2f"))
			}
		}
	}
	return nil
}
