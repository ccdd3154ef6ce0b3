// Package plan turns what the cluster reports into a pairing plan: which
// pending offline job goes to which online GPU. It applies the hard
// constraints (GPU health, type, free memory, one offline job per GPU, a
// floor on the online workload's predicted throughput), weighs every allowed
// pair by predicted normalised throughput, and solves the maximum-weight
// matching exactly or, at cluster scale, over top-k candidate lists
// warm-started from the previous round.
package plan

import (
	"errors"
	"fmt"
	"math"
	"slices"
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
	// AllowKernelRisk allows pairs whose job would keep the online requests waiting
	// for its kernels whatever its share (profile.Profile.DelaysOnline: the kernel a
	// request meets at least twice the requests of a service whose kernels fill the
	// GPU); by default they are refused, as the throughput floors refuse theirs.
	AllowKernelRisk bool
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
	// EdgesScanned counts the candidate edges the top-k solve's searches scanned.
	EdgesScanned int `json:"edges_scanned,omitempty"`
	// Repairs counts the GPUs the warm start left free but priced, each repaired by a
	// backward search (assign.Matching.Repairs); WarmFallback says the repairs ran
	// past their bound and the round was solved cold.
	Repairs      int  `json:"repairs,omitempty"`
	WarmFallback bool `json:"warm_fallback,omitempty"`
	WarmStart    bool `json:"warm_start,omitempty"`
	// CoarseStart says the first round started from a coarse round's prices.
	CoarseStart bool `json:"coarse_start,omitempty"`
}

// Reasons a job can be left out.
const (
	ReasonNoGPU  = "no healthy GPU with the memory and type it needs"
	ReasonFloor  = "every GPU it fits is predicted to leave it or the online work below the throughput floors, or serves GPU-filling online requests its kernels would keep waiting (kernel_us against request_us)"
	ReasonOutbid = "eligible GPUs went to pairs of higher predicted throughput"
)

// Planner computes plans round after round; it keeps GPU prices between
// rounds to warm-start the top-k solver. Not safe for concurrent use.
type Planner struct {
	cfg    Config
	gen    int64
	dense  assign.Dense
	sparse assign.Sparse
	cache  map[pairKey][2]float64
	// inc is the top-k rounds' state kept between rounds (incr.go).
	inc incremental
	// Buffers kept between rounds.
	seenGPU, running, seenJob map[string]bool
	slots                     []gpuSlot
	pending                   []Job
	// order is the pending jobs sorted by id, for pending jobs orderIDs.
	order           []int32
	orderIDs, idBuf []string
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
	// The sets are kept between rounds (cleared, not reallocated).
	if p.seenGPU == nil {
		p.seenGPU, p.running, p.seenJob = map[string]bool{}, map[string]bool{}, map[string]bool{}
	}
	seenGPU, running, seenJob := p.seenGPU, p.running, p.seenJob
	clear(seenGPU)
	clear(running)
	clear(seenJob)
	slots := p.slots[:0]
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
	pending := p.pending[:0]
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
	p.slots, p.pending = slots, pending
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
	var pred [][2]float64 // top-k: each row's predicted throughputs
	var err error
	if mode == Exact {
		rowCol, err = p.solveExact(pl, pending, slots)
	} else {
		rowCol, pred, err = p.solveTopK(pl, pending, slots)
	}
	if err != nil {
		return nil, err
	}
	pl.Stats.SolveSeconds = time.Since(start).Seconds()
	// Assignments by job id: the order sorted last round is kept while the
	// pending jobs are the same ones in the same order.
	order := p.order
	if !slices.Equal(p.orderIDs, p.ids(pending)) || len(order) != len(pending) {
		order = order[:0]
		for i := range pending {
			order = append(order, int32(i))
		}
		slices.SortFunc(order, func(a, b int32) int { return cmpString(pending[a].ID, pending[b].ID) })
		p.order = order
		p.orderIDs = append(p.orderIDs[:0], p.idBuf...)
	}
	pl.Assignments = make([]Assignment, 0, len(pending))
	for _, i := range order {
		j := rowCol[i]
		job := &pending[i]
		if j < 0 {
			if _, ok := pl.Unassigned[job.ID]; !ok {
				pl.Unassigned[job.ID] = ReasonOutbid
			}
			continue
		}
		s := slots[j]
		var off, on float64
		if pred != nil {
			off, on = pred[i][0], pred[i][1]
		} else {
			off, on = p.predict(job.Profile, s)
		}
		a := Assignment{Job: job.ID, Node: s.node, GPU: s.gpu.UUID, GPUType: s.gpu.Type, Tput: off, OnlineTput: on,
			Weight: off + p.cfg.OnlineWeight*on}
		if s.gpu.Online != nil {
			a.Online = s.gpu.Online.ID
		}
		pl.Assignments = append(pl.Assignments, a)
		pl.Stats.TotalWeight += a.Weight
	}
	return pl, nil
}

// ids lists the pending jobs' ids (in a buffer kept between rounds).
func (p *Planner) ids(pending []Job) []string {
	p.idBuf = p.idBuf[:0]
	for i := range pending {
		p.idBuf = append(p.idBuf, pending[i].ID)
	}
	return p.idBuf
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
	return j.allows(g.Type)
}

// allows says whether the job may use GPUs of type typ.
func (j Job) allows(typ string) bool {
	return len(j.GPUTypes) == 0 || slices.Contains(j.GPUTypes, typ)
}

// weight is the edge weight of job on slot, or -Inf when a floor or the job's kernels
// (Config.AllowKernelRisk) forbid it.
func (p *Planner) weight(job Job, s gpuSlot) float64 {
	if !p.cfg.AllowKernelRisk && s.gpu.Online != nil && job.Profile.DelaysOnline(s.gpu.Online.Profile) {
		return math.Inf(-1)
	}
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

// profileKey is a comparable copy of the fields predictors and the weight read.
type profileKey struct {
	present          bool // false only for "no online workload"
	gpu, bw, mem, sm float64
	smKnown, amp     bool
	batch            int
	kernel, request  float64 // the kernel rule's (weight)
	width            float64
}

type pairKey struct{ job, online profileKey }

func keyOf(p profile.Profile) profileKey {
	k := profileKey{present: true, gpu: p.GPUUtil, bw: p.MemBWUtil, mem: p.MemoryMiB, amp: p.AMP, batch: p.BatchSize,
		kernel: p.KernelUS, request: p.RequestUS, width: p.WidthPct}
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
	add(math.Float64bits(k.kernel))
	add(math.Float64bits(k.request))
	add(math.Float64bits(k.width))
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

// ringPoint is one of a GPU's points on its group's hash ring.
type ringPoint struct {
	h    uint64
	slot int32
}

// ringPoints is how many points each GPU holds on its group's ring: enough that
// every GPU's share of the ring stays within about a third of the mean (with one
// point, shares spread exponentially and hundreds of GPUs end up in no list).
const ringPoints = 8
