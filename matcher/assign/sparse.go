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
	// Augmentations counts shortest-path searches, and Scanned the candidate edges
	// they scanned: measures of work done.
	Augmentations, Scanned int
	// Repairs counts the columns a warm start left free but priced, each let fall to 0
	// by a backward search (see MaxWeightMatching and repair).
	Repairs int
	// FellBack says a warm start's repairs ran past their bound, so the answer is a
	// cold solve's.
	FellBack bool
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
	need                 []float64
	// eps is the tie tolerance of a search (tieEps of the largest |weight|).
	eps float64
	// augmentOnly skips the initial reduction (tests).
	augmentOnly bool
	// lowered counts the free columns whose warm price was lowered (tests); scanned
	// the edges the searches scanned.
	lowered, scanned int
	// repair's backward searches: each GPU column's rows (built when first needed in
	// a solve) and the rows' labels
	rcStart, rcRow, rcPos []int32
	rcCost                []float64
	revBuilt              bool
	rl                    []rowLabel
	// k holds the clusters the searches keep (cluster.go); pathRows the rows the last
	// search's path moved.
	k        clusters
	pathRows []int32
	// ties counts the search's edges that reached a column as near as it already
	// was: many make a plateau worth a cluster; left is the number of searches still
	// to come.
	ties, left int
	// clusterAt overrides clusterMin (tests; < 0: no cluster).
	clusterAt int
}

// rowLabel is a row's label in a backward search: its distance, the column it would
// move to and that edge's cost.
type rowLabel struct {
	d, c float64
	t, s uint32 // search epoch that last set d / settled the row
	succ int32
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

// maxRepairs bounds the warm-start repair rounds before a cold solve. A round of
// backward searches leaves no column priced and free, so one is all it takes; the bound
// only guards against rounding leaving one.
const maxRepairs = 64

// tieEps is, relative to the largest |weight|, the distance under which a search takes
// a free column found no farther than the nearest unsettled one as the end of its path.
// Prices are sums of many differences, so distances that are equal in exact arithmetic
// (the plateaus replicas make) come out a few 1e-13 apart; a search that told them apart
// would settle a whole plateau only to end at a column it had already found. Each
// search's path is then at most eps longer than the shortest, which moves the total by
// far less than the 1e-9 relative that warm and cold answers are compared to.
const tieEps = 1e-11

// MaxWeightMatching returns a maximum-weight matching of g. warm, when not
// nil, holds one price per column from an earlier solve (mapped to this
// problem's columns; 0 for new ones).
//
// Why warm starts need care: for a rectangular problem the prices certify
// optimality only if every GPU left unassigned has price 0, and a warm price
// may leave a GPU priced but unassigned. Before the searches, such GPUs are
// priced down to what the assigned jobs would pay at most (lowerFreePrices);
// after them, each one still priced is let fall to 0 by a backward search
// (repair; past a bound of repair rounds, which does not happen short of
// rounding trouble, the problem is solved cold). Complementary slackness is
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
	if m.FellBack {
		cold, err := s.solve(g, nil)
		if err != nil {
			return Matching{}, err
		}
		cold.Augmentations += m.Augmentations
		cold.Scanned += m.Scanned
		cold.Repairs = m.Repairs
		cold.FellBack = true
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
		if warm.RowCol != nil {
			s.lowerFreePrices(C)
		}
	default:
		for i := 0; i < R; i++ {
			s.free = append(s.free, int32(i))
		}
		s.rowReduction(R)
	}
	s.pred = grow(s.pred, n)
	s.predCost = grow(s.predCost, n)
	s.epoch = 0
	scanned := s.scanned
	m := Matching{RowCol: make([]int, R)}
	s.resetClusters(n, R)
	// Clusters pay in the last searches of a warm start from an earlier solve's
	// pairs; a cold solve's many wide searches made and dropped them often enough to
	// run 18 % slower for 22 % fewer edges (20k x 20k).
	s.k.enabled = warm != nil && warm.RowCol != nil
	for rounds := 0; ; rounds++ {
		for k, i := range s.free {
			s.left = len(s.free) - k - 1
			if err := s.augment(i); err != nil {
				s.dissolveClusters()
				return Matching{}, err
			}
			m.Augmentations++
		}
		s.free = s.free[:0]
		// The repairs and what follows read each column's own price.
		s.dissolveClusters()
		if warm == nil {
			break
		}
		fixed := s.repair(C)
		if fixed == 0 {
			break
		}
		m.Repairs += fixed
		if rounds >= maxRepairs {
			m.Scanned = s.scanned - scanned
			m.FellBack = true
			return m, nil
		}
	}
	m.Scanned = s.scanned - scanned
	if warm == nil || warm.RowCol == nil || m.Repairs > 0 {
		s.minimizePrices()
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

// repair makes complementary slackness exact once every row is assigned: a column left
// free (a GPU, or a job's dummy) must be priced 0, and a warm start can leave one
// priced. For each, a search backwards from it finds the cheapest way to let its price
// fall to 0: the distance from a column x to it is what its price must fall before the
// rows between them would shift one column towards it, and x's own price is what x may
// fall before it could be left free itself. The search ends at the nearest x whose
// distance plus price is least (x may be the column itself: then no one wants it even
// free); every column it settled falls by what is left of that, and the rows on the path
// shift, leaving x free at price 0. Prices stay feasible (a truncated distance, as in a
// forward search) and no column goes below 0, so one search per priced column restores
// the optimality conditions: the count of such columns is returned.
//
// (The repair before this one reset the prices to 0 and released the rows that then
// preferred those columns; each released row freed its old column, priced, so the
// violation moved one step per round, and on unsaturated rounds it often ran past the
// bound of 64 rounds into a cold solve.)
func (s *Sparse) repair(C int) int {
	n := len(s.colSol)
	fixed := 0
	for j := 0; j < n; j++ {
		if s.colSol[j] >= 0 || s.cs[j].v >= 0 {
			continue
		}
		if !s.revBuilt {
			s.buildReverse(C)
		}
		s.lowerToZero(int32(j), C)
		fixed++
	}
	return fixed
}

// buildReverse lays out, for each GPU column, the rows that hold it and the edge cost.
func (s *Sparse) buildReverse(C int) {
	R := len(s.start) - 1
	s.rcStart = grow(s.rcStart, C+1)
	clear(s.rcStart)
	for i := 0; i < R; i++ {
		for e := s.start[i]; e < s.start[i+1]-1; e++ {
			s.rcStart[s.col[e]+1]++
		}
	}
	for j := 0; j < C; j++ {
		s.rcStart[j+1] += s.rcStart[j]
	}
	m := int(s.rcStart[C])
	s.rcRow = grow(s.rcRow, m)
	s.rcCost = grow(s.rcCost, m)
	pos := grow(s.rcPos, C)
	copy(pos, s.rcStart[:C])
	for i := 0; i < R; i++ {
		for e := s.start[i]; e < s.start[i+1]-1; e++ {
			j := s.col[e]
			s.rcRow[pos[j]] = int32(i)
			s.rcCost[pos[j]] = s.cost[e]
			pos[j]++
		}
	}
	s.rcPos = pos
	s.revBuilt = true
	// Labels carry search epochs, which start over with each solve.
	s.rl = grow(s.rl, R)
	clear(s.rl)
}

// lowerToZero is repair's backward search from free column j (see repair).
func (s *Sparse) lowerToZero(j int32, C int) {
	s.epoch++
	ep := s.epoch
	rl, cs, colSol, rowSol := s.rl, s.cs, s.colSol, s.rowSol
	s.heap = s.heap[:0]
	s.ready = s.ready[:0]
	L, term := -cs[j].v, j // the column j itself falls to 0
	// expand settles column x at distance dx and labels the rows that could move to it.
	expand := func(x int32, dx float64) {
		cs[x].d = dx
		s.ready = append(s.ready, x)
		if x != j {
			if t := dx - cs[x].v; t < L {
				L, term = t, x
			}
		}
		own := colSol[x]
		v := cs[x].v
		label := func(i int32, c float64) {
			if i == own {
				return
			}
			r := &rl[i]
			if r.s == ep {
				return
			}
			ji := rowSol[i]
			if ji < 0 {
				return // not assigned yet (repair runs once every row is)
			}
			nd := dx + c - (s.rowCost[i] - cs[ji].v) - v
			if nd >= L || r.t == ep && nd >= r.d {
				return
			}
			r.t, r.d, r.succ, r.c = ep, nd, x, c
			s.heap.push(nd, i)
		}
		if int(x) >= C {
			label(x-int32(C), 0)
			return
		}
		s.scanned += int(s.rcStart[x+1] - s.rcStart[x])
		for k := s.rcStart[x]; k < s.rcStart[x+1]; k++ {
			label(s.rcRow[k], s.rcCost[k])
		}
	}
	expand(j, 0)
	for len(s.heap) > 0 {
		d, i := s.heap.pop()
		r := &rl[i]
		if r.s == ep || d > r.d {
			continue
		}
		if d >= L-s.eps {
			break
		}
		r.s = ep
		expand(rowSol[i], d)
	}
	for _, x := range s.ready {
		if dl := L - cs[x].d; dl > 0 {
			cs[x].v += dl
		}
	}
	if term != j {
		// The rows from term's holder on move one column towards j.
		i := colSol[term]
		colSol[term] = -1
		for {
			r := &rl[i]
			nx := r.succ
			prev := colSol[nx]
			colSol[nx] = i
			rowSol[i] = nx
			s.rowCost[i] = r.c
			if prev < 0 {
				break
			}
			i = prev
		}
	}
	cs[term].v = 0
}

// build lays out each job's useful candidates (cost = -weight) followed by
// its private dummy column in compressed-row form.
func (s *Sparse) build(g *Candidates) {
	R, C := g.Rows, g.Cols
	s.start = grow(s.start, R+1)
	s.col = s.col[:0]
	s.cost = s.cost[:0]
	s.start[0] = 0
	scale := 1.0
	for i := 0; i < R; i++ {
		for k := g.Start[i]; k < g.Start[i+1]; k++ {
			if w := g.Weight[k]; w > 0 && !math.IsInf(w, 1) {
				s.col = append(s.col, g.Col[k])
				s.cost = append(s.cost, -w)
				scale = max(scale, w)
			}
		}
		s.col = append(s.col, int32(C+i))
		s.cost = append(s.cost, 0)
		s.start[i+1] = len(s.col)
	}
	s.eps = tieEps * scale
	s.revBuilt = false
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
// the heap, which keeps it small in the wide searches late in a solve. A free
// column found within eps of the nearest unsettled one ends the search (see
// tieEps).
// (Searching from all free rows at once was tried: late in a solve the
// nearest free column is far from every free row alike, so it did not help.
// Nor did a bidirectional search, from f and back from every free column: on
// these plateaus both sides grow about as large, and each backward step costs
// more; nor growing one Hungarian tree per free row at once and keeping the
// others when one augments: the tree that augments holds most of the
// plateau, and the others reach it only at a higher level, so it is searched
// again all the same.)
func (s *Sparse) augment(f int32) error {
	s.epoch++
	ep := s.epoch
	s.heap = s.heap[:0]
	s.ready = s.ready[:0]
	s.ties = 0
	k := &s.k
	k.on = k.on[:0]
	start, col, cost, cs, colSol, pred, predCost := s.start, s.col, s.cost, s.cs, s.colSol, s.pred, s.predCost
	member, cid, list := k.member, k.cid, k.list
	ties, eps := 0, s.eps
	end, bound := int32(-1), math.Inf(1)
	i, h := f, 0.0 // the row being expanded and its potential less its distance
	for {
		s.scanned += start[i+1] - start[i]
		if k.alive == 0 {
			// No clusters: the loop without the test for members (it cost a tenth
			// of the time of searches that meet none, which are most).
			for e := start[i]; e < start[i+1]; e++ {
				j := col[e]
				c := &cs[j]
				if c.scanned == ep {
					continue
				}
				nd := cost[e] - c.v - h
				if nd >= bound {
					continue
				}
				if c.touched == ep && nd >= c.d {
					if nd <= c.d+eps {
						ties++ // another way of zero length: a plateau
					}
					continue
				}
				c.touched = ep
				c.d = nd
				pred[j] = i
				predCost[j] = cost[e]
				if colSol[j] < 0 {
					end, bound = j, nd
					continue
				}
				s.heap.push(nd, j)
			}
		} else {
			for e := start[i]; e < start[i+1]; e++ {
				j := col[e]
				c := &cs[j]
				if c.scanned == ep {
					continue
				}
				v := c.v
				if member[j>>6]&(1<<(j&63)) != 0 {
					cl := &list[cid[j]]
					if cl.on {
						continue
					}
					v += cl.kv
				}
				nd := cost[e] - v - h
				if nd >= bound {
					continue
				}
				if c.touched == ep && nd >= c.d {
					if nd <= c.d+eps {
						ties++
					}
					continue
				}
				c.touched = ep
				c.d = nd
				pred[j] = i
				predCost[j] = cost[e]
				if colSol[j] < 0 {
					end, bound = j, nd
					continue
				}
				s.heap.push(nd, j)
			}
		}
		// The next row: a settled cluster's row whose edges out may lie nearer than
		// the nearest unsettled column, or that column's row.
		next := int32(-1)
		for next < 0 {
			for len(s.heap) > 0 {
				j := s.heap[0].j
				if cs[j].scanned == ep || s.heap[0].d > cs[j].d || k.has(j) && list[cid[j]].on {
					s.heap.pop()
					continue
				}
				break
			}
			nearest := math.Inf(1)
			if len(s.heap) > 0 {
				nearest = s.heap[0].d
			}
			if len(k.on) > 0 {
				// A settled cluster's cheapest edge out, if nearer.
				if y, d, r, c := s.nextBoundary(math.Min(nearest, bound-s.eps)); y >= 0 {
					cy := &cs[y]
					if cy.scanned == ep || k.has(y) && list[cid[y]].on || d >= bound || cy.touched == ep && d >= cy.d {
						continue
					}
					cy.touched, cy.d = ep, d
					pred[y], predCost[y] = r, c
					if colSol[y] < 0 {
						end, bound = y, d
					} else {
						s.heap.push(d, y)
					}
					continue
				}
			}
			if len(s.heap) == 0 || nearest >= bound-s.eps {
				break
			}
			dist, j := s.heap.pop()
			if k.has(j) {
				// A cluster's first member reached: all of it lies here.
				cl := &list[cid[j]]
				cl.on, cl.d, cl.entry = true, dist, j
				cl.popped = cl.popped[:0]
				if len(k.on) == 0 {
					k.settled++
				}
				k.on = append(k.on, cid[j])
				continue
			}
			cs[j].scanned = ep
			s.ready = append(s.ready, j)
			next = colSol[j]
			h = s.rowCost[next] - cs[j].v - dist
		}
		if next < 0 {
			break
		}
		i = next
	}
	s.ties = ties
	if end < 0 {
		s.clustersOff()
		return fmt.Errorf("%w: row %d has no augmenting path", ErrInfeasible, f)
	}
	// Where the path crosses a cluster, it needs a way through it.
	for j := end; ; {
		i := pred[j]
		if i == f {
			break
		}
		j = s.rowSol[i]
		if !k.has(j) {
			continue
		}
		c := cid[j]
		cl := &list[c]
		if !s.clusterPath(cl.entry, j) {
			// The labels stand (prices are not touched yet), but not the path: drop
			// the cluster and search again. The other clusters' popped boundary
			// columns get their entries back.
			k.noPath++
			k.failed++
			s.dissolveCluster(c)
			s.refreshBoundary()
			s.clustersOff()
			return s.augment(f)
		}
		j = cl.entry
	}
	min := bound
	for _, j := range s.ready {
		cs[j].v += cs[j].d - min
	}
	for _, c := range k.on {
		list[c].kv += list[c].d - min
	}
	s.pathRows = s.pathRows[:0]
	for j := end; ; {
		i := pred[j]
		colSol[j] = i
		next := s.rowSol[i]
		s.rowSol[i] = j
		s.rowCost[i] = predCost[j]
		s.pathRows = append(s.pathRows, i)
		if i == f {
			break
		}
		j = next
	}
	if len(k.on) > 0 {
		// The path moved rows into, out of and between clusters.
		for _, r := range s.pathRows {
			s.leaveRow(r)
		}
		for _, r := range s.pathRows {
			s.enterRow(r)
		}
		s.refreshBoundary()
	}
	s.clustersOff()
	s.formClusters()
	return nil
}

// clustersOff ends the search's hold on the clusters it settled.
func (s *Sparse) clustersOff() {
	for _, c := range s.k.on {
		s.k.list[c].on = false
	}
	s.k.on = s.k.on[:0]
}

func (s *Sparse) clusterMin() int {
	switch {
	case s.clusterAt > 0:
		return s.clusterAt
	case s.clusterAt < 0:
		return math.MaxInt
	}
	return clusterMin
}

// lowerFreePrices gives every free GPU column that a warm start left priced the least
// price that keeps each matched row's edge to it feasible, 0 at least. Such a column is
// one its earlier holder left; its old price is no one's bid now, and every search that
// ends there would first have to raise a whole plateau of prices by the difference (the
// long searches of a warm re-plan). Lowering a price no matched row would pay keeps the
// prices feasible, so the solve stays exact; a column still priced when the searches
// are done is repaired as before. (A job's own dummy column is never free and priced
// here: the row reduction prices one only for the row that then holds it.)
//
// Only a warm start from an earlier solve's pairs (Prices.RowCol) is lowered: from
// prices alone (the planner's coarse start, group means) most GPUs start free, and
// lowering them made the 20k cold solves 25-35 % slower for the same searches.
func (s *Sparse) lowerFreePrices(C int) {
	s.mark = grow(s.mark, C)
	s.need = grow(s.need, C)
	any := false
	for j := 0; j < C; j++ {
		s.mark[j] = s.colSol[j] < 0 && s.cs[j].v < 0
		if s.mark[j] {
			s.need[j] = 0
			any = true
		}
	}
	if !any {
		return
	}
	for i := range s.rowSol {
		ji := s.rowSol[i]
		if ji < 0 {
			continue
		}
		u := s.rowCost[i] - s.cs[ji].v
		for e := s.start[i]; e < s.start[i+1]-1; e++ {
			if j := s.col[e]; s.mark[j] {
				// Feasible while cost - u - v >= 0.
				s.need[j] = math.Min(s.need[j], s.cost[e]-u)
			}
		}
	}
	for j := 0; j < C; j++ {
		if s.mark[j] && s.need[j] > s.cs[j].v {
			s.cs[j].v = s.need[j]
			s.lowered++
		}
	}
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

// minimizePrices lowers every price as far as the pairs found allow: to the least
// prices that still certify them (each column falls by the least of its own price and,
// for each job that could take it, what the job's own column falls plus the job's
// reduced cost there: a shortest-path problem from all columns at once).
//
// Optimal prices are far from unique, and a warm start pays for where they sit: after
// a cold solve (from coarse group prices, repairs included) some GPUs kept prices up to
// 0.8 whose holders gained about 0.1; the next round's searches, raising prices, soon
// made exiting (the job's dummy) its cheapest move, and on one bench seed 45 jobs did,
// leaving 45 GPUs free and priced for the repairs: 67M edges scanned instead of 24M.
// The least prices leave every job the most it can gain. It costs one search over the
// whole graph (about 30 ms at 20k), so it runs after a solve that did not start from an
// earlier one's pairs (cold, or from coarse prices) and after one that needed repairs;
// a warm solve's searches only raise prices where they went, and over rounds of churn
// that did not bring the exits back.
func (s *Sparse) minimizePrices() {
	n := len(s.colSol)
	cs := s.cs
	s.epoch++
	ep := s.epoch
	s.heap = s.heap[:0]
	for j := 0; j < n; j++ {
		// cs[j].d is how far the price may fall.
		cs[j].d = max(0, -cs[j].v)
		if s.colSol[j] >= 0 {
			s.heap.push(cs[j].d, int32(j))
		}
	}
	for len(s.heap) > 0 {
		dx, x := s.heap.pop()
		c := &cs[x]
		if c.scanned == ep || dx > c.d {
			continue
		}
		c.scanned = ep
		i := s.colSol[x]
		u := s.rowCost[i] - c.v
		for e := s.start[i]; e < s.start[i+1]; e++ {
			j := s.col[e]
			cj := &cs[j]
			if cj.scanned == ep {
				continue
			}
			if nd := dx + s.cost[e] - u - cj.v; nd < cj.d {
				cj.d = nd
				if s.colSol[j] >= 0 {
					s.heap.push(nd, j)
				}
			}
		}
	}
	for j := 0; j < n; j++ {
		cs[j].v += cs[j].d
	}
}
