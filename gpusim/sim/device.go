package sim

import (
	"fmt"
	"math"
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
	dropped  bool   // a kernel was dropped: its blocks leave at the next schedule
	events   uint64 // model events processed (what gpusimd's CPU goes into)

	// current operating point
	clockRel   float64
	power      float64
	powerLimit float64
	smAct      float64 // SMs holding blocks / SMs
	sets       []*smSet
	nres       int          // residencies on the SMs (blocks.go)
	resKern    []*op        // the kernels holding them (ends.go)
	ended      []*residency // scratch for completeDue
	freeRes    []*residency // residencies that left, for newRes
	seqN       uint64       // the block scheduler's queue order
	switchEnd  float64      // a context switch is under way until then
	running    []*op        // kernels the active group may run, and copies in flight
	kern       []*op        // scratch buffers reused by schedule
	h2d, d2h   []*op
	d2d        []*op
	cand       []slot
	heads      []*op
	front      *op       // the kernel the front end is setting up (launching)
	touched    []*Client // scratch for progress
	ctxLoads   []ctxLoad // scratch for rates
	stalls     stallWatch

	hung bool
	lost bool

	// cumulative counters
	busyNs  float64
	smNs    float64
	memNs   float64 // time × share of the memory bandwidth in use
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
	memNs  float64
	proc   map[int][3]float64 // pid -> busy, sm, mem
}

func newDevice(s *Sim, i int, p Profile) *Device {
	return &Device{s: s, index: i, p: p, clockRel: 1, power: p.IdlePowerW, powerLimit: p.PowerLimitW,
		sets:    newSMSets(p),
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
	d.join(x, g)
}

// join puts x in time-slicing group g, one of the device's groups.
func (d *Device) join(x *Context, g *group) {
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
	if to <= d.t {
		d.run(to)
		return
	}
	start := time.Now()
	d.run(to)
	d.noteCatchUp(start)
}

// run is advance without the stall watch.
func (d *Device) run(to float64) {
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
		d.events++
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
	if fn := e.ctx.c.evDone; fn != nil {
		id, gen, at := e.ID, e.doneGen, e.doneAt
		d.post(func(Result) { fn(id, gen, at) }, Success)
	}
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
	if d.s.trace != nil {
		d.s.traceOp(d, st, o)
		if len(st.q) > 0 {
			st.q[0].headAt = d.t
		}
	}
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

// schedule picks the active group, hands free SM room to its kernels and
// sets every running operation's rate; lock held.
func (d *Device) schedule() {
	d.dirty = false
	if d.dropped {
		d.dropped = false
		d.removeRes(func(r *residency) bool { return r.k.dropped })
	}
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
						if o.seq == 0 {
							d.seqN++
							o.seq = d.seqN
						}
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
	d.front = nil
	for _, k := range kern {
		if k.fixedLeft > 0 && (d.front == nil || k.seq < d.front.seq) {
			d.front = k
		}
	}
	if !d.switching() {
		d.dispatch(kern)
	}
	// power governor: dynamic power grows with SM activity and clock; above
	// the limit the clock drops until the draw fits. The clock chosen for the
	// SMs held now stands until the next schedule.
	d.smAct = float64(d.busySMs()) / float64(d.p.SMs)
	dyn := (d.p.FullLoadPowerW - d.p.IdlePowerW) * d.smAct
	d.clockRel = 1
	if dyn > 0 && d.p.IdlePowerW+dyn > d.powerLimit {
		d.clockRel = math.Max(float64(d.p.MinSMClockMHz)/float64(d.p.MaxSMClockMHz), (d.powerLimit-d.p.IdlePowerW)/dyn)
	}
	d.power = d.p.IdlePowerW + dyn*d.clockRel
	d.rates(kern, d2d)
	for _, o := range h2d {
		o.rate = 1 / float64(len(h2d))
	}
	for _, o := range d2h {
		o.rate = 1 / float64(len(d2h))
	}
	if d.hung {
		for _, o := range d2d {
			o.rate = 0
		}
	}
	d.running = append(d.running[:0], kern...)
	d.running = append(d.running, h2d...)
	d.running = append(d.running, d2h...)
	d.running = append(d.running, d2d...)
}

// switching: a context switch is saving and restoring SM state; no block runs.
func (d *Device) switching() bool { return d.t < d.switchEnd }

// launching: kernel k is paying its fixed launch cost (it runs, on no SM).
// The GPU's front end sets up one kernel at a time for all contexts, so only
// the oldest kernel with a fixed cost left pays it; the others queue
// (docs/gpusim-calibration.md: nos_mps_scaling).
func (d *Device) launching(k *op) bool {
	return k == d.front && k.fixedLeft > 0 && !d.switching() && !d.hung
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

// switchTo gives the GPU to group g. Leaving another group costs a context
// switch: its resident blocks are saved (they resume where they were when it
// gets the GPU back) and nothing runs for the profile's CtxSwitchNs.
func (d *Device) switchTo(g *group) {
	if g == d.active {
		return
	}
	if d.active != nil {
		d.save(d.active)
		d.switchEnd = d.t + d.p.CtxSwitchNs
	}
	d.active = g
	d.since = d.t
	d.sliceSet = false
	if g != nil && !d.switching() {
		d.restore(g)
	}
}

// nextEvent is the model time of the next completion, slice end or end of a
// context switch.
func (d *Device) nextEvent() float64 {
	// a kernel's first blocks end when its work reaches their end (rates keeps the
	// earliest), so this looks at kernels, not at every block on the SMs
	tn := math.Inf(1)
	for _, o := range d.running {
		switch {
		case o.kind == opKernel && o.g > 0 && o.resident > 0:
			tn = min(tn, d.t+max(0, o.minEnd-o.work)/o.g)
		case o.kind != opKernel:
			if o.rate > 0 {
				tn = min(tn, d.t+max(0, o.rem)/o.rate)
			}
		case d.launching(o):
			tn = min(tn, d.t+o.fixedLeft/d.clockRel)
		}
	}
	if d.switching() {
		tn = min(tn, d.switchEnd)
	}
	if d.sliceSet && !d.hung && !d.dirty {
		tn = min(tn, d.sliceEnd)
	}
	return max(tn, d.t)
}

// progress moves running work forward by dt ns and integrates counters.
func (d *Device) progress(dt float64) {
	if dt <= 0 {
		return
	}
	s := d.s
	s.markGen++
	touched := d.touched[:0]
	acc := func(c *Client) *Client {
		if c.mark != s.markGen {
			c.mark, c.accSM, c.accMem, c.accBusy = s.markGen, 0, 0, false
			touched = append(touched, c)
		}
		return c
	}
	busy := d.nres > 0
	mem := 0.0 // share of the memory bandwidth in use
	for _, o := range d.running {
		if o.kind != opKernel {
			o.rem -= o.rate * dt
			if o.kind == opCopyD2D && o.rate > 0 {
				acc(o.client).accMem += o.bwGot
				mem += o.bwGot
			}
			continue
		}
		o.work += o.g * dt
		launching := d.launching(o)
		if launching {
			o.fixedLeft -= d.clockRel * dt
			busy = true
		}
		if o.smsHeld > 0 || launching {
			c := acc(o.client)
			c.accSM += float64(o.smsHeld)
			c.accMem += o.bwGot
			c.accBusy = true
			mem += o.bwGot
		}
	}
	if busy {
		d.busyNs += dt
		d.smNs += d.smAct * float64(d.p.SMs) * dt
	}
	d.memNs += math.Min(1, mem) * dt
	for _, c := range touched {
		st := &c.stats[d.index]
		if c.accBusy {
			st.BusyNs += dt
		}
		st.SMNs += c.accSM * dt
		st.MemNs += c.accMem * dt
	}
	d.touched = touched
	d.energyJ += d.power * dt / 1e9
}

// completeDue retires finished blocks and operations, ends an expired slice
// and a finished context switch.
func (d *Device) completeDue() {
	ended := d.ended[:0]
	for _, k := range d.resKern {
		if k.g <= 0 {
			continue
		}
		w := min(coalesceMaxNs, coalesceFrac*k.blockNs)
		for r := k.first(); r != nil && r.remaining() <= 1e-3+r.base*k.g*w; r = k.first() {
			k.ends.pop()
			ended = append(ended, r)
		}
	}
	for _, r := range ended {
		d.unplace(r)
	}
	if len(ended) > 0 {
		d.mergeEmpty()
		d.dirty = true
	}
	clear(ended)
	d.ended = ended[:0]
	if k := d.front; k != nil && k.fixedLeft <= 1e-3 {
		k.fixedLeft, d.front = 0, nil
		d.dirty = true
	}
	for _, g := range d.groups {
		for _, x := range g.ctxs {
			for _, st := range x.slist {
				if len(st.q) == 0 {
					continue
				}
				switch o := st.q[0]; o.kind {
				case opKernel:
					if o.seq != 0 && o.pending == 0 && o.resident == 0 && o.fixedLeft <= 0 && o.saved == nil {
						d.pop(st)
					}
				case opMarker, opWait:
				default:
					if o.rate > 0 && o.rem <= 1e-3 {
						d.pop(st)
					}
				}
			}
		}
	}
	if d.switchEnd > 0 && d.t >= d.switchEnd {
		d.switchEnd = 0
		if d.active != nil {
			d.restore(d.active)
		}
		d.dirty = true
	}
	if d.sliceSet && !d.hung && !d.switching() && d.t >= d.sliceEnd {
		d.switchTo(d.nextGroup(d.contenders()))
		d.dirty = true
	}
}

// loop runs the device in real time: it advances the model whenever something was
// queued (kick) and, through the alarm, whenever the model's next event is due.
func (d *Device) loop() {
	defer d.s.wg.Done()
	al := newAlarm(d.step)
	defer al.close()
	for {
		d.step(al)
		select {
		case <-d.s.stop:
			return
		case <-d.wake:
		}
	}
}

// step advances the model to now and sets the alarm for its next event. The alarm is
// set under the lock, so whichever of the loop and the alarm steps last sets it from
// the latest state.
func (d *Device) step(al *alarm) {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.nowNs()
	d.advance(now)
	tn := d.nextEvent()
	if math.IsInf(tn, 1) {
		al.stop()
		return
	}
	al.set(time.Duration((tn - now) * s.cfg.TimeScale))
}
