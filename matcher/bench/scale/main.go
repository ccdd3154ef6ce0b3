// Command scale measures the scalable (top-k candidate) matching mode: its
// time at cluster scale (20,000 offline jobs × 20,000 GPUs by default), its
// weight against the exact dense optimum where that can be computed, and the
// effect of warm-starting a round from the previous round's prices.
// `make -C matcher bench` runs it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/muxflow/muxflow/matcher/assign"
	"github.com/muxflow/muxflow/matcher/bench/measure"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	n := fs.Int("n", 20000, "jobs and GPUs at cluster scale")
	k := fs.Int("k", 64, "candidates per job")
	exactSizes := fs.String("exact-sizes", "2000,4096", "sizes where the exact dense optimum is computed for comparison")
	reps := fs.Int("reps", 3, "timed repetitions at cluster scale (median reported)")
	maxSeconds := fs.Float64("max-seconds", 2, "fail when the cluster-scale median CPU time exceeds this")
	minRatio := fs.Float64("min-ratio", 0.995, "fail when top-k weight / exact optimum falls below this")
	strict := fs.Bool("strict", false, "exit with an error when a target is missed (else only report it)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	failed := false
	for _, f := range strings.Split(*exactSizes, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		m, err := strconv.Atoi(f)
		if err != nil || m <= 0 {
			return fmt.Errorf("size %q is not a positive integer", f)
		}
		w := uniform(rand.New(rand.NewPCG(7, uint64(m))), m*m)
		var d assign.Dense
		t0 := time.Now()
		exact, err := d.MaxWeightMatching(w, m, m)
		if err != nil {
			return fmt.Errorf("exact n=%d: %w", m, err)
		}
		exactS := time.Since(t0).Seconds()
		g := topK(w, m, m, *k)
		var s assign.Sparse
		t0 = time.Now()
		sp, err := s.MaxWeightMatching(g, nil)
		if err != nil {
			return fmt.Errorf("top-%d n=%d: %w", *k, m, err)
		}
		spS := time.Since(t0).Seconds()
		ratio := sp.Total / exact.Total
		fmt.Printf("n=%d exact %.6f in %.3fs; top-%d %.6f in %.3fs; ratio %.6f\n", m, exact.Total, exactS, *k, sp.Total, spS, ratio)
		if ratio < *minRatio {
			failed = true
		}
	}

	// Cluster scale: the dense matrix (3.2 GB) is never held; rows are drawn,
	// reduced to candidates, and folded into row and column maxima whose
	// smaller sum bounds the exact optimum from above.
	r := rand.New(rand.NewPCG(9, uint64(*n)))
	row := make([]float64, *n)
	colMax := make([]float64, *n)
	rowMaxSum := 0.0
	g := &assign.Candidates{Rows: *n, Cols: *n, Start: make([]int, 1, *n+1)}
	for i := 0; i < *n; i++ {
		rm := 0.0
		for j := range row {
			x := r.Float64()
			row[j] = x
			rm = math.Max(rm, x)
			if x > colMax[j] {
				colMax[j] = x
			}
		}
		rowMaxSum += rm
		before := len(g.Col)
		g.Col = assign.TopK(g.Col, row, *k)
		for _, j := range g.Col[before:] {
			g.Weight = append(g.Weight, row[j])
		}
		g.Start = append(g.Start, len(g.Col))
	}
	colMaxSum := 0.0
	for _, x := range colMax {
		colMaxSum += x
	}
	bound := math.Min(rowMaxSum, colMaxSum)
	var s assign.Sparse
	var times, cpus []float64
	var m assign.Matching
	for rep := 0; rep < *reps; rep++ {
		t0, c0 := time.Now(), measure.CPUSeconds()
		var err error
		m, err = s.MaxWeightMatching(g, nil)
		if err != nil {
			return fmt.Errorf("cluster scale: %w", err)
		}
		times = append(times, time.Since(t0).Seconds())
		cpus = append(cpus, measure.CPUSeconds()-c0)
	}
	med := measure.Median(times)
	matched := 0
	for _, j := range m.RowCol {
		if j >= 0 {
			matched++
		}
	}
	fmt.Printf("n=%d top-%d: median %.3fs wall (%.3fs CPU) over %d runs %v; weight %.3f, matched %d, ≥ %.6f of the exact optimum (upper bound %.3f)\n",
		*n, *k, med, measure.Median(cpus), *reps, fmtTimes(times), m.Total, matched, m.Total/bound, bound)
	if load := measure.LoadAverage(); load != "" {
		fmt.Printf("load average during the run: %s (wall time on a shared machine; CPU time is the steadier figure)\n", load)
	}
	// CPU time decides, as in scipycompare: on a shared machine the wall
	// clock measures the neighbours as much as the solver.
	if measure.Median(cpus) > *maxSeconds || m.Total/bound < *minRatio {
		failed = true
	}

	// Next round: 5% of jobs leave and are replaced by new ones; the rest keep
	// their candidates and predictions (the predictor is deterministic and
	// their profiles have not changed).
	g2 := perturb(g, r, *k, 0.05)
	t0 := time.Now()
	cold, err := s.MaxWeightMatching(g2, nil)
	if err != nil {
		return err
	}
	coldS := time.Since(t0).Seconds()
	t0 = time.Now()
	warm, err := s.MaxWeightMatching(g2, &m.Prices)
	if err != nil {
		return err
	}
	warmS := time.Since(t0).Seconds()
	fmt.Printf("next round (5%% of jobs replaced): cold %.3fs (%d searches), warm %.3fs (%d searches), speed-up %.2f×, same weight: %v\n",
		coldS, cold.Augmentations, warmS, warm.Augmentations, coldS/warmS, math.Abs(cold.Total-warm.Total) <= 1e-9*cold.Total)
	if math.Abs(cold.Total-warm.Total) > 1e-9*cold.Total {
		failed = true
	}
	if failed {
		if !*strict {
			fmt.Println("TARGET MISSED (see above)")
			return nil
		}
		return errors.New("a target was missed (see above)")
	}
	return nil
}

func uniform(r *rand.Rand, n int) []float64 {
	w := make([]float64, n)
	for k := range w {
		w[k] = r.Float64()
	}
	return w
}

func topK(w []float64, rows, cols, k int) *assign.Candidates {
	g := &assign.Candidates{Rows: rows, Cols: cols, Start: make([]int, 1, rows+1)}
	for i := 0; i < rows; i++ {
		row := w[i*cols : (i+1)*cols]
		before := len(g.Col)
		g.Col = assign.TopK(g.Col, row, k)
		for _, j := range g.Col[before:] {
			g.Weight = append(g.Weight, row[j])
		}
		g.Start = append(g.Start, len(g.Col))
	}
	return g
}

func perturb(g *assign.Candidates, r *rand.Rand, k int, share float64) *assign.Candidates {
	out := &assign.Candidates{Rows: g.Rows, Cols: g.Cols, Start: make([]int, 1, g.Rows+1)}
	for i := 0; i < g.Rows; i++ {
		if r.Float64() < share {
			seen := map[int32]bool{}
			for len(seen) < k {
				j := int32(r.IntN(g.Cols))
				if !seen[j] {
					seen[j] = true
					out.Col = append(out.Col, j)
					out.Weight = append(out.Weight, 1-r.Float64()*float64(k)/float64(g.Cols))
				}
			}
		} else {
			for e := g.Start[i]; e < g.Start[i+1]; e++ {
				out.Col = append(out.Col, g.Col[e])
				out.Weight = append(out.Weight, g.Weight[e])
			}
		}
		out.Start = append(out.Start, len(out.Col))
	}
	return out
}

func fmtTimes(x []float64) string {
	parts := make([]string, len(x))
	for i, v := range x {
		parts[i] = strconv.FormatFloat(v, 'f', 3, 64)
	}
	return "[" + strings.Join(parts, " ") + "]"
}
