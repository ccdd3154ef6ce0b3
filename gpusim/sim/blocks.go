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
// together. Within one context kernels are served in the order they reached
// the head of their stream: an earlier kernel's pending blocks take the room
// that frees up before a later kernel gets any (the "leftover" policy).
// Between MPS clients the room that frees up is shared evenly among their
// oldest waiting kernels. docs/gpusim-calibration.md gives the measurements
// behind these rules and the constants below.
//
// SMs in the same state are simulated once: an smSet is a number of SMs that
// hold the same blocks, started at the same moments. Placing blocks on part
// of a set splits it; sets that empty merge again. Real blocks do not finish
// in lock step; SMs fall into jitterClasses classes whose blocks take
// slightly different times, so waves drift apart and SMs come free at
// different moments, as on hardware, at a cost of a few events per wave.

// Model constants; docs/gpusim-calibration.md says where each comes from.
const (
	// coResidencyPenalty slows a block by up to this fraction while blocks of
	// another context share its SM (L1/shared-memory, instruction-issue and
	// scheduler contention that the thread/register budget does not show).
	coResidencyPenalty = 0.25
	// l2Penalty stretches a kernel's memory time by up to this fraction
	// while other contexts' kernels stream through the shared L2.
	l2Penalty = 0.2
	// jitterClasses and jitterStep: blocks on SMs of class c take
	// (1 - jitterStep·(jitterClasses-1-c)) of the nominal block time, so the
	// slowest class takes exactly block_us.
	jitterClasses = 8
	jitterStep    = 0.025
	// ctxSwitchNs is the cost of a switch between contexts outside one MPS
	// server (save and restore of SM state, refilling caches and TLBs): a
	// tenth of DefaultTimeSlice, fitted to nos_ts_* (N time-sliced loops take
	// 1.11·N as long as one alone).
	ctxSwitchNs = 300_000
	// coalesceFrac and coalesceMaxNs: blocks that would finish within this
	// fraction of their block time (at most coalesceMaxNs) of another event
	// retire with it. Blocks placed as SMs come free, on SMs of different
	// speed classes, end at moments spread a fraction of a microsecond apart;
	// one event each made a busy device cost gpusimd hundreds of thousands of
	// events per second of model time, and while it caught up the whole
	// simulator stalled (its lock is held), stamping every process's
	// operations late. A block ends at most 1% early.
	coalesceFrac  = 0.01
	coalesceMaxNs = 5_000
)

// smSet is n SMs in one state: each holds every residency in res.
type smSet struct {
	n                           int
	class                       int
	threads, regs, smem, blocks int // used on each SM
	res                         []*residency
	stale                       bool // res changed: its residencies' base speeds are to be worked out again
}

// residency is n blocks of one kernel on each SM of a set, started together.
type residency struct {
	k    *op
	set  *smSet
	n    int
	rem0 float64 // ns of work at rate 1 when placed
	at   float64 // when they started (blocks placed at the same moment merge)
	// base is the blocks' speed at full clock and memory speed, from their set's
	// blocks (rates; 0 until it has run); they end when their kernel's work
	// reaches end.
	base float64
	end  float64
	ver  uint32 // bumped when its speed changes or it leaves (ends.go)
	ki   int    // its index in its kernel's res
}

// remaining is the ns of work left at rate 1 (negative just past its end).
func (r *residency) remaining() float64 {
	if r.base == 0 {
		return r.rem0
	}
	return (r.end - r.k.work) * r.base
}

// savedBlocks are a residency taken off its SMs by a context switch.
type savedBlocks struct {
	class, sms, n int
	rem           float64
}

func newSMSets(p Profile) []*smSet {
	var sets []*smSet
	for c := 0; c < jitterClasses; c++ {
		n := p.SMs / jitterClasses
		if c < p.SMs%jitterClasses {
			n++
		}
		if n > 0 {
			sets = append(sets, &smSet{n: n, class: c})
		}
	}
	return sets
}

// fits is how many more of k's blocks one SM of the set can take.
func (s *smSet) fits(k *op, p *Profile) int {
	sh := &k.sh
	if s.blocks >= p.MaxBlocksPerSM || p.MaxThreadsPerSM-s.threads < sh.threads {
		return 0 // a full SM, the common case on a busy device: no divisions
	}
	n := min((p.MaxThreadsPerSM-s.threads)/sh.threads, (p.RegsPerSM-s.regs)/sh.regs, p.MaxBlocksPerSM-s.blocks)
	if sh.smem > 0 {
		n = min(n, (p.SmemPerSMBytes-s.smem)/sh.smem)
	}
	return max(0, n)
}

func (s *smSet) holdsCtx(x *Context) bool {
	return slices.ContainsFunc(s.res, func(r *residency) bool { return r.k.ctx == x })
}

func (s *smSet) holdsKernel(k *op) bool {
	return slices.ContainsFunc(s.res, func(r *residency) bool { return r.k == k })
}

// put places n blocks of k on each SM of set s with rem ns of work each;
// lock held.
func (d *Device) put(s *smSet, n int, k *op, rem float64) {
	if !s.holdsKernel(k) {
		k.smsHeld += s.n
	}
	if !s.holdsCtx(k.ctx) {
		k.ctx.smsHeld += s.n
	}
	s.threads += n * k.sh.threads
	s.regs += n * k.sh.regs
	s.smem += n * k.sh.smem
	s.blocks += n
	s.stale = true
	k.resident += n * s.n
	for _, r := range s.res {
		if r.k == k && r.at == d.t && r.rem0 == rem {
			r.n += n
			k.bwBase += float64(n*s.n) * r.base
			return
		}
	}
	d.addRes(d.newRes(residency{k: k, set: s, n: n, rem0: rem, at: d.t}))
}

// unplace takes residency r off its SMs (it finished, was saved by a context
// switch, or its kernel was dropped); lock held.
func (d *Device) unplace(r *residency) {
	d.dropRes(r)
	s, k := r.set, r.k
	s.threads -= r.n * k.sh.threads
	s.regs -= r.n * k.sh.regs
	s.smem -= r.n * k.sh.smem
	s.blocks -= r.n
	s.stale = true
	k.resident -= r.n * s.n
	s.res = slices.DeleteFunc(s.res, func(q *residency) bool { return q == r })
	if !s.holdsKernel(k) {
		k.smsHeld -= s.n
	}
	if !s.holdsCtx(k.ctx) {
		k.ctx.smsHeld -= s.n
	}
}

// split takes m of set s's SMs (0 < m < s.n) into a new set in the same
// state; lock held.
func (d *Device) split(s *smSet, m int) *smSet {
	t := &smSet{n: m, class: s.class, threads: s.threads, regs: s.regs, smem: s.smem, blocks: s.blocks, stale: s.stale}
	s.n -= m
	// the kernels' summed speeds are unchanged: the same blocks on the same SMs
	for _, r := range s.res {
		q := d.newRes(*r)
		q.set = t
		d.addRes(q)
	}
	d.sets = append(d.sets, t)
	return t
}

// removeRes drops every residency for which gone is true, then merges the
// sets that emptied; lock held.
func (d *Device) removeRes(gone func(*residency) bool) {
	removed := false
	for _, s := range d.sets {
		for i := 0; i < len(s.res); {
			if r := s.res[i]; gone(r) {
				d.unplace(r) // deletes s.res[i]
				removed = true
			} else {
				i++
			}
		}
	}
	if removed {
		d.mergeEmpty()
	}
}

// mergeEmpty folds the empty sets of each jitter class into one.
func (d *Device) mergeEmpty() {
	var empty [jitterClasses]*smSet
	d.sets = slices.DeleteFunc(d.sets, func(s *smSet) bool {
		if len(s.res) > 0 {
			return false
		}
		if e := empty[s.class]; e != nil {
			e.n += s.n
			return true
		}
		empty[s.class] = s
		return false
	})
}

// blockWork is the work of one block started on an SM of set s.
func blockWork(k *op, s *smSet) float64 {
	return k.blockNs * (1 - jitterStep*float64(jitterClasses-1-s.class))
}

// dispatch hands free SM room to kernels; lock held. Within one context
// kernels are served in queue order, a later one getting only what earlier
// ones cannot use. Between contexts — MPS clients — the free room is split
// evenly among their oldest waiting kernels first, then what is left goes in
// queue order. MPS clients of a lower priority (CUDA_MPS_CLIENT_PRIORITY
// BELOW_NORMAL, which the driver maps onto lower stream priorities) get only
// the room higher ones leave: the block scheduler dispatches pending blocks of
// higher-priority streams first, without preempting running blocks.
func (d *Device) dispatch(kern []*op) {
	slices.SortFunc(kern, func(a, b *op) int {
		if c := cmp.Compare(b.ctx.priority, a.ctx.priority); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	for i := 0; i < len(kern); {
		j := i + 1
		for j < len(kern) && kern[j].ctx.priority == kern[i].ctx.priority {
			j++
		}
		if !d.dispatchLevel(kern[i:j]) {
			return
		}
		i = j
	}
}

// dispatchLevel is dispatch for kernels of one priority, in queue order; it
// reports whether room is left for lower priorities.
func (d *Device) dispatchLevel(kern []*op) bool {
	freeThreads := 0
	for _, s := range d.sets {
		freeThreads += s.n * (d.p.MaxThreadsPerSM - s.threads)
	}
	if freeThreads == 0 {
		return false
	}
	heads := d.heads[:0]
	defer func() { d.heads = heads[:0] }()
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
	return true
}

// ready: k has blocks to place and may place them now.
func (k *op) ready() bool { return k.pending > 0 && k.fixedLeft <= 0 && k.saved == nil }

type slot struct {
	s    *smSet
	room int // more blocks of the kernel each SM of s can take
	held bool
}

// place puts up to quota of k's pending blocks on the SMs; lock held. Blocks
// are spread evenly over the SMs with room, those the context already holds
// and then the emptiest first, as the hardware distributes them; a context
// never holds more SMs than its active-thread percentage allows.
func (d *Device) place(k *op, quota int) {
	quota = min(quota, k.pending)
	if quota <= 0 {
		return
	}
	want := quota
	defer func() {
		k.pending -= want - quota
		if k.ranAt == 0 && quota < want {
			k.ranAt = d.t
		}
	}()
	x := k.ctx
	cand := d.cand[:0]
	defer func() { d.cand = cand[:0] }()
	for _, s := range d.sets {
		if n := s.fits(k, &d.p); n > 0 {
			cand = append(cand, slot{s, n, s.holdsCtx(x)})
		}
	}
	slices.SortStableFunc(cand, func(a, b slot) int {
		if a.held != b.held {
			if a.held {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.s.threads, b.s.threads)
	})
	budget, sms, n := x.smCap-x.smsHeld, 0, 0
	for _, c := range cand {
		if !c.held {
			if budget <= 0 {
				continue
			}
			if c.s.n > budget {
				c.s = d.split(c.s, budget)
			}
			budget -= c.s.n
		}
		cand[n] = c
		n++
		sms += c.s.n
	}
	cand = cand[:n]
	if quota < sms {
		quota = d.placeThin(k, cand, quota) // what could not be placed stays pending
		return
	}
	for quota > 0 && len(cand) > 0 {
		share := (quota + sms - 1) / sms // blocks per SM this round
		keep := cand[:0]
		for _, c := range cand {
			per := min(share, c.room)
			if per*c.s.n > quota {
				// the last blocks: an equal part on every SM of the set,
				// one more on some of them
				if all := quota / c.s.n; all > 0 {
					d.put(c.s, all, k, blockWork(k, c.s))
					quota -= all * c.s.n
				}
				if quota > 0 {
					d.put(d.split(c.s, quota), 1, k, blockWork(k, c.s))
				}
				quota = 0
				break
			}
			d.put(c.s, per, k, blockWork(k, c.s))
			quota -= per * c.s.n
			if c.room -= per; c.room > 0 {
				keep = append(keep, c)
			} else {
				sms -= c.s.n
			}
		}
		cand = keep
	}
}

// save takes the resident blocks of group g off the SMs (a context switch
// away from g); lock held.
func (d *Device) save(g *group) {
	d.removeRes(func(r *residency) bool {
		if r.k.ctx.grp != g {
			return false
		}
		r.k.saved = append(r.k.saved, savedBlocks{class: r.set.class, sms: r.set.n, n: r.n, rem: r.remaining()})
		return true
	})
}

// restore puts group g's saved blocks back on SMs of the classes they left;
// lock held. The other groups' blocks were saved when g got the GPU, so the
// SMs are free.
func (d *Device) restore(g *group) {
	for _, x := range g.ctxs {
		for _, st := range x.slist {
			if len(st.q) == 0 {
				continue
			}
			k := st.q[0]
			for _, b := range k.saved {
				for left := b.sms; left > 0; {
					i := slices.IndexFunc(d.sets, func(s *smSet) bool { return s.class == b.class && len(s.res) == 0 })
					if i < 0 {
						// no empty SM of that class: lose the rest's progress
						k.pending += left * b.n
						break
					}
					s := d.sets[i]
					if s.n > left {
						s = d.split(s, left)
					}
					d.put(s, b.n, k, b.rem)
					left -= s.n
				}
			}
			k.saved = nil
		}
	}
}

// rates sets every residency's progress rate; lock held. A block runs at
// full speed while its SM is not oversubscribed (resident blocks' demands,
// 1/bps each, sum to at most 1), slower when it is; blocks of other contexts
// on its SM and other contexts' memory traffic cost it extra; the device's
// memory bandwidth is shared as memContention says.
func (d *Device) rates(kern []*op, d2d []*op) {
	per := d.ctxLoads[:0]
	for _, s := range d.sets {
		if !s.stale {
			continue // its residencies' own speeds stand until blocks come or go
		}
		s.stale = false
		// each context's demand on the set, so that a block's "other contexts"
		// is the set's load less its own context's (O(blocks), not O(blocks²))
		per = per[:0]
		load := 0.0
		for _, r := range s.res {
			l := float64(r.n) / float64(r.k.sh.bps)
			load += l
			i := slices.IndexFunc(per, func(c ctxLoad) bool { return c.x == r.k.ctx })
			if i < 0 {
				per = append(per, ctxLoad{x: r.k.ctx})
				i = len(per) - 1
			}
			per[i].load += l
		}
		for _, r := range s.res {
			own := 0.0
			for _, c := range per {
				if c.x == r.k.ctx {
					own = c.load
				}
			}
			other := max(0, load-own)
			if b := 1 / max(1, load) / (1 + coResidencyPenalty*min(1, other)); b != r.base {
				d.setBase(r, b)
			}
		}
	}
	d.ctxLoads = per[:0]
	// the bandwidth each kernel would use at the pace its SMs allow, and when its
	// first blocks end
	for _, k := range kern {
		k.bwUse, k.minEnd = k.bwBase*d.clockRel, math.Inf(1)
		if r := k.first(); r != nil {
			k.minEnd = r.end
		}
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
	stalled := d.hung || d.switching()
	for _, k := range kern {
		k.g = d.clockRel / k.memSlow
		if stalled {
			k.g = 0
		}
	}
	// what each moves: its traffic at the pace memory allows (NVML's memory utilisation)
	for _, k := range kern {
		k.bwGot = 0
		if !stalled {
			k.bwGot = k.bwUse / k.memSlow
		}
	}
	for _, o := range d2d {
		o.rate = 1 / x
		o.bwGot = o.rate
	}
}

// ctxLoad is one context's demand on an SM set (rates' scratch).
type ctxLoad struct {
	x    *Context
	load float64
}

// busySMs counts the SMs holding blocks.
func (d *Device) busySMs() int {
	n := 0
	for _, s := range d.sets {
		if len(s.res) > 0 {
			n += s.n
		}
	}
	return n
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

// placeThin puts quota blocks, fewer than the candidate SMs, one to an SM:
// on the emptiest SMs first and, among SMs equally full, on every jitter
// class in proportion to its size, so that a small kernel meets slow and
// fast SMs alike; lock held. It returns how many blocks it could not place.
func (d *Device) placeThin(k *op, cand []slot, quota int) int {
	for i := 0; i < len(cand) && quota > 0; {
		// the level: candidates as full as cand[i] (and as held)
		j, level := i, 0
		for ; j < len(cand) && cand[j].held == cand[i].held && cand[j].s.threads == cand[i].s.threads; j++ {
			level += cand[j].s.n
		}
		take := min(quota, level)
		left := take
		for x := i; x < j && left > 0; x++ {
			s := cand[x].s
			m := take * s.n / level
			if x == j-1 || m > left {
				m = left
			}
			if m == 0 {
				continue
			}
			m = min(m, s.n)
			if m < s.n {
				s = d.split(s, m)
			}
			d.put(s, 1, k, blockWork(k, s))
			left -= m
		}
		quota -= take - left
		if left > 0 { // rounding: the rest on the level's first sets
			for x := i; x < j && left > 0; x++ {
				s := cand[x].s
				if s.holdsKernel(k) {
					continue
				}
				m := min(left, s.n)
				if m < s.n {
					s = d.split(s, m)
				}
				d.put(s, 1, k, blockWork(k, s))
				left -= m
				quota -= m
			}
		}
		i = j
	}
	return quota
}
