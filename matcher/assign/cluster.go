package assign

import (
	"math"
	"slices"
)

// Clusters: tight regions of the market kept between searches.
//
// A warm re-plan's last searches end, one after another, at the few free GPUs left,
// and each crosses the same regions of the market: plateaus of thousands of GPUs that
// a search reaches all at one distance (11,000-12,000 GPUs, then a second plateau of
// 3,000-6,000 one gap of 1e-6 to 3e-4 above it), so that each search settled every one
// of them again (1M edges each for the last 20 or so searches of a round). A cluster
// keeps such a plateau between searches:
//
//   - its columns' prices move together: a member holds its price less the cluster's
//     offset (kv), and a search that reaches the cluster settles all of it at the
//     distance it first reached a member, and raises it by moving kv alone;
//   - its boundary is kept: for each column outside, the cheapest edge to it from a
//     member's row, in a heap keyed by a lower bound of that edge's reduced cost (less
//     kv, so that raising the cluster lowers them all at once; prices outside only
//     rise during the searches, which keeps the bounds). A search that has settled the
//     cluster relaxes only the boundary edges nearer than what it would settle next;
//     the members' rows are not read. (One entry per row instead, expanding the row,
//     read 5,000-10,000 of 11,000 rows a search: most rows have some edge into the
//     next plateau up.);
//   - it is strongly connected by edges of zero reduced cost when it is formed (from
//     the plateau a search settled), so that a path can cross it from any member to
//     any other; clusterPath finds one, searching from both ends.
//
// Settling a whole cluster at one distance keeps the search exact whether or not each
// member is reachable at that distance: the labels so given are never more than an
// edge's length above the label of the edge's tail (the cluster is settled when a
// member is the nearest unsettled column, and its rows' edges out are relaxed before
// anything farther is settled), so the price update keeps every reduced cost
// non-negative. What such a label does not give is a path: a path that crosses a
// cluster needs one of zero reduced cost from the member it entered by to the one
// whose row it leaves by. Paths move rows into and out of a cluster, which can leave a
// member unreachable; when clusterPath finds no way, the search drops that cluster
// (its members get their own prices back) and starts again (prices are not touched
// until a search has its path), so the answer stays exact.
type clusters struct {
	member []uint64 // by column: a member of some cluster
	cid    []int32  // by column: its cluster, where a member
	list   []cluster
	on     []int32 // the clusters the current search has settled
	// rowIn: by row, the cluster it was last entered in (-1: none)
	rowIn []int32
	// in lists, by head column (head, next), the edges of the clusters' rows, as rows
	// enter (inOf: the cluster formation, by gen, a row's are listed for): to a
	// member of the row's cluster only those of zero reduced cost (clusterPath's
	// backward steps), to a column outside all (for leaveRow)
	head []int32
	in   []inEdge
	inOf []int32
	gen  int32
	// clusterPath's searches: marks, parents and the edge costs to them, queues
	fvis, bvis []uint32
	par, bpar  []int32
	pc, bpc    []float64
	bfs        uint32
	fq, bq     []int32
	fwd        []int32
	// formClusters' work: the plateau's columns by level, their index, arcs, and the
	// strongly connected components
	byLevel              []int32
	ix                   []int32
	adjStart, adj        []int32
	index, low, comp     []int32
	stack, call, callPos []int32
	onStack              []bool
	// made counts the clusters made, settled the searches that settled one, noPath
	// those that found no way through one (tests); failed counts the latter in this
	// solve.
	made, settled, noPath, failed int
	// noWay makes clusterPath find no way (tests).
	noWay bool
	// enabled: this solve makes clusters; alive: how many there are.
	enabled bool
	alive   int
}

// maxFailed is the number of searches in a solve that may find no way through a
// cluster before no more are made: each costs a search again and the next cluster's
// making, and a market whose plateaus are not held together by their ties would pay
// that for every search.
const maxFailed = 4

// cluster is one cluster: its members, and its boundary: for each column y outside,
// the member's row with the cheapest edge to y (brow, bcost) and that edge's c - u of
// the row less kv (bval: the reduced cost to y is bval[y] + kv - v[y]), kept in heap
// by a lower bound of that reduced cost less kv (bkey: the key of y's live entry).
type cluster struct {
	alive bool
	gen   int32
	cols  []int32
	kv    float64 // added to a member's stored v to give its v (≤ 0)
	bval  []float64
	bkey  []float64
	brow  []int32
	bcost []float64
	heap  minHeap // (key, column outside)
	// building: rows are being entered at the cluster's making (bound: the columns
	// given a finite bval), and entries wait for the end
	building bool
	bound    []int32
	// this search: settled at distance d, entered by column entry; the boundary
	// columns it popped
	on     bool
	d      float64
	entry  int32
	popped []int32
}

// inEdge is an edge from row, of cost cost, listed under its head column.
type inEdge struct {
	row, next int32
	cost      float64
}

const (
	// clusterMin is the number of columns a plateau needs to become a cluster:
	// fewer are cheaper to search again than to keep.
	clusterMin = 2048
	// maxClusters bounds the clusters kept at once (each has arrays by column).
	maxClusters = 4
	// minLeft is the number of searches that must be left for a cluster to be made:
	// making one costs about two searches through it, and one made 3 searches from
	// the end of BenchmarkReplan's round saved fewer edges than it cost and took
	// 17-30 % more time.
	minLeft = 6
)

func (k *clusters) has(j int32) bool { return k.member[j>>6]&(1<<(j&63)) != 0 }

// resetClusters sizes the arrays for n columns and rows rows, with no cluster.
func (s *Sparse) resetClusters(n, rows int) {
	k := &s.k
	k.member = grow(k.member, (n+63)/64)
	clear(k.member)
	k.failed = 0
	k.cid = grow(k.cid, n)
	for c := range k.list {
		k.list[c].alive = false
	}
	k.alive = 0
	k.on = k.on[:0]
	k.rowIn = grow(k.rowIn, rows)
	for i := range k.rowIn {
		k.rowIn[i] = -1
	}
	k.head = grow(k.head, n)
	for j := range k.head {
		k.head[j] = -1
	}
	k.in = k.in[:0]
	if cap(k.in) < len(s.col)/2 {
		// A cluster's rows list about half the edges. Grown by appends in the round
		// that first made clusters, the lists were copied over and over (a third of
		// that round's time); made here, at a solver's first solve, they are reused
		// by every later one, as the other buffers are.
		k.in = make([]inEdge, 0, len(s.col))
	}
	k.inOf = grow(k.inOf, rows)
	for i := range k.inOf {
		k.inOf[i] = -1
	}
	k.fvis, k.bvis = grow(k.fvis, n), grow(k.bvis, n)
	clear(k.fvis)
	clear(k.bvis)
	k.bfs = 0
	k.par, k.bpar = grow(k.par, n), grow(k.bpar, n)
	k.pc, k.bpc = grow(k.pc, n), grow(k.bpc, n)
	k.ix = grow(k.ix, n)
}

// dissolveCluster gives cluster c's members their own prices and drops it.
func (s *Sparse) dissolveCluster(c int32) {
	k := &s.k
	cl := &k.list[c]
	for _, x := range cl.cols {
		s.cs[x].v += cl.kv
		k.member[x>>6] &^= 1 << (x & 63)
		if r := s.colSol[x]; r >= 0 && k.rowIn[r] == c {
			k.rowIn[r] = -1
		}
	}
	// The lists under columns outside keep this cluster's rows' edges: they are
	// skipped by rowIn, and emptied with the last cluster.
	cl.alive, cl.on, cl.kv = false, false, 0
	k.alive--
	cl.cols, cl.heap, cl.popped = cl.cols[:0], cl.heap[:0], cl.popped[:0]
}

// dissolveClusters drops every cluster (the searches are done: what follows reads each
// column's own price).
func (s *Sparse) dissolveClusters() {
	k := &s.k
	for c := range k.list {
		if k.list[c].alive {
			s.dissolveCluster(int32(c))
		}
	}
	s.clearLists()
}

// clearLists empties the lists of edges in (no cluster is alive to read them).
func (s *Sparse) clearLists() {
	k := &s.k
	for _, e := range k.in {
		k.inOf[e.row] = -1
	}
	for j := range k.head {
		k.head[j] = -1
	}
	k.in = k.in[:0]
}

// v is column y's price (JV's v), member or not.
func (s *Sparse) v(y int32) float64 {
	if s.k.has(y) {
		return s.cs[y].v + s.k.list[s.k.cid[y]].kv
	}
	return s.cs[y].v
}

// offer makes row r's edge (cost c) to column y cluster cl's cheapest to y if it is:
// val is the edge's c - u less kv.
func (cl *cluster) offer(y, r int32, c, val, vy float64) {
	if val >= cl.bval[y] {
		return
	}
	if cl.building && math.IsInf(cl.bval[y], 1) {
		cl.bound = append(cl.bound, y)
	}
	cl.bval[y], cl.brow[y], cl.bcost[y] = val, r, c
	if !cl.building {
		cl.bkey[y] = val - vy
		cl.heap.push(cl.bkey[y], y)
	}
}

// enterRow adds row r, if it holds a member of a cluster it was not entered in, to that
// cluster's boundary; the first time, it also lists the row's edges (see in).
func (s *Sparse) enterRow(r int32) {
	k := &s.k
	x := s.rowSol[r]
	if x < 0 || !k.has(x) {
		return
	}
	c := k.cid[x]
	if k.rowIn[r] == c {
		return
	}
	k.rowIn[r] = c
	cl := &k.list[c]
	base := s.rowCost[r] - s.cs[x].v // u less kv
	list := k.inOf[r] != cl.gen
	k.inOf[r] = cl.gen
	s.scanned += s.start[r+1] - s.start[r]
	for e := s.start[r]; e < s.start[r+1]; e++ {
		y := s.col[e]
		inside := k.has(y) && k.cid[y] == c
		if list && y != x && (!inside || s.cost[e]-base-s.cs[y].v <= s.eps) {
			k.in = append(k.in, inEdge{row: r, next: k.head[y], cost: s.cost[e]})
			k.head[y] = int32(len(k.in) - 1)
		}
		if !inside {
			cl.offer(y, r, s.cost[e], s.cost[e]-base, s.v(y))
		}
	}
}

// leaveRow takes row r, which no longer holds a member of the cluster it was entered
// in, out of that cluster's boundary: each column whose cheapest edge was r's gets the
// cheapest of the cluster's rows' edges to it again (from the column's list).
func (s *Sparse) leaveRow(r int32) {
	k := &s.k
	c := k.rowIn[r]
	if c < 0 {
		return
	}
	if x := s.rowSol[r]; x >= 0 && k.has(x) && k.cid[x] == c {
		return
	}
	k.rowIn[r] = -1
	cl := &k.list[c]
	for e := s.start[r]; e < s.start[r+1]; e++ {
		y := s.col[e]
		if cl.brow[y] != r || math.IsInf(cl.bval[y], 1) {
			continue
		}
		cl.bval[y] = math.Inf(1)
		vy := s.v(y)
		for q := k.head[y]; q >= 0; q = k.in[q].next {
			i := k.in[q].row
			s.scanned++
			if k.rowIn[i] != c {
				continue
			}
			xi := s.rowSol[i]
			cl.offer(y, i, k.in[q].cost, k.in[q].cost-(s.rowCost[i]-s.cs[xi].v), vy)
		}
	}
}

// nextBoundary pops, from the clusters the search has settled, the boundary column
// that may lie nearest, if nearer than limit; it returns the column, its distance
// through the cluster, and the row and cost of the edge (-1 if none is nearer).
func (s *Sparse) nextBoundary(limit float64) (y int32, d float64, row int32, cost float64) {
	k := &s.k
	for {
		best, bc := limit, int32(-1)
		for _, c := range k.on {
			cl := &k.list[c]
			for len(cl.heap) > 0 {
				top := cl.heap[0]
				if top.d != cl.bkey[top.j] || math.IsInf(cl.bval[top.j], 1) {
					cl.heap.pop() // a stale entry
					continue
				}
				if d := cl.d + top.d + cl.kv; d < best {
					best, bc = d, c
				}
				break
			}
		}
		if bc < 0 {
			return -1, 0, -1, 0
		}
		cl := &k.list[bc]
		key, y := cl.heap.pop()
		cl.bkey[y] = math.NaN() // no live entry
		cl.popped = append(cl.popped, y)
		// The key was a bound: prices outside rise, which only lengthens the edge.
		if now := cl.bval[y] - s.v(y); now > key {
			cl.bkey[y] = now
			cl.heap.push(now, y)
			continue
		}
		return y, cl.d + cl.bval[y] + cl.kv - s.v(y), cl.brow[y], cl.bcost[y]
	}
}

// refreshBoundary gives the columns a search popped from its clusters' heaps their
// entries back, with keys at the prices the search left.
func (s *Sparse) refreshBoundary() {
	k := &s.k
	for _, c := range k.on {
		cl := &k.list[c]
		for _, y := range cl.popped {
			if math.IsInf(cl.bval[y], 1) || k.has(y) && k.cid[y] == c {
				continue
			}
			if math.IsNaN(cl.bkey[y]) {
				cl.bkey[y] = cl.bval[y] - s.v(y)
				cl.heap.push(cl.bkey[y], y)
			}
		}
		cl.popped = cl.popped[:0]
	}
}

// formClusters makes clusters of the plateaus the search just done settled (prices
// updated, path flipped): for each level at which at least clusterMin columns were
// settled, the strongly connected parts (by edges of zero reduced cost) of at least
// clusterMin columns.
func (s *Sparse) formClusters() {
	k := &s.k
	// A cluster pays only if a few more searches are to come (minLeft), and only a
	// plateau with many ways of zero length between its columns holds a large
	// strongly connected part.
	if !k.enabled || s.left < minLeft || len(s.ready) < s.clusterMin() || s.ties < s.clusterMin() || k.failed >= maxFailed {
		return
	}
	cs := s.cs
	lv := append(k.byLevel[:0], s.ready...)
	slices.SortFunc(lv, func(a, b int32) int {
		switch {
		case cs[a].d < cs[b].d:
			return -1
		case cs[a].d > cs[b].d:
			return 1
		}
		return 0
	})
	k.byLevel = lv
	for lo := 0; lo < len(lv); {
		hi := lo + 1
		for hi < len(lv) && cs[lv[hi]].d <= cs[lv[lo]].d+s.eps {
			hi++
		}
		if hi-lo >= s.clusterMin() {
			s.formFrom(lv[lo:hi])
		}
		lo = hi
	}
}

// formFrom makes clusters of the large strongly connected parts of plateau p.
func (s *Sparse) formFrom(p []int32) {
	k := &s.k
	n := len(p)
	for q, x := range p {
		k.ix[x] = int32(q)
	}
	inP := func(y int32) bool {
		q := k.ix[y]
		return q >= 0 && int(q) < n && p[q] == y
	}
	// Arcs x -> y: x's row has an edge of zero reduced cost to y.
	k.adjStart = append(k.adjStart[:0], 0)
	k.adj = k.adj[:0]
	for _, x := range p {
		r := s.colSol[x]
		u := s.rowCost[r] - s.cs[x].v
		s.scanned += s.start[r+1] - s.start[r]
		for e := s.start[r]; e < s.start[r+1]; e++ {
			if y := s.col[e]; y != x && !k.has(y) && inP(y) && s.cost[e]-u-s.cs[y].v <= s.eps {
				k.adj = append(k.adj, k.ix[y])
			}
		}
		k.adjStart = append(k.adjStart, int32(len(k.adj)))
	}
	// Components in the order they were found, so that a round's plan does not
	// depend on a map's order.
	size := make([]int, s.strongComponents(n))
	for _, c := range k.comp[:n] {
		size[c]++
	}
	for c, sz := range size {
		if sz < s.clusterMin() {
			continue
		}
		id, alive := -1, false
		for q := range k.list {
			if !k.list[q].alive && id < 0 {
				id = q
			}
			alive = alive || k.list[q].alive
		}
		if !alive {
			// What the lists hold belongs to clusters dropped: start them over
			// rather than let them grow with every cluster made.
			s.clearLists()
		}

		if id < 0 {
			if len(k.list) >= maxClusters {
				return
			}
			k.list = append(k.list, cluster{})
			id = len(k.list) - 1
		}
		cl := &k.list[id]
		k.made++
		k.gen++
		cl.alive, cl.kv, cl.gen = true, 0, k.gen
		k.alive++
		n := len(s.colSol)
		cl.bval, cl.bkey = grow(cl.bval, n), grow(cl.bkey, n)
		cl.brow, cl.bcost = grow(cl.brow, n), grow(cl.bcost, n)
		for j := range cl.bval {
			cl.bval[j] = math.Inf(1)
		}
		for q, x := range p {
			if k.comp[q] == int32(c) {
				k.member[x>>6] |= 1 << (x & 63)
				k.cid[x] = int32(id)
				cl.cols = append(cl.cols, x)
			}
		}
		cl.building, cl.bound = true, cl.bound[:0]
		for _, x := range cl.cols {
			s.enterRow(s.colSol[x])
		}
		cl.building = false
		for _, y := range cl.bound {
			cl.bkey[y] = cl.bval[y] - s.v(y)
			cl.heap.push(cl.bkey[y], y)
		}
	}
}

// visit is Tarjan's first visit of node v, numbered *next: it goes on the component
// stack and on the call stack, its edges to be walked from the first.
func (k *clusters) visit(v int32, next *int32) {
	k.index[v], k.low[v] = *next, *next
	*next++
	k.stack = append(k.stack, v)
	k.onStack[v] = true
	k.call = append(k.call, v)
	k.callPos = append(k.callPos, k.adjStart[v])
}

// strongComponents labels the n nodes of k.adjStart/k.adj with their strongly connected
// component (Tarjan's algorithm, without recursion) in k.comp, and returns how many
// there are.
func (s *Sparse) strongComponents(n int) int {
	k := &s.k
	k.index, k.low, k.comp = grow(k.index, n), grow(k.low, n), grow(k.comp, n)
	k.onStack = grow(k.onStack, n)
	for q := 0; q < n; q++ {
		k.index[q] = -1
		k.onStack[q] = false
	}
	k.stack, k.call, k.callPos = k.stack[:0], k.call[:0], k.callPos[:0]
	next, comps := int32(0), 0
	for root := int32(0); int(root) < n; root++ {
		if k.index[root] >= 0 {
			continue
		}
		k.visit(root, &next)
		for len(k.call) > 0 {
			t := len(k.call) - 1
			v := k.call[t]
			if pos := k.callPos[t]; pos < k.adjStart[v+1] {
				k.callPos[t]++
				w := k.adj[pos]
				switch {
				case k.index[w] < 0:
					k.visit(w, &next)
				case k.onStack[w]:
					k.low[v] = min(k.low[v], k.index[w])
				}
				continue
			}
			k.call, k.callPos = k.call[:t], k.callPos[:t]
			if t > 0 {
				u := k.call[t-1]
				k.low[u] = min(k.low[u], k.low[v])
			}
			if k.low[v] == k.index[v] {
				for {
					w := k.stack[len(k.stack)-1]
					k.stack = k.stack[:len(k.stack)-1]
					k.onStack[w] = false
					k.comp[w] = int32(comps)
					if w == v {
						break
					}
				}
				comps++
			}
		}
	}
	return comps
}

// clusterPath finds a path of edges of zero reduced cost (to eps) inside a cluster
// from member a to member b, and sets pred and predCost of its columns after a, so
// that the path flip can run through it. It reports whether there was one.
//
// A breadth-first search from a alone crossed most of the cluster before it met b
// (11,000 of 11,600 columns); this one searches from both ends, forward over the
// rows' edges and backward over the lists of edges in, each step on the side with the
// shorter queue, and the two meet after a few hundred columns.
func (s *Sparse) clusterPath(a, b int32) bool {
	k := &s.k
	if k.noWay {
		return false
	}
	if a == b {
		return true
	}
	c := k.cid[a]
	st := k.mark()
	cs, colSol, rowSol, start, col, cost := s.cs, s.colSol, s.rowSol, s.start, s.col, s.cost
	same := func(y int32) bool { return k.has(y) && k.cid[y] == c }
	fq := append(k.fq[:0], a)
	bq := append(k.bq[:0], b)
	k.fvis[a], k.bvis[b] = st, st
	meet := int32(-1)
	fh, bh := 0, 0
	for meet < 0 && fh < len(fq) && bh < len(bq) {
		if len(fq)-fh <= len(bq)-bh {
			x := fq[fh]
			fh++
			r := colSol[x]
			// Members' stored prices share the offset, so it cancels in a member's
			// reduced cost to another member.
			u := s.rowCost[r] - cs[x].v
			s.scanned += start[r+1] - start[r]
			for e := start[r]; e < start[r+1]; e++ {
				y := col[e]
				if k.fvis[y] == st || !same(y) || cost[e]-u-cs[y].v > s.eps {
					continue
				}
				k.fvis[y] = st
				k.par[y], k.pc[y] = x, cost[e]
				if k.bvis[y] == st {
					meet = y
					break
				}
				fq = append(fq, y)
			}
			continue
		}
		y := bq[bh]
		bh++
		for q := k.head[y]; q >= 0; q = k.in[q].next {
			r := k.in[q].row
			x := rowSol[r]
			if x < 0 || x == y || k.bvis[x] == st || !same(x) {
				continue
			}
			s.scanned++
			if k.in[q].cost-(s.rowCost[r]-cs[x].v)-cs[y].v > s.eps {
				continue
			}
			k.bvis[x] = st
			k.bpar[x], k.bpc[x] = y, k.in[q].cost
			if k.fvis[x] == st {
				meet = x
				break
			}
			bq = append(bq, x)
		}
	}
	k.fq, k.bq = fq, bq
	if meet < 0 {
		return false
	}
	// The forward part (a .. meet) and the backward part (meet .. b) are each simple;
	// cut the walk at the first forward column the backward part also holds.
	fwd := k.fwd[:0]
	for x := meet; ; x = k.par[x] {
		fwd = append(fwd, x)
		if x == a {
			break
		}
	}
	slices.Reverse(fwd)
	k.fwd = fwd
	mk := k.mark()
	for x := meet; ; x = k.bpar[x] {
		k.bvis[x] = mk
		if x == b {
			break
		}
	}
	z := 0
	for k.bvis[fwd[z]] != mk {
		z++
	}
	for q := 1; q <= z; q++ {
		y := fwd[q]
		s.pred[y], s.predCost[y] = colSol[k.par[y]], k.pc[y]
	}
	for x := fwd[z]; x != b; x = k.bpar[x] {
		y := k.bpar[x]
		s.pred[y], s.predCost[y] = colSol[x], k.bpc[x]
	}
	return true
}

// mark returns a fresh stamp for clusterPath's marks.
func (k *clusters) mark() uint32 {
	k.bfs++
	if k.bfs == 0 { // wrapped: marks from 2^32 searches ago would look current
		clear(k.fvis)
		clear(k.bvis)
		k.bfs = 1
	}
	return k.bfs
}
