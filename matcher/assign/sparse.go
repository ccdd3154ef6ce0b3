package assign

import (
	"fmt"
	"math"
)

// Candidates is a sparse bipartite graph in compressed-row form: row i (an
// offline job) may take column Col[k] (a GPU) with weight Weight[k] for k in
// [Start[i], Start[i+1]). Only positive, finite weights are worth an edge;
// others are ignored by the solver.
type Candidates struct {
	Rows, Cols int
	Start      []int
	Col        []int32
	Weight     []float64
}

// Validate checks the shape and every column index.
func (g *Candidates) Validate() error {
	if g.Rows < 0 || g.Cols < 0 || len(g.Start) != g.Rows+1 || g.Start[0] != 0 {
		return fmt.Errorf("%w: candidate lists need Rows+1 offsets starting at 0", ErrBadInput)
	}
	if g.Start[g.Rows] != len(g.Col) || len(g.Col) != len(g.Weight) {
		return fmt.Errorf("%w: %d offsets end, %d columns, %d weights", ErrBadInput, g.Start[g.Rows], len(g.Col), len(g.Weight))
	}
	for i := 0; i < g.Rows; i++ {
		if g.Start[i+1] < g.Start[i] {
			return fmt.Errorf("%w: offsets of row %d go backwards", ErrBadInput, i)
		}
	}
	for k, j := range g.Col {
		if j < 0 || int(j) >= g.Cols {
			return fmt.Errorf("%w: candidate %d names column %d of %d", ErrBadInput, k, j, g.Cols)
		}
		if math.IsNaN(g.Weight[k]) {
			return fmt.Errorf("%w: candidate %d has NaN weight", ErrBadInput, k)
		}
	}
	return nil
}

// Prices are the GPU (column) prices of a solved matching: the dual values
// that certify its optimality, kept to warm-start the next round. A price is
// what a job gives up to hold that GPU; unassigned GPUs end at 0. Any
// non-negative values are a valid start; good ones save work.
type Prices struct {
	Col []float64
	// RowCol, when not nil, is each row's column in the earlier solve (-1: none or
	// not known, and the row then keeps to being unmatched). Among the columns a
	// warm price makes equally cheap for a row (to rounding), the row keeps this one: on the plateaus that replicas make, that is what lets a
	// re-solve after a small change keep almost every assignment and search only
	// from the rows the change touched.
	RowCol []int32
}

// Matching is a sparse solver's answer.
type Matching struct {
	// RowCol[i] is row i's column, or -1 when it stays unmatched.
	RowCol []int
	Total  float64
	// Prices warm-start a later solve of a similar problem.
	Prices Prices
	// Augmentations counts shortest-path searches, a measure of work done.
	Augmentations int
	// Repairs counts warm-start repair rounds (see MaxWeightMatching).
	Repairs int
}

// Sparse is an exact maximum-weight bipartite matching solver over candidate
// lists. The zero value is ready; reusing one keeps its buffers.
//
// Internally it is a rectangular assignment problem in which every job row
// also owns a private zero-cost "stay unmatched" column, so every row is
// always assigned, solved by Jonker–Volgenant shortest augmenting paths over
// the sparse rows with a binary heap.
type Sparse struct {
	start []int
	col   []int32
	cost  []float64
	// solver state: rows are jobs, columns GPUs then one dummy per job
	cs                   []colState
	rowCost, predCost    []float64
	rowSol, colSol, pred []int32
	epoch                uint32
	ready                []int32
	heap                 minHeap
	free                 []int32
	mark                 []bool
	// augmentOnly skips the initial reduction (tests).
	augmentOnly bool
}

// colState keeps together what a search reads for each column it reaches,
// so a relaxed edge costs one cache miss rather than four.
type colState struct {
	v, d             float64 // price (negated, JV's v) and search distance
	touched, scanned uint32  // search epoch that last set d / settled it
}

// tieTolerance is the relative difference in reduced cost under which a warm
// start keeps a row's earlier column (see tightGreedy).
const tieTolerance = 1e-9

// maxRepairs bounds the warm-start repair rounds before a cold solve.
const maxRepairs = 64

// MaxWeightMatching returns a maximum-weight matching of g. warm, when not
// nil, holds one price per column from an earlier solve (mapped to this
// problem's columns; 0 for new ones).
//
// Why warm starts need care: for a rectangular problem the prices certify
// optimality only if every GPU left unassigned has price 0, and a warm price
// may leave a GPU priced but unassigned. Such GPUs are reset to 0, the jobs
// that then prefer them are released and re-augmented, until none is left
// (or, past a bound, the problem is solved cold). Complementary slackness is
// then exact, so the warm answer is as optimal as the cold one.
func (s *Sparse) MaxWeightMatching(g *Candidates, warm *Prices) (Matching, error) {
	if err := g.Validate(); err != nil {
		return Matching{}, err
	}
	if warm != nil && len(warm.Col) != g.Cols {
		return Matching{}, fmt.Errorf("%w: warm prices for %d columns, problem has %d", ErrBadInput, len(warm.Col), g.Cols)
	}
	if warm != nil && warm.RowCol != nil && len(warm.RowCol) != g.Rows {
		return Matching{}, fmt.Errorf("%w: warm columns for %d rows, problem has %d", ErrBadInput, len(warm.RowCol), g.Rows)
	}
	s.build(g)
	m, err := s.solve(g, warm)
	if err != nil {
		return Matching{}, err
	}
	if warm != nil && m.Repairs > maxRepairs {
		cold, err := s.solve(g, nil)
		if err != nil {
			return Matching{}, err
		}
		cold.Augmentations += m.Augmentations
		cold.Repairs = m.Repairs
		m = cold
	}
	return m, nil
}

func (s *Sparse) solve(g *Candidates, warm *Prices) (Matching, error) {
	R, C := g.Rows, g.Cols
	n := C + R
	s.cs = grow(s.cs, n)
	clear(s.cs)
	if warm != nil {
		for j, p := range warm.Col {
			if p > 0 && !math.IsInf(p, 1) {
				s.cs[j].v = -p
			}
		}
	}
	s.rowSol = grow(s.rowSol, R)
	s.colSol = grow(s.colSol, n)
	s.rowCost = grow(s.rowCost, R)
	for k := range s.rowSol {
		s.rowSol[k] = -1
	}
	for k := range s.colSol {
		s.colSol[k] = -1
	}
	s.free = s.free[:0]
	switch {
	case s.augmentOnly:
		for i := 0; i < R; i++ {
			s.free = append(s.free, int32(i))
		}
	case warm != nil:
		// Rows keep the columns their warm prices make cheapest where
		// nobody else claims them; the contested rest go through the same
		// row reduction as a cold start.
		s.tightGreedy(R, warm.RowCol)
		s.rowReduction(R)
	default:
		for i := 0; i < R; i++ {
			s.free = append(s.free, int32(i))
		}
		s.rowReduction(R)
	}
	s.pred = grow(s.pred, n)
	s.predCost = grow(s.predCost, n)
	s.epoch = 0
	m := Matching{RowCol: make([]int, R)}
	for {
		for _, i := range s.free {
			if err := s.augment(i); err != nil {
				return Matching{}, err
			}
			m.Augmentations++
		}
		s.free = s.free[:0]
		if warm == nil || !s.repair() {
			break
		}
		m.Repairs++
		if m.Repairs > maxRepairs {
			return m, nil
		}
	}
	for i := 0; i < R; i++ {
		j := int(s.rowSol[i])
		if j < C {
			m.RowCol[i] = j
			m.Total -= s.rowCost[i]
		} else {
			m.RowCol[i] = -1
		}
	}
	m.Prices.Col = make([]float64, C)
	for j := range m.Prices.Col {
		m.Prices.Col[j] = -s.cs[j].v
	}
	return m, nil
}

// repair resets unassigned columns that kept a price (GPUs, or the dummy of a
// job a repair released), releases the jobs that now prefer one of them into
// s.free, and reports whether it changed anything.
func (s *Sparse) repair() bool {
	n := len(s.colSol)
	s.mark = grow(s.mark, n)
	any := false
	for j := 0; j < n; j++ {
		s.mark[j] = s.colSol[j] < 0 && s.cs[j].v < 0
		if s.mark[j] {
			s.cs[j].v = 0
			any = true
		}
	}
	if !any {
		return false
	}
	for i := range s.rowSol {
		ji := s.rowSol[i]
		u := s.rowCost[i] - s.cs[ji].v
		for e := s.start[i]; e < s.start[i+1]; e++ {
			j := s.col[e]
			if s.mark[j] && s.cost[e] < u {
				s.colSol[ji] = -1
				s.rowSol[i] = -1
				s.free = append(s.free, int32(i))
				break
			}
		}
	}
	return true
}

// build lays out each job's useful candidates (cost = -weight) followed by
// its private dummy column in compressed-row form.
func (s *Sparse) build(g *Candidates) {
	R, C := g.Rows, g.Cols
	s.start = grow(s.start, R+1)
	s.col = s.col[:0]
	s.cost = s.cost[:0]
	s.start[0] = 0
	for i := 0; i < R; i++ {
		for k := g.Start[i]; k < g.Start[i+1]; k++ {
			if w := g.Weight[k]; w > 0 && !math.IsInf(w, 1) {
				s.col = append(s.col, g.Col[k])
				s.cost = append(s.cost, -w)
			}
		}
		s.col = append(s.col, int32(C+i))
		s.cost = append(s.cost, 0)
		s.start[i+1] = len(s.col)
	}
}

// arrPasses bounds the augmenting row reduction passes. JV use two on dense
// problems; on near-saturated sparse ones (every job wants a GPU and nearly
// all get one) each pass still halves the rows left for the far more costly
// shortest-path searches, so more pay off (20k×20k top-64: 609 searches after
// 2 passes, 102 after 16, 1.6 s → 1.2 s).
const arrPasses = 16

// rowReduction is the augmenting row reduction of JV on the sparse graph,
// over the rows in s.free (n is the row count, for the step budget): each
// row takes its cheapest column and lowers its price to the second-cheapest
// reduced cost; evicted rows continue at once while a budget lasts. Rows
// left over stay in s.free.
func (s *Sparse) rowReduction(n int) {
	for pass := 0; pass < arrPasses; pass++ {
		prev := len(s.free)
		queue := s.free
		numFree := 0
		budget := 4*n + 16
		for k := 0; k < prev; {
			i := queue[k]
			k++
			lo, hi := s.start[i], s.start[i+1]
			umin, usub := math.Inf(1), math.Inf(1)
			j1, j2 := int32(-1), int32(-1)
			var c1 float64
			for e := lo; e < hi; e++ {
				j := s.col[e]
				h := s.cost[e] - s.cs[j].v
				if h < usub {
					if h >= umin {
						usub, j2 = h, j
					} else {
						usub, j2 = umin, j1
						umin, j1, c1 = h, j, s.cost[e]
					}
				}
			}
			i0 := s.colSol[j1]
			reduce := umin < usub && !math.IsInf(usub, 1)
			if reduce {
				s.cs[j1].v -= usub - umin
			} else if i0 >= 0 && j2 >= 0 && usub == umin {
				j1 = j2
				i0 = s.colSol[j1]
				c1 = s.edgeCost(i, j1)
			}
			s.rowSol[i] = j1
			s.colSol[j1] = i
			s.rowCost[i] = c1
			if i0 >= 0 {
				s.rowSol[i0] = -1
				budget--
				if reduce && budget > 0 {
					k--
					queue[k] = i0
				} else {
					queue[numFree] = i0
					numFree++
				}
			}
		}
		s.free = queue[:numFree]
		if numFree == 0 || numFree == prev {
			break
		}
	}
}

func (s *Sparse) edgeCost(i, j int32) float64 {
	best := math.Inf(1)
	for e := s.start[i]; e < s.start[i+1]; e++ {
		if s.col[e] == j && s.cost[e] < best {
			best = s.cost[e]
		}
	}
	return best
}

// tightGreedy starts from warm prices: each row takes its cheapest reduced
// cost column when nobody holds it yet, so prices stay as given (they were
// good last round) and only contested rows are left for augmentation.
func (s *Sparse) tightGreedy(n int, hint []int32) {
	for i := int32(0); int(i) < n; i++ {
		best, bj, bc := math.Inf(1), int32(-1), 0.0
		prev := int32(-1)
		if hint != nil {
			// A row the earlier solve left unmatched (or did not know) held its
			// own dummy column, the last of its list.
			if prev = hint[i]; prev < 0 {
				prev = s.col[s.start[i+1]-1]
			}
		}
		// Among equally cheap columns: the row's earlier one if free, else any free one.
		rank := func(j int32) int {
			switch {
			case s.colSol[j] >= 0:
				return 0
			case j == prev:
				return 2
			}
			return 1
		}
		pe := -1 // the earlier column's edge
		for e := s.start[i]; e < s.start[i+1]; e++ {
			j := s.col[e]
			h := s.cost[e] - s.cs[j].v
			if j == prev {
				pe = e
			}
			if h < best || h == best && rank(j) > rank(bj) {
				best, bj, bc = h, j, s.cost[e]
			}
		}
		// The earlier column was the row's cheapest when that solve ended; the
		// price updates since are sums of differences, so "equally cheap" allows
		// for their rounding.
		if pe >= 0 && bj != prev && s.colSol[prev] < 0 {
			if h := s.cost[pe] - s.cs[prev].v; h <= best+tieTolerance*(1+math.Abs(best)) {
				bj, bc = prev, s.cost[pe]
			}
		}
		if s.colSol[bj] < 0 {
			s.rowSol[i], s.colSol[bj], s.rowCost[i] = bj, i, bc
		} else {
			s.free = append(s.free, i)
		}
	}
}

// augment runs Dijkstra over reduced costs from free row f until it settles
// an unassigned column, updates the settled columns' prices and flips the
// path. Only touched columns are visited, so a short path costs little, and
// columns no closer than the best unassigned column seen so far never enter
// the heap, which keeps it small in the wide searches late in a solve.
// (Searching from all free rows at once was tried: late in a solve the
// nearest free column is far from every free row alike, so it did not help.)
func (s *Sparse) augment(f int32) error {
	s.epoch++
	ep := s.epoch
	s.heap = s.heap[:0]
	s.ready = s.ready[:0]
	start, col, cost, cs, colSol := s.start, s.col, s.cost, s.cs, s.colSol
	end, bound := int32(-1), math.Inf(1)
	relax := func(i int32, h float64) {
		for e := start[i]; e < start[i+1]; e++ {
			j := col[e]
			c := &cs[j]
			if c.scanned == ep {
				continue
			}
			nd := cost[e] - c.v - h
			if nd >= bound || c.touched == ep && nd >= c.d {
				continue
			}
			c.touched = ep
			c.d = nd
			s.pred[j] = i
			s.predCost[j] = cost[e]
			if colSol[j] < 0 {
				end, bound = j, nd
				continue
			}
			s.heap.push(nd, j)
		}
	}
	relax(f, 0)
	for {
		j := int32(-1)
		var dist float64
		for len(s.heap) > 0 {
			dj, cj := s.heap.pop()
			if cs[cj].scanned == ep || dj > cs[cj].d {
				continue
			}
			j, dist = cj, dj
			break
		}
		if j < 0 || dist >= bound {
			break
		}
		cs[j].scanned = ep
		s.ready = append(s.ready, j)
		i := colSol[j]
		relax(i, s.rowCost[i]-cs[j].v-dist)
	}
	if end < 0 {
		return fmt.Errorf("%w: row %d has no augmenting path", ErrInfeasible, f)
	}
	min := bound
	for _, j := range s.ready {
		cs[j].v += cs[j].d - min
	}
	for j := end; ; {
		i := s.pred[j]
		colSol[j] = i
		next := s.rowSol[i]
		s.rowSol[i] = j
		s.rowCost[i] = s.predCost[j]
		if i == f {
			break
		}
		j = next
	}
	return nil
}

// minHeap is a binary heap of (distance, column) with lazy deletion: stale
// entries are skipped when popped, which is cheaper than decrease-key here.
type minHeap []heapItem

type heapItem struct {
	d float64
	j int32
}

func (h *minHeap) push(d float64, j int32) {
	a := append(*h, heapItem{d, j})
	k := len(a) - 1
	for k > 0 {
		p := (k - 1) / 2
		if a[p].d <= d {
			break
		}
		a[k] = a[p]
		k = p
	}
	a[k] = heapItem{d, j}
	*h = a
}

func (h *minHeap) pop() (float64, int32) {
	a := *h
	top := a[0]
	last := a[len(a)-1]
	a = a[:len(a)-1]
	n := len(a)
	k := 0
	for {
		c := 2*k + 1
		if c >= n {
			break
		}
		if c+1 < n && a[c+1].d < a[c].d {
			c++
		}
		if a[c].d >= last.d {
			break
		}
		a[k] = a[c]
		k = c
	}
	if n > 0 {
		a[k] = last
	}
	*h = a
	return top.d, top.j
}
