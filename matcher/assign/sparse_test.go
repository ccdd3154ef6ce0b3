package assign

import (
	"errors"
	"fmt"
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
		if m.FellBack {
			t.Fatalf("trial %d: the warm start's repairs ran past their bound", trial)
		}
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
		warm := Prices{Col: cold.Prices.Col, RowCol: pairsOf(cold)}
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

// replicaWeights draws a sparse problem shaped like a planner round: rows of a few
// kinds, columns of a few groups, each row holding k random columns at its kind's
// weight for their group. The weights are decimals (not exact in binary), so prices
// summed over many searches drift by rounding, as they do round after round.
func replicaWeights(r *rand.Rand, rows, cols, k int, base []float64, groups int, kind, group []int) []float64 {
	w := make([]float64, rows*cols)
	for x := range w {
		w[x] = math.Inf(-1)
	}
	for i := 0; i < rows; i++ {
		for range k {
			j := r.IntN(cols)
			w[i*cols+j] = base[kind[i]*groups+group[j]]
		}
	}
	return w
}

// replicaShape draws a replica-like problem's shape: a base weight per (job kind, GPU
// group), lo plus a multiple of 1/1000 below steps/1000, and each job's kind and each
// GPU's group.
func replicaShape(r *rand.Rand, rows, cols, kinds, groups int, lo float64, steps int) (base []float64, kind, group []int) {
	base = make([]float64, kinds*groups)
	for x := range base {
		base[x] = lo + float64(r.IntN(steps))/1000
	}
	kind, group = make([]int, rows), make([]int, cols)
	for i := range kind {
		kind[i] = r.IntN(kinds)
	}
	for j := range group {
		group[j] = r.IntN(groups)
	}
	return base, kind, group
}

// TestSparseWarmLowersStalePrices: when jobs leave, the GPUs they held keep a price no
// one pays; the warm start lowers it (to what the jobs that stay would pay at most) and
// the answer is still the optimum, every round of a chain of re-solves.
func TestSparseWarmLowersStalePrices(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	var s Sparse
	var d Dense
	lowered := 0
	for trial := 0; trial < 40; trial++ {
		rows, cols := 30+r.IntN(50), 30+r.IntN(50)
		kinds, groups := 1+r.IntN(4), 1+r.IntN(5)
		base, kind, group := replicaShape(r, rows, cols, kinds, groups, 0.5, 500)
		w := replicaWeights(r, rows, cols, 8, base, groups, kind, group)
		g := denseToCandidates(w, rows, cols)
		prev, err := s.MaxWeightMatching(g, nil)
		if err != nil {
			t.Fatal(err)
		}
		for round := 0; round < 5; round++ {
			// A sixth of the rows leave and as many new ones come; the GPUs the
			// leavers held keep their price, raised further for good measure.
			var w2 []float64
			var hint []int32
			held := make([]bool, cols)
			left := make([]bool, cols)
			for i := 0; i < rows; i++ {
				if r.IntN(6) == 0 {
					if c := prev.RowCol[i]; c >= 0 {
						left[c] = true
					}
					kind[i] = r.IntN(kinds)
					row := replicaWeights(r, 1, cols, 8, base, groups, kind[i:i+1], group)
					w2 = append(w2, row...)
					hint = append(hint, -1)
					continue
				}
				w2 = append(w2, w[i*cols:(i+1)*cols]...)
				hint = append(hint, int32(prev.RowCol[i]))
				if c := prev.RowCol[i]; c >= 0 {
					held[c] = true
				}
			}
			warm := Prices{Col: slices.Clone(prev.Prices.Col), RowCol: hint}
			for j := range warm.Col {
				if left[j] && !held[j] {
					warm.Col[j] += 0.25
				}
			}
			s.lowered = 0
			got := warmAgainstDense(t, &s, &d, w2, rows, cols, &warm, fmt.Sprintf("trial %d round %d", trial, round))
			lowered += s.lowered
			w, prev = w2, got
		}
	}
	if lowered == 0 {
		t.Error("no warm start lowered a price: the test proves little")
	}
}

// TestSparseWarmChainOnPlateaus: a long chain of warm re-solves of a replica-shaped
// problem, each from the prices and pairs of the one before (so rounding accumulates
// in the prices as it does between planner rounds), with rows replaced and columns
// moved to other groups every round: every answer is the optimum, the prices certify
// it, and re-solving an unchanged problem makes no search at all.
func TestSparseWarmChainOnPlateaus(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	var s Sparse
	var d Dense
	const rows, cols, kinds, groups = 120, 110, 6, 5
	base, kind, group := replicaShape(r, rows, cols, kinds, groups, 0.3, 700)
	lists := make([][]int, rows)
	for i := range lists {
		for range 10 {
			lists[i] = append(lists[i], r.IntN(cols))
		}
	}
	weights := func() []float64 {
		w := make([]float64, rows*cols)
		for x := range w {
			w[x] = math.Inf(-1)
		}
		for i, l := range lists {
			for _, j := range l {
				w[i*cols+j] = base[kind[i]*groups+group[j]]
			}
		}
		return w
	}
	w := weights()
	prev, err := s.MaxWeightMatching(denseToCandidates(w, rows, cols), nil)
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 60; round++ {
		hint := pairsOf(prev)
		if round%10 != 9 {
			for range 3 {
				i := r.IntN(rows)
				kind[i], hint[i] = r.IntN(kinds), -1
				lists[i] = lists[i][:0]
				for range 10 {
					lists[i] = append(lists[i], r.IntN(cols))
				}
			}
			for range 3 {
				group[r.IntN(cols)] = r.IntN(groups)
			}
		}
		w = weights()
		got := warmAgainstDense(t, &s, &d, w, rows, cols, &Prices{Col: prev.Prices.Col, RowCol: hint}, fmt.Sprintf("round %d", round))
		if round%10 == 9 && (got.Augmentations != 0 || got.Scanned != 0) {
			t.Fatalf("round %d: unchanged problem made %d searches over %d edges", round, got.Augmentations, got.Scanned)
		}
		prev = got
	}
}

// TestSparseRepairsInOneRound: far more GPUs than jobs, and a warm start that prices
// every GPU: most end free, each priced one is let fall to 0 by one backward search, the
// repairs never run into their bound, and the answer is the optimum.
func TestSparseRepairsInOneRound(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 52))
	var s Sparse
	var d Dense
	repairs := 0
	for trial := 0; trial < 50; trial++ {
		rows, cols := 10+r.IntN(40), 60+r.IntN(120)
		w := make([]float64, rows*cols)
		for x := range w {
			w[x] = math.Inf(-1)
		}
		for i := 0; i < rows; i++ {
			for range 1 + r.IntN(10) {
				w[i*cols+r.IntN(cols)] = float64(1+r.IntN(9)) / 10
			}
		}
		g := denseToCandidates(w, rows, cols)
		warm := &Prices{Col: make([]float64, cols), RowCol: make([]int32, rows)}
		for j := range warm.Col {
			warm.Col[j] = r.Float64()
		}
		for i := range warm.RowCol {
			warm.RowCol[i] = int32(r.IntN(cols+1) - 1)
		}
		got, err := s.MaxWeightMatching(g, warm)
		if err != nil {
			t.Fatal(err)
		}
		if got.FellBack {
			t.Fatalf("trial %d: repairs ran past their bound (%d repairs)", trial, got.Repairs)
		}
		repairs += got.Repairs
		checkMatching(t, g, got)
		want, err := d.MaxWeightMatching(w, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(got.Total-want.Total) > 1e-9*math.Max(1, want.Total) {
			t.Fatalf("trial %d: warm %.12f, dense %.12f", trial, got.Total, want.Total)
		}
	}
	if repairs == 0 {
		t.Error("no solve needed a repair: the test proves little")
	}
}

// TestSparseColdPricesAreLeast: a cold solve returns the least prices that certify its
// pairs: every priced GPU is worth exactly its price to some job other than its holder
// (else its price alone could fall), and the prices still certify the optimum.
func TestSparseColdPricesAreLeast(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	var s Sparse
	for trial := 0; trial < 200; trial++ {
		rows, cols := 5+r.IntN(60), 5+r.IntN(60)
		w := randomMatrix(r, rows, cols, 0.7, math.Inf(-1))
		g := denseToCandidates(w, rows, cols)
		m, err := s.MaxWeightMatching(g, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkMatching(t, g, m)
		profit := make([]float64, rows)
		holder := make([]int, cols)
		for j := range holder {
			holder[j] = -1
		}
		for i, j := range m.RowCol {
			if j >= 0 {
				holder[j] = i
				profit[i] = w[i*cols+j] - m.Prices.Col[j]
			}
		}
		for j, p := range m.Prices.Col {
			if p <= 1e-9 {
				continue
			}
			tight := false
			for i := 0; i < rows; i++ {
				if x := w[i*cols+j]; i != holder[j] && x > 0 && !math.IsInf(x, -1) && profit[i] <= x-p+1e-9 {
					tight = true
				}
			}
			if !tight {
				t.Fatalf("trial %d: GPU %d priced %v, but no other job would pay that", trial, j, p)
			}
		}
	}
}

// TestSparseClustersKeepTheOptimum: warm re-solves of replica-shaped problems with few
// distinct weights (large plateaus of equal reduced cost), with clusters made from
// plateaus of 4 to 16 columns already, so that searches settle clusters (several at
// once), relax their boundaries, find ways through them and sometimes none: every
// answer is the optimum and the prices (each column's own, the clusters dissolved)
// certify it. (A search that found no way through one cluster once forgot the boundary
// columns it had taken from the others' heaps; this failed then.)
func TestSparseClustersKeepTheOptimum(t *testing.T) {
	r := rand.New(rand.NewPCG(71, 72))
	var s Sparse
	var d Dense
	for trial := 0; trial < 48; trial++ {
		s.clusterAt = []int{8, 4, 16, 2}[trial%4]
		// A sixth of the trials find no way through any cluster: each such search
		// starts again without it.
		s.k.noWay = trial%6 == 5
		rows, cols := 150+r.IntN(100), 150+r.IntN(100)
		kinds, groups := 2+r.IntN(3), 2+r.IntN(3)
		base, kind, group := replicaShape(r, rows, cols, kinds, groups, 0.5, 4)
		w := replicaWeights(r, rows, cols, 12, base, groups, kind, group)
		prev, err := s.MaxWeightMatching(denseToCandidates(w, rows, cols), nil)
		if err != nil {
			t.Fatal(err)
		}
		for round := 0; round < 6; round++ {
			// A tenth of the rows are replaced and a tenth of the columns change
			// group (their holders' weights with them).
			hint := pairsOf(prev)
			for range rows / 10 {
				i := r.IntN(rows)
				kind[i], hint[i] = r.IntN(kinds), -1
				row := replicaWeights(r, 1, cols, 12, base, groups, kind[i:i+1], group)
				copy(w[i*cols:(i+1)*cols], row)
			}
			for range cols / 10 {
				j := r.IntN(cols)
				group[j] = r.IntN(groups)
				for i := 0; i < rows; i++ {
					if !math.IsInf(w[i*cols+j], -1) {
						w[i*cols+j] = base[kind[i]*groups+group[j]]
					}
				}
			}
			got := warmAgainstDense(t, &s, &d, w, rows, cols, &Prices{Col: prev.Prices.Col, RowCol: hint}, fmt.Sprintf("trial %d round %d", trial, round))
			prev = got
		}
	}
	t.Logf("clusters made %d, searches that settled one %d, found no way through %d", s.k.made, s.k.settled, s.k.noPath)
	if s.k.made == 0 || s.k.settled == 0 || s.k.noPath == 0 {
		t.Errorf("clusters made %d, settled %d, no way through %d: the test proves little", s.k.made, s.k.settled, s.k.noPath)
	}
}

// TestStrongComponents: Tarjan's labels on a small graph with known parts: a cycle of
// three with a tail into a cycle of two, and a lone node with a self-arc.
func TestStrongComponents(t *testing.T) {
	var s Sparse
	// 0->1->2->0, 2->3, 3->4->3, 5->5
	adj := [][]int32{{1}, {2}, {0, 3}, {4}, {3}, {5}}
	s.k.adjStart = []int32{0}
	for _, a := range adj {
		s.k.adj = append(s.k.adj, a...)
		s.k.adjStart = append(s.k.adjStart, int32(len(s.k.adj)))
	}
	s.strongComponents(len(adj))
	c := s.k.comp
	if c[0] != c[1] || c[1] != c[2] || c[3] != c[4] || c[0] == c[3] || c[5] == c[0] || c[5] == c[3] {
		t.Fatalf("components %v", c[:len(adj)])
	}
}

// warmAgainstDense solves w from the warm start, checks the answer is a matching, and
// that its total is the dense solver's optimum.
func warmAgainstDense(t *testing.T, s *Sparse, d *Dense, w []float64, rows, cols int, warm *Prices, what string) Matching {
	t.Helper()
	g := denseToCandidates(w, rows, cols)
	got, err := s.MaxWeightMatching(g, warm)
	if err != nil {
		t.Fatal(err)
	}
	checkMatching(t, g, got)
	want, err := d.MaxWeightMatching(w, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got.Total-want.Total) > 1e-9*math.Max(1, want.Total) {
		t.Fatalf("%s: warm %.12f, dense %.12f", what, got.Total, want.Total)
	}
	return got
}

// pairsOf is m's row-to-column pairs as a warm start's hint (RowCol).
func pairsOf(m Matching) []int32 {
	hint := make([]int32, len(m.RowCol))
	for i, c := range m.RowCol {
		hint[i] = int32(c)
	}
	return hint
}
