// Package plan turns what the cluster reports into a pairing plan: which
// pending offline job goes to which online GPU. It applies the hard
// constraints (GPU health, type, free memory, one offline job per GPU, a
// floor on the online workload's predicted throughput), weighs every allowed
// pair by predicted normalised throughput, and solves the maximum-weight
// matching exactly or, at cluster scale, over top-k candidate lists
// warm-started from the previous round.
package plan

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/muxflow/muxflow/matcher/assign"
	"github.com/muxflow/muxflow/matcher/predict"
	"github.com/muxflow/muxflow/matcher/profile"
)

// Job is a pending offline workload.
type Job struct {
	// ID is the pod's "namespace/name". Required, unique.
	ID string `json:"id"`
	// Profile is the job's solo profile. Required.
	Profile profile.Profile `json:"profile"`
	// MemoryMiB is the GPU memory the job needs; 0 means Profile.MemoryMiB.
	MemoryMiB float64 `json:"memory_mib,omitempty"`
	// GPUTypes lists the GPU types the job may use; empty means any.
	GPUTypes []string `json:"gpu_types,omitempty"`
}

func (j Job) memory() float64 {
	if j.MemoryMiB > 0 {
		return j.MemoryMiB
	}
	return j.Profile.MemoryMiB
}

// Validate checks a job.
func (j Job) Validate() error {
	if j.ID == "" {
		return fmt.Errorf("%w: job without id", profile.ErrInvalid)
	}
	if err := j.Profile.Validate(); err != nil {
		return fmt.Errorf("job %s: %w", j.ID, err)
	}
	if math.IsNaN(j.MemoryMiB) || math.IsInf(j.MemoryMiB, 0) || j.MemoryMiB < 0 {
		return fmt.Errorf("%w: job %s memory_mib %v", profile.ErrInvalid, j.ID, j.MemoryMiB)
	}
	return nil
}

// Mode selects the solver.
type Mode string

// Modes. Auto solves exactly while the dense problem is small and switches
// to top-k candidates beyond Config.ExactMaxCells.
const (
	Auto  Mode = "auto"
	Exact Mode = "exact"
	TopK  Mode = "topk"
)

// Config tunes a Planner.
type Config struct {
	// Predictor weighs pairs. Required.
	Predictor predict.Predictor
	// OnlineWeight adds this multiple of the online workload's predicted
	// normalised throughput to each edge; 0 (the default) weighs by offline
	// throughput alone, as online work is protected by the node's SM
	// allocation anyway.
	OnlineWeight float64
	// MinOnlineTput refuses pairs that would leave the online workload
	// below this predicted normalised throughput; default 0.8.
	MinOnlineTput float64
	// MinTput refuses pairs predicted to give the offline job less than
	// this; default 0.05.
	MinTput float64
	// Mode picks the solver; default Auto.
	Mode Mode
	// K is the candidate list length in top-k mode; default 64.
	K int
	// ExactMaxCells is the largest jobs×GPUs solved exactly in Auto mode;
	// default 4,194,304 (2048×2048: well under a second).
	ExactMaxCells int
}

func (c Config) withDefaults() Config {
	if c.MinOnlineTput == 0 {
		c.MinOnlineTput = 0.8
	}
	if c.MinTput == 0 {
		c.MinTput = 0.05
	}
	if c.Mode == "" {
		c.Mode = Auto
	}
	if c.K == 0 {
		c.K = 64
	}
	if c.ExactMaxCells == 0 {
		c.ExactMaxCells = 2048 * 2048
	}
	return c
}

// Assignment places one job on one GPU.
type Assignment struct {
	Job     string `json:"job"`
	Node    string `json:"node"`
	GPU     string `json:"gpu"`
	GPUType string `json:"gpu_type"`
	// Online is the online workload sharing the GPU, if any.
	Online string `json:"online,omitempty"`
	// Tput and OnlineTput are the predicted normalised throughputs.
	Tput       float64 `json:"predicted_tput"`
	OnlineTput float64 `json:"predicted_online_tput"`
	Weight     float64 `json:"weight"`
}

// Plan is one round's result, as `muxmatch serve` publishes it.
type Plan struct {
	Generation  int64        `json:"generation"`
	Time        time.Time    `json:"time"`
	Predictor   string       `json:"predictor"`
	Mode        Mode         `json:"mode"`
	Assignments []Assignment `json:"assignments"`
	// Unassigned maps each job left out to why.
	Unassigned map[string]string `json:"unassigned,omitempty"`
	Stats      Stats             `json:"stats"`
}

// Stats describe a round.
type Stats struct {
	Jobs          int     `json:"jobs"`
	GPUs          int     `json:"gpus"`
	EligibleGPUs  int     `json:"eligible_gpus"`
	Edges         int     `json:"edges"`
	TotalWeight   float64 `json:"total_weight"`
	SolveSeconds  float64 `json:"solve_seconds"`
	Augmentations int     `json:"augmentations,omitempty"`
	// Repairs counts the warm start's repair rounds (assign.Matching.Repairs).
	Repairs   int  `json:"repairs,omitempty"`
	WarmStart bool `json:"warm_start,omitempty"`
	// CoarseStart says the first round started from a coarse round's prices.
	CoarseStart bool `json:"coarse_start,omitempty"`
}

// Reasons a job can be left out.
const (
	ReasonNoGPU  = "no healthy GPU with the memory and type it needs"
	ReasonFloor  = "every GPU it fits is predicted to leave it or the online work below the throughput floors"
	ReasonOutbid = "eligible GPUs went to pairs of higher predicted throughput"
)

// Planner computes plans round after round; it keeps GPU prices between
// rounds to warm-start the top-k solver. Not safe for concurrent use.
type Planner struct {
	cfg    Config
	gen    int64
	prices map[string]float64
	dense  assign.Dense
	sparse assign.Sparse
	cache  map[pairKey][2]float64
	// placed is last top-k round's pairing, job id → GPU UUID: the warm start's
	// tie-breaker (assign.Prices.RowCol).
	placed map[string]string
	// prints is what each GPU's edges depended on last round (group and free
	// memory): a GPU whose print changed starts from its group's price.
	prints map[string]slotPrint
	// noCoarse skips the coarse first round (tests compare with it).
	noCoarse bool
}

// NewPlanner checks cfg and returns a Planner.
func NewPlanner(cfg Config) (*Planner, error) {
	cfg = cfg.withDefaults()
	if cfg.Predictor == nil {
		return nil, errors.New("plan: a predictor is required")
	}
	switch cfg.Mode {
	case Auto, Exact, TopK:
	default:
		return nil, fmt.Errorf("plan: unknown mode %q (want auto, exact or topk)", cfg.Mode)
	}
	if cfg.K < 1 || cfg.OnlineWeight < 0 || cfg.MinOnlineTput < 0 || cfg.MinTput < 0 || cfg.ExactMaxCells < 1 {
		return nil, fmt.Errorf("plan: invalid settings (k %d, online weight %v, floors %v/%v)", cfg.K, cfg.OnlineWeight, cfg.MinOnlineTput, cfg.MinTput)
	}
	return &Planner{cfg: cfg, cache: map[pairKey][2]float64{}}, nil
}

// gpuSlot is an eligible GPU.
type gpuSlot struct {
	node string
	gpu  *profile.GPUReport
	key  profileKey // online profile, zero for a GPU without online work
}

// Plan computes the next round's plan. Jobs already running somewhere (a
// report lists them as a GPU's offline workload) are skipped.
func (p *Planner) Plan(reports []profile.NodeReport, jobs []Job) (*Plan, error) {
	seenGPU := map[string]bool{}
	running := map[string]bool{}
	var slots []gpuSlot
	total := 0
	for ri := range reports {
		r := &reports[ri]
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("node report: %w", err)
		}
		for gi := range r.GPUs {
			g := &r.GPUs[gi]
			total++
			if seenGPU[g.UUID] {
				return nil, fmt.Errorf("%w: gpu %s reported by two nodes", profile.ErrInvalid, g.UUID)
			}
			seenGPU[g.UUID] = true
			for _, w := range g.Offline {
				running[w.ID] = true
			}
			// One offline job per GPU: a GPU already sharing is not offered;
			// nor one whose memory the node could not read.
			if g.Health != profile.Healthy || len(g.Offline) > 0 || !g.MemoryKnown() {
				continue
			}
			s := gpuSlot{node: r.Node.Name, gpu: g}
			if g.Online != nil {
				s.key = keyOf(g.Online.Profile)
			}
			slots = append(slots, s)
		}
	}
	seenJob := map[string]bool{}
	var pending []Job
	for _, j := range jobs {
		if err := j.Validate(); err != nil {
			return nil, err
		}
		if seenJob[j.ID] {
			return nil, fmt.Errorf("%w: job %s listed twice", profile.ErrInvalid, j.ID)
		}
		seenJob[j.ID] = true
		if !running[j.ID] {
			pending = append(pending, j)
		}
	}
	p.gen++
	pl := &Plan{Generation: p.gen, Time: time.Now().UTC(), Predictor: p.cfg.Predictor.Name(), Assignments: []Assignment{},
		Unassigned: map[string]string{}, Stats: Stats{Jobs: len(pending), GPUs: total, EligibleGPUs: len(slots)}}
	mode := p.cfg.Mode
	if mode == Auto {
		mode = Exact
		if len(pending)*len(slots) > p.cfg.ExactMaxCells {
			mode = TopK
		}
	}
	pl.Mode = mode
	start := time.Now()
	var rowCol []int
	var err error
	if mode == Exact {
		rowCol, err = p.solveExact(pl, pending, slots)
	} else {
		rowCol, err = p.solveTopK(pl, pending, slots)
	}
	if err != nil {
		return nil, err
	}
	pl.Stats.SolveSeconds = time.Since(start).Seconds()
	for i, j := range rowCol {
		job := pending[i]
		if j < 0 {
			if _, ok := pl.Unassigned[job.ID]; !ok {
				pl.Unassigned[job.ID] = ReasonOutbid
			}
			continue
		}
		s := slots[j]
		off, on := p.predict(job.Profile, s)
		a := Assignment{Job: job.ID, Node: s.node, GPU: s.gpu.UUID, GPUType: s.gpu.Type, Tput: off, OnlineTput: on,
			Weight: off + p.cfg.OnlineWeight*on}
		if s.gpu.Online != nil {
			a.Online = s.gpu.Online.ID
		}
		pl.Assignments = append(pl.Assignments, a)
		pl.Stats.TotalWeight += a.Weight
	}
	slices.SortFunc(pl.Assignments, func(a, b Assignment) int { return cmpString(a.Job, b.Job) })
	return pl, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// fits applies the hard constraints other than the throughput floors.
func fits(j Job, g *profile.GPUReport) bool {
	if j.memory() > g.MemoryFreeMiB {
		return false
	}
	return len(j.GPUTypes) == 0 || slices.Contains(j.GPUTypes, g.Type)
}

// weight is the edge weight of job on slot, or -Inf when a floor forbids it.
func (p *Planner) weight(job Job, s gpuSlot) float64 {
	off, on := p.predict(job.Profile, s)
	if off < p.cfg.MinTput || on < p.cfg.MinOnlineTput {
		return math.Inf(-1)
	}
	return off + p.cfg.OnlineWeight*on
}

// predict returns (offline tput, online tput), memoised by profile pair:
// clusters run many replicas of few services, so a round needs far fewer
// distinct predictions than it has pairs.
func (p *Planner) predict(job profile.Profile, s gpuSlot) (float64, float64) {
	k := pairKey{keyOf(job), s.key}
	if v, ok := p.cache[k]; ok {
		return v[0], v[1]
	}
	var v [2]float64
	if s.gpu.Online == nil {
		v = [2]float64{1, 1} // alone on the GPU
	} else {
		v = [2]float64{p.cfg.Predictor.Predict(job, s.gpu.Online.Profile), p.cfg.Predictor.Predict(s.gpu.Online.Profile, job)}
	}
	if len(p.cache) > 1<<20 {
		clear(p.cache)
	}
	p.cache[k] = v
	return v[0], v[1]
}

func (p *Planner) solveExact(pl *Plan, jobs []Job, slots []gpuSlot) ([]int, error) {
	w := make([]float64, len(jobs)*len(slots))
	for i, j := range jobs {
		fit, edge := false, false
		for c, s := range slots {
			x := math.Inf(-1)
			if fits(j, s.gpu) {
				fit = true
				x = p.weight(j, s)
			}
			if !math.IsInf(x, -1) {
				edge = true
				pl.Stats.Edges++
			}
			w[i*len(slots)+c] = x
		}
		switch {
		case !fit:
			pl.Unassigned[j.ID] = ReasonNoGPU
		case !edge:
			pl.Unassigned[j.ID] = ReasonFloor
		}
	}
	res, err := p.dense.MaxWeightMatching(w, len(jobs), len(slots))
	if err != nil {
		return nil, fmt.Errorf("exact matching: %w", err)
	}
	return res.RowCol, nil
}

// solveTopK builds each job's k candidates without scoring every GPU: GPUs
// are grouped by (online profile, type) and a job scores each group once.
// Plain top-k by weight fails on real clusters: replicas make weights tie,
// every job ranks the same few GPUs first, and most jobs end up with no GPU
// to win (on the Alibaba trace replay: 513 of 2,948 jobs paired, against
// 2,780 for greedy placement). So each list samples the job's best groups
// deep enough to hold twice as many GPUs as there are jobs, in proportion to
// group size; within a group each job walks the group's hash ring from a point
// hashed from its id (spread like a shared round-robin cursor, but stable when
// other jobs and GPUs come and go: see the sampling loop).
func (p *Planner) solveTopK(pl *Plan, jobs []Job, slots []gpuSlot) ([]int, error) {
	type group struct {
		slots []int
		rep   gpuSlot
		typ   string
		hash  uint64
		ring  []ringPoint
	}
	const alpha = 2
	type gkey struct {
		k   profileKey
		typ string
	}
	index := map[gkey]int{}
	var groups []group
	for c, s := range slots {
		k := gkey{s.key, s.gpu.Type}
		gi, ok := index[k]
		if !ok {
			gi = len(groups)
			index[k] = gi
			groups = append(groups, group{rep: s, typ: s.gpu.Type, hash: k.k.hash() ^ hashString(k.typ)})
		}
		groups[gi].slots = append(groups[gi].slots, c)
	}
	for gi := range groups {
		gr := &groups[gi]
		gr.ring = make([]ringPoint, 0, ringPoints*len(gr.slots))
		for _, c := range gr.slots {
			h := hashString(slots[c].gpu.UUID)
			for v := range uint64(ringPoints) {
				gr.ring = append(gr.ring, ringPoint{mix(h + v*0x9e3779b97f4a7c15), int32(c)})
			}
		}
		slices.SortFunc(gr.ring, func(a, b ringPoint) int { return cmp.Compare(a.h, b.h) })
	}
	g := &assign.Candidates{Rows: len(jobs), Cols: len(slots), Start: make([]int, 1, len(jobs)+1)}
	// stamp[c] == i+1 marks slot c as already in job i's list: with fewer
	// GPUs than k, sampling points land on the same members twice.
	stamp := make([]int, len(slots))
	// Jobs of one kind (same profile and type constraint) rank groups
	// alike; a cluster has far fewer kinds than jobs.
	type rankKey struct {
		prof  profileKey
		types string
	}
	type ranking struct {
		order []int // eligible groups, best first
		gw    []float64
	}
	rankings := map[rankKey]*ranking{}
	rank := func(j Job) *ranking {
		k := rankKey{keyOf(j.Profile), strings.Join(j.GPUTypes, "\x00")}
		if r, ok := rankings[k]; ok {
			return r
		}
		r := &ranking{gw: make([]float64, len(groups))}
		for gi, gr := range groups {
			r.gw[gi] = math.Inf(-1)
			if len(j.GPUTypes) == 0 || slices.Contains(j.GPUTypes, gr.typ) {
				r.gw[gi] = p.weight(j, gr.rep)
			}
			if !math.IsInf(r.gw[gi], -1) {
				r.order = append(r.order, gi)
			}
		}
		slices.SortFunc(r.order, func(a, b int) int {
			switch {
			case r.gw[a] > r.gw[b]:
				return -1
			case r.gw[a] < r.gw[b]:
				return 1
			}
			// Equal weights (one service on several GPU types) in an order that
			// does not depend on which GPU a report lists first, so that a
			// change elsewhere does not reorder them.
			if c := cmp.Compare(groups[a].hash, groups[b].hash); c != 0 {
				return c
			}
			return a - b
		})
		if len(rankings) < 4096 { // bound memory when every job differs
			rankings[k] = r
		}
		return r
	}
	for i, j := range jobs {
		rk := rank(j)
		order, gw := rk.order, rk.gw
		// Depth: the job's best groups until they hold alpha× as many GPUs
		// as there are jobs, so that every job reaches past the GPUs all
		// jobs want first.
		depth, capacity := 0, 0
		for _, gi := range order {
			if capacity >= alpha*len(jobs) {
				break
			}
			capacity += len(groups[gi].slots)
			depth++
		}
		// Systematic sampling: k points spread evenly over the depth's
		// GPUs, from an offset that differs per job, give each group a
		// share of the list proportional to its size; each point takes the
		// group's next member in a cursor shared by all jobs, so that lists
		// cover different GPUs.
		n := 0
		if depth > 0 {
			jh, curGroup, cur := hashString(j.ID), -1, 0
			u := math.Mod(float64(i)*0.6180339887498949, 1)
			step := float64(capacity) / float64(p.cfg.K)
			gi, cum := 0, len(groups[order[0]].slots)
			for t := 0; t < p.cfg.K && n < p.cfg.K; t++ {
				pos := (u + float64(t)) * step
				if t > 0 && step < 1 && pos >= float64(capacity) {
					break
				}
				for gi+1 < depth && pos >= float64(cum) {
					gi++
					cum += len(groups[order[gi]].slots)
				}
				gr := &groups[order[gi]]
				if gi != curGroup {
					// The job's own place in the group: a point on the group's
					// ring (consistent hashing: every member holds ringPoints
					// points hashed from its UUID) hashed from the job's id and the
					// group's key, not a cursor shared with the jobs before it. A
					// job's list then stays what it was while its groups stay, and
					// a GPU joining or leaving a group changes only the lists whose
					// walk passes its points: that is what lets a warm re-plan keep
					// last round's pairs.
					curGroup = gi
					at := mix(jh ^ gr.hash)
					cur, _ = slices.BinarySearchFunc(gr.ring, at, func(e ringPoint, x uint64) int { return cmp.Compare(e.h, x) })
				}
				for try := 0; try < len(gr.ring) && try < 8*ringPoints; try++ {
					c := int(gr.ring[cur%len(gr.ring)].slot)
					cur++
					if stamp[c] != i+1 && fits(j, slots[c].gpu) {
						stamp[c] = i + 1
						g.Col = append(g.Col, int32(c))
						g.Weight = append(g.Weight, gw[order[gi]])
						n++
						break
					}
				}
			}
		}
		if n == 0 {
			pl.Unassigned[j.ID] = ReasonNoGPU
			if len(order) > 0 {
				// Some group passed the floors: memory ruled them out.
				g.Start = append(g.Start, len(g.Col))
				continue
			}
			for gi := range groups {
				if len(j.GPUTypes) == 0 || slices.Contains(j.GPUTypes, groups[gi].typ) {
					for _, c := range groups[gi].slots {
						if fits(j, slots[c].gpu) {
							pl.Unassigned[j.ID] = ReasonFloor
							break
						}
					}
				}
			}
		}
		g.Start = append(g.Start, len(g.Col))
	}
	pl.Stats.Edges = len(g.Col)
	var warm *assign.Prices
	if len(p.prices) > 0 {
		warm = &assign.Prices{Col: make([]float64, len(slots)), RowCol: make([]int32, len(jobs))}
		at := make(map[string]int32, len(slots))
		for c, s := range slots {
			warm.Col[c] = p.prices[s.gpu.UUID]
			at[s.gpu.UUID] = int32(c)
		}
		for i, j := range jobs {
			warm.RowCol[i] = -1
			if c, ok := at[p.placed[j.ID]]; ok {
				warm.RowCol[i] = c
			}
		}
		// A GPU that is new or changed group or memory since last round gets the
		// mean price of its group's unchanged GPUs: its old price (or none) says
		// nothing about it now, and a price far off sends many rows searching.
		for _, gr := range groups {
			sum, n := 0.0, 0
			var changed []int
			for _, c := range gr.slots {
				if old, ok := p.prints[slots[c].gpu.UUID]; ok && old == printOf(slots[c]) {
					sum += warm.Col[c]
					n++
				} else {
					changed = append(changed, c)
				}
			}
			for _, c := range changed {
				warm.Col[c] = 0
				if n > 0 {
					warm.Col[c] = sum / float64(n)
				}
			}
		}
		pl.Stats.WarmStart = true
	} else if len(jobs) > 4*coarseMin && len(slots) > 4*coarseMin && !p.noCoarse {
		// No previous round: get prices from a coarse round first.
		gid := make([]int, len(slots))
		for gi, gr := range groups {
			for _, c := range gr.slots {
				gid[c] = gi
			}
		}
		var err error
		if warm, err = coarsePrices(g, gid, len(groups)); err != nil {
			return nil, err
		}
		pl.Stats.CoarseStart = true
	}
	m, err := p.sparse.MaxWeightMatching(g, warm)
	if err != nil {
		return nil, fmt.Errorf("top-k matching: %w", err)
	}
	pl.Stats.Augmentations, pl.Stats.Repairs = m.Augmentations, m.Repairs
	p.prices = make(map[string]float64, len(slots))
	for c, s := range slots {
		if x := m.Prices.Col[c]; x != 0 {
			p.prices[s.gpu.UUID] = x
		}
	}
	p.prints = make(map[string]slotPrint, len(slots))
	for _, s := range slots {
		p.prints[s.gpu.UUID] = printOf(s)
	}
	p.placed = make(map[string]string, len(jobs))
	for i, c := range m.RowCol {
		if c >= 0 {
			p.placed[jobs[i].ID] = slots[c].gpu.UUID
		}
	}
	return m.RowCol, nil
}

// coarseMin is the smallest problem worth a coarse round first (a variable
// so tests can reach the coarse path on small problems).
var coarseMin = 1024

// coarsePrices prices GPUs by solving a quarter-size round — every 4th job
// over every 4th GPU, so contention stays as it is, itself started from a
// coarser round while large — and giving every GPU the mean price its
// group's sampled members got. A cold solve over many
// interchangeable replicas is slow: equal weights keep the row reduction
// from raising prices, so most jobs need a shortest-path search across wide
// plateaus; started from group prices, the full solve is a warm one.
func coarsePrices(g *assign.Candidates, gid []int, groups int) (*assign.Prices, error) {
	sub := &assign.Candidates{Rows: (g.Rows + 3) / 4, Cols: (g.Cols + 3) / 4, Start: make([]int, 1, (g.Rows+3)/4+1)}
	for i := 0; i < g.Rows; i += 4 {
		for e := g.Start[i]; e < g.Start[i+1]; e++ {
			if c := g.Col[e]; c%4 == 0 {
				sub.Col = append(sub.Col, c/4)
				sub.Weight = append(sub.Weight, g.Weight[e])
			}
		}
		sub.Start = append(sub.Start, len(sub.Col))
	}
	var warm *assign.Prices
	if sub.Rows > 4*coarseMin && sub.Cols > 4*coarseMin {
		subGid := make([]int, sub.Cols)
		for c := range subGid {
			subGid[c] = gid[4*c]
		}
		var err error
		if warm, err = coarsePrices(sub, subGid, groups); err != nil {
			return nil, err
		}
	}
	var s assign.Sparse
	m, err := s.MaxWeightMatching(sub, warm)
	if err != nil {
		return nil, fmt.Errorf("coarse matching: %w", err)
	}
	sum := make([]float64, groups)
	n := make([]int, groups)
	for c := 0; c < g.Cols; c += 4 {
		sum[gid[c]] += m.Prices.Col[c/4]
		n[gid[c]]++
	}
	out := &assign.Prices{Col: make([]float64, g.Cols)}
	for c := range out.Col {
		if k := n[gid[c]]; k > 0 {
			out.Col[c] = sum[gid[c]] / float64(k)
		}
	}
	return out, nil
}

// profileKey is a comparable copy of the fields predictors read.
type profileKey struct {
	present          bool // false only for "no online workload"
	gpu, bw, mem, sm float64
	smKnown, amp     bool
	batch            int
}

type pairKey struct{ job, online profileKey }

func keyOf(p profile.Profile) profileKey {
	k := profileKey{present: true, gpu: p.GPUUtil, bw: p.MemBWUtil, mem: p.MemoryMiB, amp: p.AMP, batch: p.BatchSize}
	if p.SMActivity != nil {
		k.sm, k.smKnown = *p.SMActivity, true
	}
	return k
}

// hash is a stable hash of a profile key (FNV-1a over its fields).
func (k profileKey) hash() uint64 {
	h := uint64(14695981039346656037)
	add := func(x uint64) {
		for b := 0; b < 8; b++ {
			h ^= x & 0xff
			h *= 1099511628211
			x >>= 8
		}
	}
	b := func(v bool) uint64 {
		if v {
			return 1
		}
		return 0
	}
	add(b(k.present) | b(k.smKnown)<<1 | b(k.amp)<<2)
	add(math.Float64bits(k.gpu))
	add(math.Float64bits(k.bw))
	add(math.Float64bits(k.mem))
	add(math.Float64bits(k.sm))
	add(uint64(k.batch))
	return h
}

// hashString is FNV-1a of s.
func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix spreads the bits of x (splitmix64's finaliser).
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// slotPrint is what a GPU's candidate edges depend on: its group (online profile
// and type) and its free memory.
type slotPrint struct {
	key  profileKey
	typ  string
	free float64
}

func printOf(s gpuSlot) slotPrint {
	return slotPrint{key: s.key, typ: s.gpu.Type, free: s.gpu.MemoryFreeMiB}
}

// ringPoint is one of a GPU's points on its group's hash ring.
type ringPoint struct {
	h    uint64
	slot int32
}

// ringPoints is how many points each GPU holds on its group's ring: enough that
// every GPU's share of the ring stays within about a third of the mean (with one
// point, shares spread exponentially and hundreds of GPUs end up in no list).
const ringPoints = 8
