package plan

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/muxflow/muxflow/matcher/assign"
)

// Top-k candidate lists, kept between rounds.
//
// A job's list is the first K distinct GPUs that fit it on its kind's hash ring,
// walked from a point hashed from the job's id. The ring holds ringPoints points per
// GPU (hashed from its UUID) of every GPU in the kind's "depth": its best groups
// (online profile and type), best first, until they hold alpha× as many GPUs as there
// are jobs, so that every job reaches past the GPUs all jobs want first, and each group
// gets a share of the list proportional to its size. (Plain top-k by weight fails on
// real clusters: replicas make weights tie, every job ranks the same few GPUs first,
// and most jobs end up with no GPU to win; on the Alibaba trace replay 513 of 2,948
// jobs paired, against 2,780 for greedy placement.)
//
// A list then depends only on the job (id, kind, memory), on which groups its kind's
// depth holds, and on the ring points its walk passed. So a round keeps every list
// whose walk no change reached: a GPU joining or leaving the ring, or whose free memory
// changed across the job's need, inside the walk's window. A GPU that changes group
// within the depth keeps its points (only its edges' weights change). The graph a warm
// round solves is the one a cold planner builds from the same reports, so the optimum
// is the same; only the work differs.
type incremental struct {
	round    uint64 // top-k rounds planned
	gpus     map[string]*gpuState
	colGPU   []*gpuState // by column; nil for a free column
	colFree  []float64   // by column: free memory
	colGroup []int32     // by column: group
	freeCols []int32
	groups   []*groupState
	groupIx  map[gkey]int32
	kinds    map[rankKey]*kindState
	rings    map[uint64]*ringState
	jobs     map[string]*jobState
	// prices are the last solve's column prices; solved says there was one.
	prices []float64
	solved bool
	// prev* are last round's pending jobs and eligible GPUs by position, cur* this
	// round's: a job or GPU in the same place as last round needs no map look-up.
	// (Every round solves, keeps the last solve's pairs or resets, so last round's
	// jobs are the last solve's, and each one's col its column there.)
	prevIDs, curIDs     []string
	prevJobs, curJobs   []*jobState
	prevUUIDs, curUUIDs []string
	prevGPUs, curGPUs   []*gpuState
	stamp               []uint32
	ep                  uint32
	mark                []uint32
	markEp              uint32
	g                   assign.Candidates
	events              []gpuEvent
}

type gkey struct {
	k   profileKey
	typ string
}

type rankKey struct {
	prof  profileKey
	types string
}

type gpuState struct {
	col    int32
	round  uint64
	group  int32
	free   float64
	hashes [ringPoints]uint64
	slotIx int32 // index in this round's slots
}

type groupState struct {
	key  profileKey
	typ  string
	hash uint64
	rep  gpuSlot // a private copy of one member (its online profile and type)
	size int
}

// kindState is what jobs of one kind (profile and type constraint) share: the weight
// of each group for them, the groups they may use best first, and this round's ring.
type kindState struct {
	job   Job
	gw    []float64    // by group; -Inf where a floor or the type rules it out
	pv    [][2]float64 // by group: predicted offline and online throughput
	order []int32      // groups of finite weight, best first
	ring  *ringState
	// member marks the depth's groups (by group) and sig hashes that set.
	member []bool
	sig    uint64
	// nonEmpty counts the depth's groups that have GPUs this round.
	nonEmpty int
	round    uint64
}

// ringState is a hash ring: either every GPU of the types a kind may use (full), shared
// by the kinds whose depth holds most of them, walks skipping the GPUs outside the
// job's depth, or only the GPUs of one depth (when it holds few of them), so that a
// walk never skips far.
type ringState struct {
	full   bool
	types  []string // a full ring's types; nil: any
	member []bool   // by group: fixed for a depth's ring, filled in as groups come for a full one
	points []ringPoint
	dirty  []dirtyPoint // this round's changes, by hash
	round  uint64
}

// dirtyPoint is a ring point whose GPU changed this round: its group (-1: not on the
// ring) went from oldGroup to newGroup, its free memory from oldFree to newFree.
type dirtyPoint struct {
	h                  uint64
	oldGroup, newGroup int32
	oldFree, newFree   float64
}

type jobState struct {
	kind          *kindState
	ring          *ringState
	sig           uint64 // the kind's depth when walked
	mem           float64
	at            uint64 // where the walk starts
	list          []int32
	hend          uint64 // hash of the walk's last point
	wrapped, full bool   // the walk passed the ring's end / covered the whole ring
	round         uint64
	col           int32 // column in the last solve, -1 for none
}

type gpuEvent struct {
	st                 *gpuState
	oldIn, newIn       bool
	oldGroup, newGroup int32
	oldFree, newFree   float64
}

// maxGroups bounds the groups kept between rounds: groups never go away (an empty one
// holds no GPUs), so when online profiles keep changing the state is dropped.
const maxGroups = 1 << 14

func (in *incremental) ringHas(r *ringState, g int32) bool {
	if g < 0 {
		return false
	}
	for r.full && int(g) >= len(r.member) {
		gi := len(r.member)
		r.member = append(r.member, len(r.types) == 0 || slices.Contains(r.types, in.groups[gi].typ))
	}
	return int(g) < len(r.member) && r.member[g]
}

func (k *kindState) has(g int32) bool { return g >= 0 && int(g) < len(k.member) && k.member[g] }

func (in *incremental) reset() { *in = incremental{} }

func (in *incremental) init() {
	if in.gpus == nil {
		in.gpus = map[string]*gpuState{}
		in.groupIx = map[gkey]int32{}
		in.kinds = map[rankKey]*kindState{}
		in.rings = map[uint64]*ringState{}
		in.jobs = map[string]*jobState{}
	}
}

func (in *incremental) allocCol() int32 {
	if n := len(in.freeCols); n > 0 {
		c := in.freeCols[n-1]
		in.freeCols = in.freeCols[:n-1]
		return c
	}
	c := int32(len(in.colGPU))
	in.colGPU = append(in.colGPU, nil)
	in.colFree = append(in.colFree, 0)
	in.colGroup = append(in.colGroup, -1)
	in.stamp = append(in.stamp, 0)
	in.mark = append(in.mark, 0)
	return c
}

func (in *incremental) groupOf(s gpuSlot, st *gpuState) int32 {
	if st != nil && st.group >= 0 {
		if gr := in.groups[st.group]; gr.key == s.key && gr.typ == s.gpu.Type {
			return st.group
		}
	}
	k := gkey{s.key, s.gpu.Type}
	if gi, ok := in.groupIx[k]; ok {
		return gi
	}
	gi := int32(len(in.groups))
	in.groupIx[k] = gi
	rep := *s.gpu
	if rep.Online != nil {
		on := *rep.Online
		rep.Online = &on
	}
	rep.Offline = nil
	in.groups = append(in.groups, &groupState{key: s.key, typ: s.gpu.Type, hash: k.k.hash() ^ hashString(k.typ),
		rep: gpuSlot{node: s.node, gpu: &rep, key: s.key}})
	return gi
}

// solveTopK plans a top-k round, keeping from the round before every list, price and
// pair that still holds.
func (p *Planner) solveTopK(pl *Plan, jobs []Job, slots []gpuSlot) ([]int, [][2]float64, error) {
	const alpha = 2
	in := &p.inc
	if len(in.groups) > maxGroups {
		in.reset()
	}
	in.init()
	in.round++
	round := in.round
	events := in.events[:0]
	in.curUUIDs, in.curGPUs = in.curUUIDs[:0], in.curGPUs[:0]
	var gone []int32
	for si := range slots {
		s := &slots[si]
		var st *gpuState
		if si < len(in.prevUUIDs) && in.prevUUIDs[si] == s.gpu.UUID {
			st = in.prevGPUs[si] // same GPU in the same place as last round: no look-up
		} else {
			st = in.gpus[s.gpu.UUID]
		}
		gid := in.groupOf(*s, st)
		free := s.gpu.MemoryFreeMiB
		if st == nil {
			st = &gpuState{col: in.allocCol(), group: -1}
			h := hashString(s.gpu.UUID)
			for v := range uint64(ringPoints) {
				st.hashes[v] = mix(h + v*0x9e3779b97f4a7c15)
			}
			in.gpus[s.gpu.UUID] = st
			in.colGPU[st.col] = st
			events = append(events, gpuEvent{st: st, oldGroup: -1, newIn: true, newGroup: gid, newFree: free})
		} else if st.group != gid || st.free != free {
			events = append(events, gpuEvent{st: st, oldIn: true, oldGroup: st.group, oldFree: st.free, newIn: true, newGroup: gid, newFree: free})
		}
		st.round, st.slotIx, st.group, st.free = round, int32(si), gid, free
		in.curUUIDs, in.curGPUs = append(in.curUUIDs, s.gpu.UUID), append(in.curGPUs, st)
		in.colFree[st.col], in.colGroup[st.col] = free, gid
	}
	if len(in.gpus) > len(slots) {
		for uuid, st := range in.gpus {
			if st.round != round {
				events = append(events, gpuEvent{st: st, oldIn: true, oldGroup: st.group, oldFree: st.free, newGroup: -1})
				delete(in.gpus, uuid)
				in.colGPU[st.col] = nil
				in.colGroup[st.col] = -1
				gone = append(gone, st.col)
			}
		}
	}
	in.events = events
	for _, e := range events {
		if e.oldIn {
			in.groups[e.oldGroup].size--
		}
		if e.newIn {
			in.groups[e.newGroup].size++
		}
	}

	// Kinds: weights and order (once per group), then this round's depth and ring.
	target := alpha * len(jobs)
	prepare := func(k *kindState) {
		k.round = round
		if len(k.gw) < len(in.groups) {
			for gi := len(k.gw); gi < len(in.groups); gi++ {
				gr := in.groups[gi]
				w, v := math.Inf(-1), [2]float64{}
				if k.job.allows(gr.typ) {
					w = p.weight(k.job, gr.rep)
					v[0], v[1] = p.predict(k.job.Profile, gr.rep)
				}
				k.gw, k.pv = append(k.gw, w), append(k.pv, v)
			}
			k.order = k.order[:0]
			for gi, w := range k.gw {
				if !math.IsInf(w, -1) {
					k.order = append(k.order, int32(gi))
				}
			}
			slices.SortFunc(k.order, func(a, b int32) int {
				switch {
				case k.gw[a] > k.gw[b]:
					return -1
				case k.gw[a] < k.gw[b]:
					return 1
				}
				// Equal weights (one service on several GPU types) in an order that
				// does not depend on which GPU a report lists first.
				if c := cmp.Compare(in.groups[a].hash, in.groups[b].hash); c != 0 {
					return c
				}
				return int(a - b)
			})
		}
		capacity, n, all := 0, 0, 0
		var sig uint64
		k.member = append(k.member[:0], make([]bool, len(in.groups))...)
		for _, gi := range k.order {
			if capacity >= target {
				break
			}
			if sz := in.groups[gi].size; sz > 0 {
				capacity += sz
				n++
				k.member[gi] = true
				sig ^= mix(uint64(gi) + 0x51ed270b27a1f3c5)
			}
		}
		for _, gr := range in.groups {
			if k.job.allows(gr.typ) {
				all += gr.size
			}
		}
		k.nonEmpty = n
		k.sig = sig ^ mix(uint64(n)<<32)
		// A depth that holds most GPUs of its types walks the shared ring of those types.
		full := 4*capacity >= all
		key := k.sig
		if full {
			key = mix(hashString(strings.Join(k.job.GPUTypes, "\x00")) ^ 0x2545f4914f6cdd1d)
		}
		r := in.rings[key]
		if r != nil && r.full != full {
			r = nil
		}
		if r != nil && r.round == round {
			k.ring = r
			return
		}
		if r == nil || r.round != round-1 {
			// A new ring (or one not kept up last round): built from scratch.
			r = &ringState{full: full}
			if full {
				r.types = slices.Clone(k.job.GPUTypes)
			} else {
				r.member = slices.Clone(k.member)
			}
			for c, st := range in.colGPU {
				if st != nil && in.ringHas(r, in.colGroup[c]) {
					for _, h := range st.hashes {
						r.points = append(r.points, ringPoint{h, int32(c)})
					}
				}
			}
			slices.SortFunc(r.points, cmpPoint)
			in.rings[key] = r
		} else {
			in.update(r, events)
		}
		r.round = round
		k.ring = r
	}

	g := &in.g
	g.Rows, g.Cols = len(jobs), len(in.colGPU)
	g.Start = append(g.Start[:0], 0)
	g.Col, g.Weight = g.Col[:0], g.Weight[:0]
	changed := len(events) > 0 || len(jobs) != len(in.prevIDs)
	in.curIDs, in.curJobs = in.curIDs[:0], in.curJobs[:0]
	hint := make([]int32, len(jobs))
	for i := range jobs {
		j := &jobs[i]
		rk := rankKey{keyOf(j.Profile), strings.Join(j.GPUTypes, "\x00")}
		k := in.kinds[rk]
		if k == nil {
			k = &kindState{job: *j}
			k.job.ID, k.job.MemoryMiB = "", 0
			in.kinds[rk] = k
		}
		if k.round != round {
			prepare(k)
		}
		var js *jobState
		if i < len(in.prevIDs) && in.prevIDs[i] == j.ID {
			js = in.prevJobs[i]
		} else {
			js = in.jobs[j.ID]
		}
		if js == nil {
			js = &jobState{col: -1, at: mix(hashString(j.ID))}
			in.jobs[j.ID] = js
		}
		if !changed && in.prevIDs[i] != j.ID {
			changed = true
		}
		mem := j.memory()
		if js.kind != k || js.mem != mem || js.sig != k.sig || js.ring != k.ring || js.round != round-1 || k.ring.affects(js) {
			js.kind, js.mem, js.ring, js.sig = k, mem, k.ring, k.sig
			in.walk(js, p.cfg.K)
			changed = true
		}
		js.round = round
		in.curIDs, in.curJobs = append(in.curIDs, j.ID), append(in.curJobs, js)
		hint[i] = js.col
		for _, c := range js.list {
			g.Col = append(g.Col, c)
			g.Weight = append(g.Weight, k.gw[in.colGroup[c]])
		}
		g.Start = append(g.Start, len(g.Col))
		if len(js.list) == 0 {
			pl.Unassigned[j.ID] = ReasonNoGPU
			if k.nonEmpty == 0 {
				for si := range slots {
					if fits(*j, slots[si].gpu) {
						pl.Unassigned[j.ID] = ReasonFloor
						break
					}
				}
			}
		}
	}
	pl.Stats.Edges = len(g.Col)
	in.prevIDs, in.curIDs = in.curIDs, in.prevIDs
	in.prevJobs, in.curJobs = in.curJobs, in.prevJobs
	in.prevUUIDs, in.curUUIDs = in.curUUIDs, in.prevUUIDs
	in.prevGPUs, in.curGPUs = in.curGPUs, in.prevGPUs
	if len(in.jobs) > len(jobs) {
		for id, js := range in.jobs {
			if js.round != round {
				delete(in.jobs, id)
			}
		}
	}
	for rk, k := range in.kinds {
		if k.round != round {
			delete(in.kinds, rk)
		}
	}
	for sig, r := range in.rings {
		if r.round != round {
			delete(in.rings, sig)
		}
	}
	defer func() {
		for _, c := range gone {
			in.freeCols = append(in.freeCols, c)
			in.colFree[c] = 0
			if c < int32(len(in.prices)) {
				in.prices[c] = 0
			}
		}
	}()

	out := make([]int, len(jobs))
	pred := make([][2]float64, len(jobs))
	result := func(i int, c int32) {
		out[i] = -1
		if c >= 0 {
			out[i] = int(in.colGPU[c].slotIx)
			pred[i] = in.prevJobs[i].kind.pv[in.colGroup[c]]
		}
	}
	if in.solved && !changed {
		// Nothing changed since the last solve: its pairs are still optimal.
		pl.Stats.WarmStart = true
		for i, js := range in.prevJobs {
			result(i, js.col)
		}
		return out, pred, nil
	}

	var warm *assign.Prices
	if in.solved {
		warm = in.warmPrices(hint, events, g.Cols)
		pl.Stats.WarmStart = true
	} else if len(jobs) > 4*coarseMin && g.Cols > 4*coarseMin && !p.noCoarse {
		// No previous round: get prices from a coarse round first.
		gid := make([]int, g.Cols)
		for c := range gid {
			gid[c] = len(in.groups) // free columns: a group of their own
			if in.colGPU[c] != nil {
				gid[c] = int(in.colGroup[c])
			}
		}
		var err error
		if warm, err = coarsePrices(g, gid, len(in.groups)+1); err != nil {
			return nil, nil, err
		}
		pl.Stats.CoarseStart = true
	}
	if solveHook != nil {
		solveHook(g, warm)
	}
	m, err := p.sparse.MaxWeightMatching(g, warm)
	if err != nil {
		in.reset()
		return nil, nil, fmt.Errorf("top-k matching: %w", err)
	}
	pl.Stats.Augmentations, pl.Stats.Repairs, pl.Stats.EdgesScanned = m.Augmentations, m.Repairs, m.Scanned
	pl.Stats.WarmFallback = m.FellBack
	in.prices = m.Prices.Col
	in.solved = true
	for i, c := range m.RowCol {
		in.prevJobs[i].col = int32(c)
		result(i, int32(c))
	}
	return out, pred, nil
}

// solveHook, when set (tests), sees each top-k solve's graph and warm start.
var solveHook func(g *assign.Candidates, warm *assign.Prices)

// warmPrices starts a round's solve from the last one's prices and pairs (hint: each
// row's column in the last solve).
//
// A GPU that still holds the job it held but changed group has a new weight for that
// job: its price moves by the same amount, so that the job gains there what it gained
// before and stays as content as it was (a group's mean price, as before, left many
// jobs preferring the GPU or leaving it, each a search). A GPU no pending job held
// last round (its job left, or it is new) starts free of charge: it must end priced 0
// unless someone takes it, and the price of a job that is gone says nothing about it;
// the solver then lowers what such GPUs cost once the jobs have settled
// (assign.Sparse's warm start).
func (in *incremental) warmPrices(hint []int32, events []gpuEvent, cols int) *assign.Prices {
	warm := &assign.Prices{Col: make([]float64, cols), RowCol: hint}
	copy(warm.Col, in.prices)
	holder := make([]int32, cols)
	for c := range holder {
		holder[c] = -1
	}
	for i, c := range hint {
		if c >= 0 && int(c) < cols {
			holder[c] = int32(i)
		}
	}
	for _, e := range events {
		if !e.oldIn || !e.newIn || e.oldGroup == e.newGroup {
			continue
		}
		c := e.st.col
		if holder[c] < 0 {
			continue
		}
		k := in.prevJobs[holder[c]].kind
		if wo, wn := k.gw[e.oldGroup], k.gw[e.newGroup]; !math.IsInf(wo, -1) && !math.IsInf(wn, -1) {
			warm.Col[c] = max(0, warm.Col[c]+wn-wo)
		}
	}
	for c := range warm.Col {
		if holder[c] < 0 || in.colGPU[c] == nil {
			warm.Col[c] = 0
		}
	}
	return warm
}

func cmpPoint(a, b ringPoint) int {
	if c := cmp.Compare(a.h, b.h); c != 0 {
		return c
	}
	return cmp.Compare(a.slot, b.slot)
}

// update applies this round's GPU changes to a ring kept from last round and records
// the points that changed.
func (in *incremental) update(r *ringState, events []gpuEvent) {
	r.dirty = r.dirty[:0]
	var adds []ringPoint
	in.markEp++
	if in.markEp == 0 {
		clear(in.mark)
		in.markEp = 1
	}
	removed := false
	for _, e := range events {
		oldIn, newIn := e.oldIn && in.ringHas(r, e.oldGroup), e.newIn && in.ringHas(r, e.newGroup)
		if !oldIn && !newIn {
			continue
		}
		d := dirtyPoint{oldGroup: -1, newGroup: -1, oldFree: e.oldFree, newFree: e.newFree}
		if oldIn {
			d.oldGroup = e.oldGroup
		}
		if newIn {
			d.newGroup = e.newGroup
		}
		for _, h := range e.st.hashes {
			d.h = h
			r.dirty = append(r.dirty, d)
		}
		switch {
		case oldIn && !newIn:
			removed = true
			in.mark[e.st.col] = in.markEp
		case newIn && !oldIn:
			for _, h := range e.st.hashes {
				adds = append(adds, ringPoint{h, e.st.col})
			}
		}
	}
	if removed {
		kept := r.points[:0]
		for _, pt := range r.points {
			if in.mark[pt.slot] != in.markEp {
				kept = append(kept, pt)
			}
		}
		r.points = kept
	}
	if len(adds) > 0 {
		slices.SortFunc(adds, cmpPoint)
		merged := make([]ringPoint, 0, len(r.points)+len(adds))
		a, b := 0, 0
		for a < len(r.points) || b < len(adds) {
			if b == len(adds) || a < len(r.points) && cmpPoint(r.points[a], adds[b]) < 0 {
				merged = append(merged, r.points[a])
				a++
			} else {
				merged = append(merged, adds[b])
				b++
			}
		}
		r.points = merged
	}
	slices.SortFunc(r.dirty, func(a, b dirtyPoint) int { return cmp.Compare(a.h, b.h) })
}

// affects says whether this round's changes to the ring reach the job's last walk.
func (r *ringState) affects(js *jobState) bool {
	if len(r.dirty) == 0 {
		return false
	}
	k := js.kind
	hit := func(d dirtyPoint) bool {
		oldIn, newIn := k.has(d.oldGroup), k.has(d.newGroup)
		return oldIn != newIn || oldIn && (js.mem <= d.oldFree) != (js.mem <= d.newFree)
	}
	if js.full {
		for _, d := range r.dirty {
			if hit(d) {
				return true
			}
		}
		return false
	}
	i, _ := slices.BinarySearchFunc(r.dirty, js.at, func(d dirtyPoint, h uint64) int { return cmp.Compare(d.h, h) })
	for ; i < len(r.dirty) && (js.wrapped || r.dirty[i].h <= js.hend); i++ {
		if hit(r.dirty[i]) {
			return true
		}
	}
	if js.wrapped {
		for i = 0; i < len(r.dirty) && r.dirty[i].h <= js.hend; i++ {
			if hit(r.dirty[i]) {
				return true
			}
		}
	}
	return false
}

// walk rebuilds a job's list: the first K distinct GPUs that fit it on its ring, from
// its point on.
func (in *incremental) walk(js *jobState, K int) {
	in.ep++
	if in.ep == 0 {
		clear(in.stamp)
		in.ep = 1
	}
	ep := in.ep
	pts, kind := js.ring.points, js.kind
	js.list = js.list[:0]
	n := len(pts)
	js.full, js.wrapped, js.hend = true, false, 0
	if n == 0 {
		return
	}
	start, _ := slices.BinarySearchFunc(pts, js.at, func(e ringPoint, x uint64) int { return cmp.Compare(e.h, x) })
	k, idx := 0, start
	for ; k < n && len(js.list) < K; k++ {
		if idx == n {
			idx = 0
		}
		c := pts[idx].slot
		idx++
		if in.stamp[c] == ep || !kind.has(in.colGroup[c]) {
			continue
		}
		in.stamp[c] = ep
		if in.colFree[c] >= js.mem {
			js.list = append(js.list, c)
		}
	}
	js.full = len(js.list) < K
	last := start + k - 1
	js.wrapped = last >= n
	js.hend = pts[last%n].h
}
