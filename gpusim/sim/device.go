package sim

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// group is one time-slicing participant: a context of its own without MPS,
// or all the contexts of one MPS server on the device.
type group struct {
	ctxs []*Context
	srv  *MPSServer
}

// Device is one simulated GPU.
type Device struct {
	s     *Sim
	index int
	p     Profile
	uuid  string

	memUsed uint64
	nextPtr uint64
	groups  []*group
	active  *group
	since   float64 // when the active group got the GPU
	// sliceEnd is when the active group must yield; valid while sliceSet,
	// that is while another group waits with kernels
	sliceEnd float64
	sliceSet bool
	t        float64 // model time reached, ns
	dirty    bool

	// current operating point
	clockRel   float64
	power      float64
	powerLimit float64
	smAct      float64 // SMs held / SMs
	running    []*op
	spare      []*op // scratch buffers reused by schedule
	kern       []*op
	h2d, d2h   []*op
	d2d        []*op
	touched    []*Client // scratch for progress

	hung bool
	lost bool

	// cumulative counters
	busyNs  float64
	smNs    float64
	energyJ float64

	xids    []XidEvent
	samples []sample
	wake    chan struct{}
}

// XidEvent is an injected or modelled Xid-like error, as NVML reports them.
type XidEvent struct {
	Seq    uint64
	Device int
	Xid    int
	PID    int
	Time   time.Time
	Detail string
}

type sample struct {
	t      float64
	busyNs float64
	smNs   float64
	proc   map[int][2]float64 // pid -> busy, sm
}

func newDevice(s *Sim, i int, p Profile) *Device {
	return &Device{s: s, index: i, p: p, clockRel: 1, power: p.IdlePowerW, powerLimit: p.PowerLimitW,
		uuid:    fmt.Sprintf("GPU-5e9d0000-%04x-4000-8000-%012x", i, 0x6a5e0000+i),
		nextPtr: 0x7f0000000000 + uint64(i)<<36, wake: make(chan struct{}, 1)}
}

// kick wakes the device loop to reconsider its next event.
func (d *Device) kick() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// post runs cb(code) later, outside the lock, in order.
func (d *Device) post(cb func(Result), code Result) { d.s.post(cb, code) }

func (d *Device) attach(x *Context) {
	var g *group
	if x.mps != nil {
		for _, h := range d.groups {
			if h.srv == x.mps {
				g = h
			}
		}
	}
	if g == nil {
		g = &group{srv: x.mps}
		d.groups = append(d.groups, g)
	}
	g.ctxs = append(g.ctxs, x)
	x.grp = g
	d.dirty = true
}

func (d *Device) detach(x *Context) {
	g := x.grp
	for i, y := range g.ctxs {
		if y == x {
			g.ctxs = append(g.ctxs[:i], g.ctxs[i+1:]...)
			break
		}
	}
	if len(g.ctxs) == 0 {
		for i, h := range d.groups {
			if h == g {
				d.groups = append(d.groups[:i], d.groups[i+1:]...)
				break
			}
		}
		if d.active == g {
			d.active = nil
		}
	}
	d.dirty = true
}

// prio is the group's time-slicing priority: its highest context's.
func (g *group) prio() int {
	p := -1 << 30
	for _, x := range g.ctxs {
		p = max(p, x.priority)
	}
	return p
}

// contenders are the groups with kernels to run at the highest priority
// present: only they share the GPU (time slicing); lower ones wait.
func (d *Device) contenders() []*group {
	var out []*group
	top := -1 << 30
	for _, g := range d.groups {
		if !g.hasKernelWork() {
			continue
		}
		switch p := g.prio(); {
		case p > top:
			top, out = p, append(out[:0], g)
		case p == top:
			out = append(out, g)
		}
	}
	return out
}

// hasKernelWork: a group has a kernel at the head of some stream.
func (g *group) hasKernelWork() bool {
	for _, x := range g.ctxs {
		if x.err != Success {
			continue
		}
		for _, st := range x.slist {
			if len(st.q) > 0 && st.q[0].kind == opKernel {
				return true
			}
		}
	}
	return false
}

// advance brings the model to time to (ns); lock held.
func (d *Device) advance(to float64) {
	for i := 0; i < 1_000_000; i++ {
		d.settle()
		if d.dirty {
			d.schedule()
		}
		tn := d.nextEvent()
		if tn > to {
			d.progress(to - d.t)
			d.t = math.Max(d.t, to)
			return
		}
		d.progress(tn - d.t)
		d.t = tn
		d.completeDue()
	}
	d.s.log.Error("device model did not converge", "device", d.index)
}

// settle finishes zero-time operations at stream heads (event records,
// satisfied waits); lock held.
func (d *Device) settle() {
	for changed := true; changed; {
		changed = false
		for _, g := range d.groups {
			for _, x := range g.ctxs {
				for _, st := range x.slist {
					for len(st.q) > 0 {
						o := st.q[0]
						if o.kind == opMarker {
							if o.gen > o.ev.doneGen {
								o.ev.doneGen = o.gen
								o.ev.doneAt = d.t
								d.fireEvent(o.ev)
							}
						} else if o.kind == opWait {
							if o.ev.doneGen < o.gen {
								break
							}
						} else {
							break
						}
						d.pop(st)
						changed = true
					}
				}
			}
		}
	}
}

func (d *Device) fireEvent(e *Event) {
	keep := e.waiters[:0]
	for _, w := range e.waiters {
		if w.seq <= e.doneGen {
			d.post(w.cb, Success)
		} else {
			keep = append(keep, w)
		}
	}
	e.waiters = keep
}

// pop finishes the head of st; lock held.
func (d *Device) pop(st *Stream) {
	o := st.q[0]
	st.q[0] = nil
	st.q = st.q[1:]
	st.done++
	c := o.client
	c.pending--
	c.signalRoom()
	if len(st.waiters) > 0 {
		keep := st.waiters[:0]
		for _, w := range st.waiters {
			if w.seq <= st.done {
				d.post(w.cb, Success)
			} else {
				keep = append(keep, w)
			}
		}
		st.waiters = keep
	}
	d.dirty = true
}

// schedule picks the active group and gives every running operation its
// SMs and rate; lock held.
func (d *Device) schedule() {
	d.dirty = false
	// time slicing between the groups that have kernels to run (at the top
	// priority present; a higher-priority arrival preempts at once)
	withWork := d.contenders()
	activeHasWork := false
	for _, g := range withWork {
		if g == d.active {
			activeHasWork = true
		}
	}
	if !activeHasWork && len(withWork) > 0 {
		d.switchTo(d.nextGroup(withWork))
	}
	if len(withWork) > 1 {
		if !d.sliceSet {
			// contention starts: the active group finishes its current slice
			slice := float64(d.s.cfg.TimeSlice.Nanoseconds())
			k := math.Max(1, math.Ceil((d.t-d.since)/slice))
			d.sliceEnd, d.sliceSet = d.since+k*slice, true
		}
	} else {
		d.sliceSet = false
	}
	// the previous running set keeps its allocations until admit has read
	// them; two buffers alternate to avoid allocating
	prev := d.running
	d.running, d.spare = d.spare[:0], prev
	kern, h2d, d2h, d2d := d.kern[:0], d.h2d[:0], d.d2h[:0], d.d2d[:0]
	defer func() { d.kern, d.h2d, d.d2h, d.d2d = kern, h2d, d2h, d2d }()
	for _, g := range d.groups {
		for _, x := range g.ctxs {
			if x.err != Success {
				continue
			}
			for _, st := range x.slist {
				if len(st.q) == 0 {
					continue
				}
				o := st.q[0]
				switch o.kind {
				case opKernel:
					if g == d.active {
						kern = append(kern, o)
					}
				case opCopyH2D:
					h2d = append(h2d, o)
				case opCopyD2H:
					d2h = append(d2h, o)
				case opCopyD2D:
					d2d = append(d2d, o)
				}
			}
		}
	}
	d.admit(kern)
	for _, o := range prev {
		o.alloc, o.rate = 0, 0
	}
	// max-min fair share of SMs, each kernel capped by its need and its
	// context's active-thread limit
	slices.SortFunc(kern, func(a, b *op) int { return cmp.Compare(d.demand(a), d.demand(b)) })
	left := float64(d.p.SMs)
	for i, o := range kern {
		share := left / float64(len(kern)-i)
		o.alloc = math.Min(d.demand(o), share)
		left -= o.alloc
	}
	// a context with several streams may not exceed its cap in total
	for _, o := range kern {
		o.ctx.held = 0
	}
	for _, o := range kern {
		o.ctx.held += o.alloc
	}
	for _, o := range kern {
		if x := o.ctx; x.held > x.smCap {
			o.alloc *= x.smCap / x.held
		}
	}
	total := 0.0
	for _, o := range kern {
		total += o.alloc
	}
	d.smAct = total / float64(d.p.SMs)
	// power governor: dynamic power grows with SM activity and clock; above
	// the limit the clock drops until the draw fits
	dyn := (d.p.FullLoadPowerW - d.p.IdlePowerW) * d.smAct
	d.clockRel = 1
	if dyn > 0 && d.p.IdlePowerW+dyn > d.powerLimit {
		d.clockRel = math.Max(float64(d.p.MinSMClockMHz)/float64(d.p.MaxSMClockMHz), (d.powerLimit-d.p.IdlePowerW)/dyn)
	}
	d.power = d.p.IdlePowerW + dyn*d.clockRel
	bwDemand := 0.0
	for _, o := range kern {
		o.rate = o.alloc / float64(o.sReq) * d.clockRel
		bwDemand += o.bw * o.rate
	}
	for _, o := range d2d {
		o.rate = 1
		bwDemand += 1
	}
	if bwDemand > 1 {
		for _, o := range kern {
			o.rate /= bwDemand
		}
		for _, o := range d2d {
			o.rate /= bwDemand
		}
	}
	for _, o := range h2d {
		o.rate = 1 / float64(len(h2d))
	}
	for _, o := range d2h {
		o.rate = 1 / float64(len(d2h))
	}
	if d.hung {
		for _, o := range kern {
			o.rate = 0
		}
		for _, o := range d2d {
			o.rate = 0
		}
	}
	d.running = append(d.running, kern...)
	d.running = append(d.running, h2d...)
	d.running = append(d.running, d2h...)
	d.running = append(d.running, d2d...)
}

func (d *Device) ctxOf(o *op) *Context { return o.ctx }

func (d *Device) demand(o *op) float64 {
	w := math.Min(float64(o.sReq), d.ctxOf(o).smCap)
	if d.t < o.joinAt {
		w = math.Min(w, o.freeCap)
	}
	return w
}

// admit handles kernels that start now. The block scheduler hands a new
// kernel only SMs that are free; SMs held by running kernels come free as
// their resident blocks finish, on average half a block time later. Until
// then (joinAt) the newcomer runs on the free SMs alone. This is why an
// uncapped neighbour delays a small online kernel under MPS, and a capped
// one (leaving SMs free) does not.
func (d *Device) admit(kern []*op) {
	busy, block := 0.0, 0.0
	for _, o := range kern {
		if o.started {
			busy += o.alloc
			if o.alloc > 0 && o.rate > 0 {
				// a block takes longer when the kernel runs slowed down
				block = math.Max(block, o.blockNs*(o.alloc/float64(o.sReq))/o.rate)
			}
		}
	}
	for _, o := range kern {
		if o.started {
			continue
		}
		o.started = true
		want := math.Min(float64(o.sReq), d.ctxOf(o).smCap)
		free := math.Max(0, float64(d.p.SMs)-busy)
		if free >= want || block == 0 {
			busy += want
			continue
		}
		o.freeCap, o.joinAt = free, d.t+block/2
		busy += free
	}
}

func (d *Device) nextGroup(withWork []*group) *group {
	if len(withWork) == 0 {
		return nil
	}
	// round robin in d.groups order, starting after the active group
	start := -1
	for i, g := range d.groups {
		if g == d.active {
			start = i
		}
	}
	for k := 1; k <= len(d.groups); k++ {
		g := d.groups[(start+k+len(d.groups))%len(d.groups)]
		for _, h := range withWork {
			if h == g {
				return g
			}
		}
	}
	return withWork[0]
}

func (d *Device) switchTo(g *group) {
	if g != d.active {
		d.active = g
		d.since = d.t
		d.sliceSet = false
	}
}

// nextEvent is the model time of the next completion or slice end.
func (d *Device) nextEvent() float64 {
	tn := math.Inf(1)
	for _, o := range d.running {
		if o.rate > 0 {
			tn = math.Min(tn, d.t+math.Max(0, o.rem)/o.rate)
		}
		if o.joinAt > d.t {
			tn = math.Min(tn, o.joinAt)
		}
	}
	if d.sliceSet && !d.hung && !d.dirty {
		tn = math.Min(tn, d.sliceEnd)
	}
	return math.Max(tn, d.t)
}

// progress moves running work forward by dt ns and integrates counters.
func (d *Device) progress(dt float64) {
	if dt <= 0 {
		return
	}
	busy := false
	s := d.s
	s.markGen++
	touched := d.touched[:0]
	for _, o := range d.running {
		o.rem -= o.rate * dt
		if o.kind == opKernel && o.alloc > 0 {
			busy = true
			c := o.client
			if c.mark != s.markGen {
				c.mark, c.accSM = s.markGen, 0
				touched = append(touched, c)
			}
			c.accSM += o.alloc
		}
	}
	if busy {
		d.busyNs += dt
		d.smNs += d.smAct * float64(d.p.SMs) * dt
	}
	for _, c := range touched {
		c.stats[d.index].BusyNs += dt
		c.stats[d.index].SMNs += c.accSM * dt
	}
	d.touched = touched
	d.energyJ += d.power * dt / 1e9
}

// completeDue pops finished operations, lets waiting kernels take their
// share, and ends an expired slice.
func (d *Device) completeDue() {
	for _, o := range d.running {
		if o.joinAt != 0 && o.joinAt <= d.t {
			o.joinAt = 0
			d.dirty = true
		}
	}
	for _, g := range d.groups {
		for _, x := range g.ctxs {
			for _, st := range x.slist {
				if len(st.q) > 0 {
					o := st.q[0]
					if o.kind != opMarker && o.kind != opWait && o.rate > 0 && o.rem <= 1e-3 {
						d.pop(st)
					}
				}
			}
		}
	}
	if d.sliceSet && !d.hung && d.t >= d.sliceEnd {
		d.switchTo(d.nextGroup(d.contenders()))
		d.dirty = true
	}
}

// loop runs the device in real time: it sleeps until the next modelled
// event, then advances the model.
func (d *Device) loop() {
	defer d.s.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s := d.s
		s.mu.Lock()
		now := s.nowNs()
		d.advance(now)
		tn := d.nextEvent()
		s.mu.Unlock()
		wait := time.Hour
		if !math.IsInf(tn, 1) {
			wait = time.Duration(tn - now)
			if wait < 0 {
				wait = 0
			}
		}
		timer.Reset(wait)
		select {
		case <-s.stop:
			return
		case <-d.wake:
			// Go >= 1.23 timers: Stop/Reset never leave a stale tick to drain
			timer.Stop()
		case <-timer.C:
		}
	}
}
