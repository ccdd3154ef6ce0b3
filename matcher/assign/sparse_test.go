package assign

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// denseToCandidates keeps the finite cells of a weight matrix as candidates.
func denseToCandidates(w []float64, rows, cols int) *Candidates {
	g := &Candidates{Rows: rows, Cols: cols, Start: []int{0}}
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			if x := w[i*cols+j]; !math.IsInf(x, -1) {
				g.Col = append(g.Col, int32(j))
				g.Weight = append(g.Weight, x)
			}
		}
		g.Start = append(g.Start, len(g.Col))
	}
	return g
}

func checkMatching(t *testing.T, g *Candidates, m Matching) {
	t.Helper()
	used := map[int]bool{}
	sum := 0.0
	for i, j := range m.RowCol {
		if j < 0 {
			continue
		}
		best := math.Inf(-1)
		for k := g.Start[i]; k < g.Start[i+1]; k++ {
			if int(g.Col[k]) == j {
				best = math.Max(best, g.Weight[k])
			}
		}
		if used[j] || best <= 0 {
			t.Fatalf("row %d: column %d reused or not a useful candidate (%v)", i, j, best)
		}
		used[j] = true
		sum += best
	}
	if math.Abs(sum-m.Total) > 1e-9*math.Max(1, sum) {
		t.Fatalf("Total %v but pairs sum to %v", m.Total, sum)
	}
	// The prices must certify optimality (complementary slackness): every
	// job gets at least the best profit any candidate offers at these
	// prices, prices are non-negative and unassigned GPUs are free.
	p := m.Prices.Col
	for j, x := range p {
		if x < -1e-9 || !used[j] && x > 1e-9 {
			t.Fatalf("GPU %d (used %v) has price %v", j, used[j], x)
		}
	}
	for i, j := range m.RowCol {
		profit := 0.0
		for k := g.Start[i]; k < g.Start[i+1]; k++ {
			if int(g.Col[k]) == j && g.Weight[k] > 0 {
				profit = math.Max(profit, g.Weight[k]-p[j])
			}
		}
		if j < 0 {
			profit = 0
		}
		for k := g.Start[i]; k < g.Start[i+1]; k++ {
			if w := g.Weight[k]; w > 0 && w-p[g.Col[k]] > profit+1e-9 {
				t.Fatalf("job %d (on %d, profit %v) would rather take %d (profit %v)", i, j, profit, g.Col[k], w-p[g.Col[k]])
			}
		}
	}
}

func TestSparseMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	var s Sparse
	repairs := 0
	defer func() {
		// Nonsense warm prices leave priced GPUs unassigned: the repair
		// path must have been exercised, or this test proves little.
		if repairs == 0 {
			t.Error("no solve needed a warm-start repair")
		}
	}()
	for trial := 0; trial < 3000; trial++ {
		rows, cols := 1+r.IntN(6), 1+r.IntN(6)
		w := randomMatrix(r, rows, cols, []float64{0, 0.3, 0.6, 1}[trial%4], math.Inf(-1))
		g := denseToCandidates(w, rows, cols)
		want := bruteMatching(w, rows, cols)
		var warm *Prices
		switch trial % 3 {
		case 1:
			s.augmentOnly = true
		case 2:
			// Any prices are a valid start, even nonsense ones.
			warm = &Prices{Col: make([]float64, cols)}
			for j := range warm.Col {
				warm.Col[j] = float64(r.IntN(9) - 2)
			}
		}
		m, err := s.MaxWeightMatching(g, warm)
		s.augmentOnly = false
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		repairs += m.Repairs
		checkMatching(t, g, m)
		if m.Total != want {
			t.Fatalf("trial %d (%d×%d, mode %d): total %v, brute force %v\n%v", trial, rows, cols, trial%3, m.Total, want, w)
		}
	}
}

func TestSparseMatchesDenseAndWarmStarts(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	var s Sparse
	var d Dense
	for trial := 0; trial < 60; trial++ {
		rows, cols := 20+r.IntN(100), 20+r.IntN(100)
		k := 1 + r.IntN(12)
		w := make([]float64, rows*cols)
		for x := range w {
			w[x] = math.Inf(-1)
		}
		for i := 0; i < rows; i++ {
			for c := 0; c < k; c++ {
				w[i*cols+r.IntN(cols)] = math.Round(r.Float64()*1000) / 1000
			}
		}
		g := denseToCandidates(w, rows, cols)
		want, err := d.MaxWeightMatching(w, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		s.augmentOnly = trial%2 == 0
		cold, err := s.MaxWeightMatching(g, nil)
		s.augmentOnly = false
		if err != nil {
			t.Fatal(err)
		}
		checkMatching(t, g, cold)
		if math.Abs(cold.Total-want.Total) > 1e-9*want.Total {
			t.Fatalf("trial %d: sparse %v, dense %v", trial, cold.Total, want.Total)
		}
		// Perturb a tenth of the weights, then warm-start from the old prices.
		for x := range w {
			if !math.IsInf(w[x], -1) && r.IntN(10) == 0 {
				w[x] = r.Float64()
			}
		}
		g = denseToCandidates(w, rows, cols)
		want, err = d.MaxWeightMatching(w, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		warm, err := s.MaxWeightMatching(g, &cold.Prices)
		if err != nil {
			t.Fatal(err)
		}
		checkMatching(t, g, warm)
		if math.Abs(warm.Total-want.Total) > 1e-9*want.Total {
			t.Fatalf("trial %d warm: sparse %v, dense %v", trial, warm.Total, want.Total)
		}
	}
}

func TestSparseRejectsBadInput(t *testing.T) {
	var s Sparse
	good := func() *Candidates {
		return &Candidates{Rows: 2, Cols: 2, Start: []int{0, 1, 2}, Col: []int32{0, 1}, Weight: []float64{1, 2}}
	}
	tests := []struct {
		name   string
		mutate func(*Candidates)
		warm   *Prices
	}{
		{"short offsets", func(g *Candidates) { g.Start = g.Start[:2] }, nil},
		{"offsets not from zero", func(g *Candidates) { g.Start[0] = 1 }, nil},
		{"backwards offsets", func(g *Candidates) { g.Start = []int{0, 2, 1}; g.Col = g.Col[:1]; g.Weight = g.Weight[:1] }, nil},
		{"column out of range", func(g *Candidates) { g.Col[1] = 2 }, nil},
		{"negative column", func(g *Candidates) { g.Col[0] = -1 }, nil},
		{"NaN weight", func(g *Candidates) { g.Weight[0] = math.NaN() }, nil},
		{"weights missing", func(g *Candidates) { g.Weight = g.Weight[:1] }, nil},
		{"warm prices wrong size", func(*Candidates) {}, &Prices{Col: []float64{0}}},
		{"warm columns wrong size", func(*Candidates) {}, &Prices{Col: []float64{0, 0}, RowCol: []int32{0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := good()
			tc.mutate(g)
			if _, err := s.MaxWeightMatching(g, tc.warm); !errors.Is(err, ErrBadInput) {
				t.Fatalf("err = %v, want ErrBadInput", err)
			}
		})
	}
}

// TestSparseWarmKeepsEarlierColumns: re-solving the same problem from the earlier prices
// and columns needs no search, and keeps every assignment; a warm start with earlier
// columns after a change still reaches the optimum.
func TestSparseWarmKeepsEarlierColumns(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	var s Sparse
	var d Dense
	for trial := 0; trial < 40; trial++ {
		rows, cols := 30+r.IntN(80), 30+r.IntN(80)
		w := make([]float64, rows*cols)
		for x := range w {
			w[x] = math.Inf(-1)
		}
		// Few distinct weights: the plateaus replicas make.
		for i := 0; i < rows; i++ {
			for c := 0; c < 8; c++ {
				w[i*cols+r.IntN(cols)] = float64(1+r.IntN(4)) / 4
			}
		}
		g := denseToCandidates(w, rows, cols)
		cold, err := s.MaxWeightMatching(g, nil)
		if err != nil {
			t.Fatal(err)
		}
		warm := Prices{Col: cold.Prices.Col, RowCol: make([]int32, rows)}
		for i, c := range cold.RowCol {
			warm.RowCol[i] = int32(c)
		}
		again, err := s.MaxWeightMatching(g, &warm)
		if err != nil {
			t.Fatal(err)
		}
		if again.Augmentations != 0 || !slices.Equal(again.RowCol, cold.RowCol) {
			t.Fatalf("trial %d: re-solve made %d searches, same matching %v", trial, again.Augmentations, slices.Equal(again.RowCol, cold.RowCol))
		}
		for x := range w {
			if !math.IsInf(w[x], -1) && r.IntN(20) == 0 {
				w[x] = float64(1+r.IntN(4)) / 4
			}
		}
		g = denseToCandidates(w, rows, cols)
		want, err := d.MaxWeightMatching(w, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.MaxWeightMatching(g, &warm)
		if err != nil {
			t.Fatal(err)
		}
		checkMatching(t, g, got)
		if math.Abs(got.Total-want.Total) > 1e-9*want.Total {
			t.Fatalf("trial %d after a change: warm %v, dense %v", trial, got.Total, want.Total)
		}
	}
}
