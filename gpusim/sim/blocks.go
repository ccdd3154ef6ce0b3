package sim

import (
	"cmp"
	"math"
	"slices"
)

// The block-level kernel model. A kernel is a grid of blocks; the block
// scheduler places blocks on SMs while their threads, registers, shared memory
// and block slots fit, and refills SMs as blocks retire. Blocks of different
// kernels — and of different MPS clients — share an SM when they fit
// together. Kernels are served in the order they reached the head of their
// stream: an earlier kernel's pending blocks take every slot that frees up
// before a later kernel gets any, and a later kernel gets only what the
// earlier one cannot use (the "leftover" policy measured on NVIDIA GPUs; see
// docs/gpusim-calibration.md). So a small kernel that arrives while a big
// kernel still has blocks to place waits for that kernel's last wave.
//
// The SMs of a device are tracked one by one, but the blocks of one kernel
// that start on one SM at one moment form a single residency that finishes
// at one moment. Real blocks do not finish in lock step; SMs fall into
// jitterClasses classes whose blocks take slightly different times, so waves
// drift apart and SMs come free at different moments, as they do on
// hardware, at a cost of a few events per wave rather than one per SM.

// Model constants. Their values and the measurements they come from are in
// docs/gpusim-calibration.md.
const (
	// coResidencyPenalty slows a block by up to this fraction while blocks of
	// another context share its SM (L1/shared-memory, instruction-issue and
	// scheduler contention that the thread/register budget does not show).
	coResidencyPenalty = 0.25
	// l2Penalty slows a kernel's memory time by up to this fraction while
	// other contexts' kernels stream through the shared L2 at full bandwidth.
	l2Penalty = 0.2
	// jitterClasses and jitterStep: SM i's blocks take (1 - jitterStep·(c-1-i%c))
	// of the nominal block time, so the slowest class takes exactly block_us.
	jitterClasses = 4
	jitterStep    = 0.04
	// ctxSwitchNs is the cost of a switch between contexts outside one MPS
	// server (save and restore of SM state).
	ctxSwitchNs = 50_000
)

// smState is one SM: what its resident blocks use.
type smState struct {
	threads, regs, smem, blocks int
	res                         []*residency
}

// residency is n blocks of one kernel that started on one SM together.
type residency struct {
	k    *op
	sm   int
	n    int
	rem  float64 // ns of work left at rate 1
	rate float64
	at   float64 // when they started (blocks placed at the same moment merge)
}

// savedBlocks are a residency taken off its SM by a context switch.
type savedBlocks struct {
	sm  int
	n   int
	rem float64
}

func (s *smState) fits(k *op, p *Profile) int {
	sh := &k.sh
	n := min((p.MaxThreadsPerSM-s.threads)/sh.threads, (p.RegsPerSM-s.regs)/sh.regs, p.MaxBlocksPerSM-s.blocks)
	if sh.smem > 0 {
		n = min(n, (p.SmemPerSMBytes-s.smem)/sh.smem)
	}
	return max(0, n)
}

func (s *smState) holdsCtx(x *Context) bool {
	for _, r := range s.res {
		if r.k.ctx == x {
			return true
		}
	}
	return false
}

func (s *smState) holdsKernel(k *op) bool {
	for _, r := range s.res {
		if r.k == k {
			return true
		}
	}
	return false
}

// put puts n blocks of k on SM i with rem ns of work each; lock held.
func (d *Device) put(i, n int, k *op, rem float64) {
	s := &d.sms[i]
	if !s.holdsKernel(k) {
		k.smsHeld++
	}
	if !s.holdsCtx(k.ctx) {
		k.ctx.smsHeld++
	}
	s.threads += n * k.sh.threads
	s.regs += n * k.sh.regs
	s.smem += n * k.sh.smem
	s.blocks += n
	k.resident += n
	for _, r := range s.res {
		if r.k == k && r.at == d.t && r.rem == rem {
			r.n += n
			return
		}
	}
	r := &residency{k: k, sm: i, n: n, rem: rem, at: d.t}
	s.res = append(s.res, r)
	d.res = append(d.res, r)
}

// unplace takes residency r off its SM (it finished, was saved by a context
// switch, or its kernel was dropped); lock held. The caller removes r from
// d.res.
func (d *Device) unplace(r *residency) {
	s := &d.sms[r.sm]
	k := r.k
	s.threads -= r.n * k.sh.threads
	s.regs -= r.n * k.sh.regs
	s.smem -= r.n * k.sh.smem
	s.blocks -= r.n
	k.resident -= r.n
	for j, q := range s.res {
		if q == r {
			s.res = append(s.res[:j], s.res[j+1:]...)
			break
		}
	}
	if !s.holdsKernel(k) {
		k.smsHeld--
	}
	if !s.holdsCtx(k.ctx) {
		k.ctx.smsHeld--
	}
}

// removeRes drops every residency for which gone is true; lock held.
func (d *Device) removeRes(gone func(*residency) bool) {
	keep := d.res[:0]
	for _, r := range d.res {
		if gone(r) {
			d.unplace(r)
		} else {
			keep = append(keep, r)
		}
	}
	clear(d.res[len(keep):])
	d.res = keep
}

// blockWork is the work of one block started on SM i (jitter, see above).
func blockWork(k *op, i int) float64 {
	return k.blockNs * (1 - jitterStep*float64(jitterClasses-1-i%jitterClasses))
}

// dispatch hands free SM room to kernels; lock held. Within one context
// kernels are served in queue order, a later one getting only what earlier
// ones cannot use (the leftover policy). Between contexts — MPS clients — the
// free room is split evenly among their oldest waiting kernels first, then
// what is left goes in queue order. Blocks are spread over the SMs with the
// most room first, as the hardware distributes them, and a context never
// holds more SMs than its active-thread percentage allows.
func (d *Device) dispatch(kern []*op) {
	slices.SortFunc(kern, func(a, b *op) int { return cmp.Compare(a.seq, b.seq) })
	heads := d.heads[:0]
	defer func() { d.heads = heads[:0] }()
	freeThreads := 0
	for i := range d.sms {
		freeThreads += d.p.MaxThreadsPerSM - d.sms[i].threads
	}
	if freeThreads == 0 {
		return
	}
	for _, k := range kern {
		if k.ready() && !slices.ContainsFunc(heads, func(h *op) bool { return h.ctx == k.ctx }) {
			heads = append(heads, k)
		}
	}
	if len(heads) > 1 {
		for _, k := range heads {
			d.place(k, freeThreads/len(heads)/k.sh.threads)
		}
	}
	for _, k := range kern {
		if k.ready() {
			d.place(k, k.pending)
		}
	}
}

// ready: k has blocks to place and may place them now.
func (k *op) ready() bool { return k.pending > 0 && k.fixedLeft <= 0 && k.saved == nil }

// place puts up to quota of k's pending blocks on the SMs; lock held.
func (d *Device) place(k *op, quota int) {
	quota = min(quota, k.pending)
	if quota <= 0 {
		return
	}
	p := &d.p
	x := k.ctx
	cand := d.cand[:0]
	defer func() { d.cand = cand[:0] }()
	for i := range d.sms {
		if n := d.sms[i].fits(k, p); n > 0 {
			cand = append(cand, slot{i, n, d.sms[i].holdsCtx(x)})
		}
	}
	if len(cand) == 0 {
		return
	}
	// SMs the context already holds first (they do not count against its
	// cap again), then the emptiest
	slices.SortStableFunc(cand, func(a, b slot) int {
		if a.held != b.held {
			if a.held {
				return -1
			}
			return 1
		}
		return cmp.Compare(d.sms[a.i].threads, d.sms[b.i].threads)
	})
	newSMs := x.smCap - x.smsHeld
	n := 0
	for _, c := range cand {
		if c.held || newSMs > 0 {
			if !c.held {
				newSMs--
			}
			cand[n] = c
			n++
		}
	}
	cand = cand[:n]
	// spread: every SM gets an equal part of what is left, up to its room
	for quota > 0 && len(cand) > 0 {
		share := (quota + len(cand) - 1) / len(cand)
		keep := cand[:0]
		for _, c := range cand {
			m := min(share, c.room, quota)
			if m == 0 {
				break
			}
			quota -= m
			k.pending -= m
			d.put(c.i, m, k, blockWork(k, c.i))
			if c.room -= m; c.room > 0 {
				keep = append(keep, c)
			}
		}
		cand = keep
	}
}

type slot struct {
	i    int
	room int
	held bool
}

// save takes the resident blocks of group g off the SMs (a context switch
// away from g); lock held.
func (d *Device) save(g *group) {
	d.removeRes(func(r *residency) bool {
		if r.k.ctx.grp != g {
			return false
		}
		r.k.saved = append(r.k.saved, savedBlocks{sm: r.sm, n: r.n, rem: r.rem})
		return true
	})
}

// restore puts group g's saved blocks back where they were; lock held. The
// SMs are free of other groups' blocks, which were saved when g got the GPU.
func (d *Device) restore(g *group) {
	for _, x := range g.ctxs {
		for _, st := range x.slist {
			if len(st.q) == 0 {
				continue
			}
			k := st.q[0]
			for _, b := range k.saved {
				d.put(b.sm, b.n, k, b.rem)
			}
			k.saved = nil
		}
	}
}

// rates sets every residency's progress rate and returns the number of SMs
// holding blocks; lock held. A block runs at full speed while its SM is not
// oversubscribed (resident blocks' demands, 1/bps each, sum to at most 1),
// slower when it is; blocks of other contexts on its SM and other contexts'
// memory traffic cost it extra; the device's memory bandwidth is shared as
// memFactor says.
func (d *Device) rates(kern []*op, d2d []*op) int {
	busySMs := 0
	for i := range d.sms {
		s := &d.sms[i]
		if len(s.res) == 0 {
			continue
		}
		busySMs++
		load := 0.0
		for _, r := range s.res {
			load += float64(r.n) / float64(r.k.sh.bps)
		}
		for _, r := range s.res {
			other := 0.0
			for _, q := range s.res {
				if q.k.ctx != r.k.ctx {
					other += float64(q.n) / float64(q.k.sh.bps)
				}
			}
			r.rate = d.clockRel / math.Max(1, load) / (1 + coResidencyPenalty*math.Min(1, other))
		}
	}
	// the bandwidth each kernel would use at the pace its SMs allow
	for _, k := range kern {
		k.bwUse = 0
	}
	for _, r := range d.res {
		r.k.bwUse += float64(r.n) * r.rate
	}
	demand := float64(len(d2d))
	for _, k := range kern {
		k.bwUse *= k.bw / float64(min(k.sh.blocks, k.sh.bps*d.p.SMs))
		demand += k.bwUse
	}
	x := memContention(kern, len(d2d), demand)
	for _, k := range kern {
		others := 0.0 // other contexts' traffic through the shared L2
		for _, o := range kern {
			if o.ctx != k.ctx {
				others += o.bwUse
			}
		}
		k.memSlow = (1 - k.bw) + k.bw*x*(1+l2Penalty*math.Min(1, others))
	}
	for _, r := range d.res {
		r.rate /= r.k.memSlow
		if d.hung || d.switching() {
			r.rate = 0
		}
	}
	for _, o := range d2d {
		o.rate = 1 / x
	}
	return busySMs
}

// memContention finds how much longer memory accesses take when the running
// kernels and device copies ask for more than the device's bandwidth
// (demand > 1): the factor x at which their slowed-down traffic just fits,
// a kernel of bandwidth share b spending (1-b) of its time computing and b·x
// waiting for memory.
func memContention(kern []*op, copies int, demand float64) float64 {
	if demand <= 1 {
		return 1
	}
	used := func(x float64) float64 {
		u := float64(copies) / x
		for _, k := range kern {
			if k.bw > 0 {
				u += k.bwUse / ((1 - k.bw) + k.bw*x)
			}
		}
		return u
	}
	lo, hi := 1.0, demand*2
	for i := 0; i < 40; i++ {
		mid := (lo + hi) / 2
		if used(mid) > 1 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}
