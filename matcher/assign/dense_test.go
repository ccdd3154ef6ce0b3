package assign

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// bruteBest enumerates every way to give each row of the smaller side a
// distinct partner and returns the best total (min or max), or ok=false when
// every way uses a forbidden cell.
func bruteBest(c []float64, rows, cols int, maximize bool) (best float64, ok bool) {
	small, large := rows, cols
	at := func(a, b int) float64 { return c[a*cols+b] }
	if rows > cols {
		small, large = cols, rows
		at = func(a, b int) float64 { return c[b*cols+a] }
	}
	used := make([]bool, large)
	better := func(x, y float64) bool {
		if maximize {
			return x > y
		}
		return x < y
	}
	var rec func(a int, sum float64)
	rec = func(a int, sum float64) {
		if a == small {
			if !ok || better(sum, best) {
				best, ok = sum, true
			}
			return
		}
		for b := 0; b < large; b++ {
			x := at(a, b)
			if used[b] || math.IsInf(x, 0) {
				continue
			}
			used[b] = true
			rec(a+1, sum+x)
			used[b] = false
		}
	}
	rec(0, 0)
	return best, ok
}

// bruteMatching returns the best partial matching weight, ignoring forbidden
// and non-positive cells.
func bruteMatching(w []float64, rows, cols int) float64 {
	used := make([]bool, cols)
	best := 0.0
	var rec func(i int, sum float64)
	rec = func(i int, sum float64) {
		if i == rows {
			best = math.Max(best, sum)
			return
		}
		rec(i+1, sum)
		for j := 0; j < cols; j++ {
			x := w[i*cols+j]
			if used[j] || math.IsInf(x, 0) || x <= 0 {
				continue
			}
			used[j] = true
			rec(i+1, sum+x)
			used[j] = false
		}
	}
	rec(0, 0)
	return best
}

// randomMatrix draws small integers so ties are frequent, and forbids a
// share of cells with ±Inf.
func randomMatrix(r *rand.Rand, rows, cols int, forbidShare float64, forbidden float64) []float64 {
	c := make([]float64, rows*cols)
	for k := range c {
		if r.Float64() < forbidShare {
			c[k] = forbidden
			continue
		}
		c[k] = float64(r.IntN(7) - 2)
	}
	return c
}

func checkAssignment(t *testing.T, c []float64, rows, cols int, res Result, forbidden float64) {
	t.Helper()
	seen := map[int]bool{}
	n := 0
	sum := 0.0
	for i, j := range res.RowCol {
		if j < 0 {
			continue
		}
		if j >= cols || seen[j] {
			t.Fatalf("row %d got column %d: out of range or reused (%v)", i, j, res.RowCol)
		}
		if c[i*cols+j] == forbidden {
			t.Fatalf("row %d got forbidden column %d", i, j)
		}
		seen[j] = true
		n++
		sum += c[i*cols+j]
	}
	if n != min(rows, cols) {
		t.Fatalf("assigned %d pairs, want %d", n, min(rows, cols))
	}
	if math.Abs(sum-res.Total) > 1e-9 {
		t.Fatalf("Total %v but cells sum to %v", res.Total, sum)
	}
}

func TestDenseMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var s Dense // reused on purpose: stale scratch must not leak between solves
	for trial := 0; trial < 3000; trial++ {
		s.augmentOnly = trial%3 == 0
		rows, cols := 1+r.IntN(7), 1+r.IntN(7)
		share := []float64{0, 0, 0.2, 0.5}[trial%4]
		maximize := trial%2 == 1
		forbidden := math.Inf(1)
		if maximize {
			forbidden = math.Inf(-1)
		}
		c := randomMatrix(r, rows, cols, share, forbidden)
		want, ok := bruteBest(c, rows, cols, maximize)
		var res Result
		var err error
		if maximize {
			res, err = s.Maximize(c, rows, cols)
		} else {
			res, err = s.Minimize(c, rows, cols)
		}
		if !ok {
			if !errors.Is(err, ErrInfeasible) {
				t.Fatalf("trial %d %d×%d max=%v: want ErrInfeasible, got %v (%v)\n%v", trial, rows, cols, maximize, err, res, c)
			}
			continue
		}
		if err != nil {
			t.Fatalf("trial %d %d×%d max=%v: %v\n%v", trial, rows, cols, maximize, err, c)
		}
		checkAssignment(t, c, rows, cols, res, forbidden)
		if res.Total != want {
			t.Fatalf("trial %d %d×%d max=%v: total %v, brute force %v\nmatrix %v\nassignment %v", trial, rows, cols, maximize, res.Total, want, c, res.RowCol)
		}
	}
}

func TestDenseFloatMatchesBruteForce(t *testing.T) {
	// Continuous values exercise the strict-inequality paths that integer
	// ties hide.
	r := rand.New(rand.NewPCG(3, 4))
	var s Dense
	for trial := 0; trial < 1000; trial++ {
		rows, cols := 1+r.IntN(8), 1+r.IntN(8)
		c := make([]float64, rows*cols)
		for k := range c {
			c[k] = r.Float64()*100 - 20
		}
		want, _ := bruteBest(c, rows, cols, false)
		res, err := s.Minimize(c, rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		checkAssignment(t, c, rows, cols, res, math.Inf(1))
		if math.Abs(res.Total-want) > 1e-9 {
			t.Fatalf("trial %d: total %v, brute force %v", trial, res.Total, want)
		}
	}
}

func TestMaxWeightMatchingMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var s Dense
	for trial := 0; trial < 2000; trial++ {
		rows, cols := 1+r.IntN(6), 1+r.IntN(6)
		w := randomMatrix(r, rows, cols, []float64{0, 0.3, 0.7, 1}[trial%4], math.Inf(-1))
		want := bruteMatching(w, rows, cols)
		res, err := s.MaxWeightMatching(w, rows, cols)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		used := map[int]bool{}
		for i, j := range res.RowCol {
			if j < 0 {
				continue
			}
			if used[j] || w[i*cols+j] <= 0 || math.IsInf(w[i*cols+j], 0) {
				t.Fatalf("trial %d: bad pair (%d,%d) weight %v", trial, i, j, w[i*cols+j])
			}
			used[j] = true
		}
		if res.Total != want {
			t.Fatalf("trial %d: total %v, brute force %v\n%v", trial, res.Total, want, w)
		}
	}
}

func TestDenseRejectsBadInput(t *testing.T) {
	var s Dense
	tests := []struct {
		name       string
		c          []float64
		rows, cols int
		max        bool
		want       error
	}{
		{"size mismatch", []float64{1, 2, 3}, 2, 2, false, ErrBadInput},
		{"negative size", nil, -1, 2, false, ErrBadInput},
		{"NaN", []float64{1, math.NaN(), 3, 4}, 2, 2, false, ErrBadInput},
		{"-Inf when minimising", []float64{1, math.Inf(-1), 3, 4}, 2, 2, false, ErrBadInput},
		{"+Inf when maximising", []float64{1, math.Inf(1), 3, 4}, 2, 2, true, ErrBadInput},
		{"row all forbidden", []float64{math.Inf(1), math.Inf(1), 3, 4}, 2, 2, false, ErrInfeasible},
		{"rectangular infeasible", []float64{1, math.Inf(1), math.Inf(1), 2, math.Inf(1), math.Inf(1)}, 2, 3, false, ErrInfeasible},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.max {
				_, err = s.Maximize(tc.c, tc.rows, tc.cols)
			} else {
				_, err = s.Minimize(tc.c, tc.rows, tc.cols)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestDenseEmptyAndKnown(t *testing.T) {
	var s Dense
	res, err := s.Minimize(nil, 0, 5)
	if err != nil || len(res.RowCol) != 0 {
		t.Fatalf("empty: %v %v", res, err)
	}
	// 3×2: the middle row is left out; the wide-matrix path transposes.
	res, err = s.Maximize([]float64{1, 9, 8, 7, 2, 3}, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := Result{RowCol: []int{1, 0, -1}, Total: 17}
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// hungarian is the textbook O(n²m) potentials algorithm (rows ≤ cols,
// finite costs), an independent reference for sizes brute force cannot reach.
func hungarian(c []float64, n, m int) float64 {
	inf := math.Inf(1)
	u := make([]float64, n+1)
	v := make([]float64, m+1)
	p := make([]int, m+1)
	way := make([]int, m+1)
	for i := 1; i <= n; i++ {
		p[0] = i
		j0 := 0
		minv := make([]float64, m+1)
		used := make([]bool, m+1)
		for j := range minv {
			minv[j] = inf
		}
		for {
			used[j0] = true
			i0, delta, j1 := p[j0], inf, 0
			for j := 1; j <= m; j++ {
				if used[j] {
					continue
				}
				cur := c[(i0-1)*m+j-1] - u[i0] - v[j]
				if cur < minv[j] {
					minv[j], way[j] = cur, j0
				}
				if minv[j] < delta {
					delta, j1 = minv[j], j
				}
			}
			for j := 0; j <= m; j++ {
				if used[j] {
					u[p[j]] += delta
					v[j] -= delta
				} else {
					minv[j] -= delta
				}
			}
			j0 = j1
			if p[j0] == 0 {
				break
			}
		}
		for j0 != 0 {
			j1 := way[j0]
			p[j0] = p[j1]
			j0 = j1
		}
	}
	total := 0.0
	for j := 1; j <= m; j++ {
		if p[j] != 0 {
			total += c[(p[j]-1)*m+j-1]
		}
	}
	return total
}

func TestDenseMatchesHungarianOnLargerInstances(t *testing.T) {
	// Brute force stops at 7×7, where the reductions solve almost everything;
	// these sizes make the shortest-augmenting-path phase and its price
	// updates do real work.
	r := rand.New(rand.NewPCG(7, 8))
	var s Dense
	for trial := 0; trial < 300; trial++ {
		s.augmentOnly = trial%2 == 0
		n := 5 + r.IntN(60)
		m := n + []int{0, 0, 1, r.IntN(40)}[trial%4]
		c := make([]float64, n*m)
		for k := range c {
			if trial%3 == 0 {
				c[k] = float64(r.IntN(5)) // many ties
			} else {
				c[k] = r.Float64()
			}
		}
		want := hungarian(c, n, m)
		res, err := s.Minimize(c, n, m)
		if err != nil {
			t.Fatal(err)
		}
		checkAssignment(t, c, n, m, res, math.Inf(1))
		if math.Abs(res.Total-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Fatalf("trial %d %d×%d: total %v, hungarian %v", trial, n, m, res.Total, want)
		}
		// The transposed problem has the same optimum.
		tr := make([]float64, n*m)
		for i := 0; i < n; i++ {
			for j := 0; j < m; j++ {
				tr[j*n+i] = c[i*m+j]
			}
		}
		res, err = s.Minimize(tr, m, n)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(res.Total-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Fatalf("trial %d transposed %d×%d: total %v, hungarian %v", trial, m, n, res.Total, want)
		}
	}
}
