package sim

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultTimeSlice is the time slice of contexts outside MPS. NVIDIA does
// not document its default; 3 ms, with the context-switch cost in
// blocks.go, reproduces the published time-slicing measurements
// (docs/gpusim-calibration.md: nos_ts_*, tally_*_ts).
const DefaultTimeSlice = 3 * time.Millisecond

// Config sets up a simulator.
type Config struct {
	Devices    []Profile     // one entry per simulated GPU
	TimeSlice  time.Duration // time slice between contexts without MPS (default DefaultTimeSlice)
	MaxPending int           // queued operations per process before launches block (default 1024)
	Window     time.Duration // NVML utilisation averaging window (default 1s)
	// TimeScale runs the model slower than real time: one model second
	// takes TimeScale real seconds (default 1: real time). A slowed model
	// lets an in-process client issue launches faster than the model's
	// kernels complete on a small machine (gpusim/calibration uses it);
	// programs that sleep or time in real time must scale their own clocks.
	TimeScale float64
	Logger    *slog.Logger
	// OpTrace, when set, receives one CSV line per finished operation (see
	// traceOp): which process, stream and kind, and when it was queued, reached
	// its stream's head, first ran and finished on the model clock. For
	// explaining a slow request; it costs a formatted line per operation.
	OpTrace io.Writer
}

// Sim is a set of simulated GPUs and the processes using them. One lock
// guards the whole model: devices share MPS servers and processes, and the
// operations are short.
type Sim struct {
	mu      sync.Mutex
	cfg     Config
	start   time.Time
	devs    []*Device
	clients map[*Client]bool
	servers map[int]*MPSServer // by server PID
	log     *slog.Logger
	stop    chan struct{}
	wg      sync.WaitGroup
	closed  bool

	notes     []note
	notifying bool
	xidSeq    uint64
	markGen   uint64
	trace     *bufio.Writer
	traceBuf  []byte
}

// New starts a simulator; Close stops its device goroutines.
func New(cfg Config) (*Sim, error) {
	if len(cfg.Devices) == 0 {
		return nil, fmt.Errorf("simulator needs at least one device")
	}
	if len(cfg.Devices) > 64 {
		return nil, fmt.Errorf("simulator supports at most 64 devices, got %d", len(cfg.Devices))
	}
	if cfg.TimeSlice == 0 {
		cfg.TimeSlice = DefaultTimeSlice
	}
	if cfg.TimeSlice < 50*time.Microsecond || cfg.TimeSlice > time.Second {
		return nil, fmt.Errorf("time slice %v out of range [50us, 1s]", cfg.TimeSlice)
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = 1024
	}
	if cfg.MaxPending < 1 {
		return nil, fmt.Errorf("max pending operations must be positive")
	}
	if cfg.Window == 0 {
		cfg.Window = time.Second
	}
	if cfg.Window < 100*time.Millisecond || cfg.Window > time.Minute {
		return nil, fmt.Errorf("utilisation window %v out of range [100ms, 1m]", cfg.Window)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.TimeScale == 0 {
		cfg.TimeScale = 1
	}
	if cfg.TimeScale < 1 || cfg.TimeScale > 100 {
		return nil, fmt.Errorf("time scale %v out of range [1, 100]", cfg.TimeScale)
	}
	s := &Sim{cfg: cfg, start: time.Now(), clients: map[*Client]bool{}, servers: map[int]*MPSServer{},
		log: cfg.Logger, stop: make(chan struct{})}
	if cfg.OpTrace != nil {
		s.trace = bufio.NewWriterSize(cfg.OpTrace, 1<<16)
		s.trace.WriteString(opTraceHeader)
	}
	for i, p := range cfg.Devices {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("device %d: %w", i, err)
		}
		d := newDevice(s, i, p)
		s.devs = append(s.devs, d)
	}
	for _, d := range s.devs {
		s.wg.Add(2)
		go d.loop()
		go d.sampler()
	}
	return s, nil
}

// Close stops the simulator's goroutines.
func (s *Sim) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.stop)
	s.mu.Unlock()
	s.wg.Wait()
	if s.trace != nil {
		s.mu.Lock() // a client may still be calling in
		s.trace.Flush()
		s.mu.Unlock()
	}
}

// nowNs is the simulator's clock: nanoseconds since New, monotonic.
func (s *Sim) nowNs() float64 { return float64(time.Since(s.start).Nanoseconds()) / s.cfg.TimeScale }

// DeviceCount is the number of simulated GPUs.
func (s *Sim) DeviceCount() int { return len(s.devs) }

// Device returns device i or nil.
func (s *Sim) Device(i int) *Device {
	if i < 0 || i >= len(s.devs) {
		return nil
	}
	return s.devs[i]
}

// Notifier receives a process's asynchronous errors (sticky context faults).
type Notifier func(ctx uint32, code Result)

// Client is one process using the simulated GPUs (one driver connection).
type Client struct {
	s       *Sim
	PID     int
	UID     int
	notify  Notifier
	evDone  EventNotifier // nil: the process asks for event completions
	ctxs    map[uint32]*Context
	streams map[uint32]*Stream
	events  map[uint32]*Event
	modules map[uint32]*Module
	funcs   map[uint32]Function
	pending int
	room    chan struct{}
	closed  bool
	stats   []procStats // per device, cumulative; survives context teardown
	nextPtr uint64
	start   float64
	mark    uint64  // scratch for Device.progress: generation seen
	accSM   float64 // scratch: SMs held in this progress step
	accMem  float64 // scratch: share of the device's bandwidth it moves in this step
	accBusy bool    // scratch: it ran a kernel in this step
}

// procStats are a process's cumulative counters on one device.
type procStats struct {
	BusyNs   float64 // time any of its kernels held SMs
	SMNs     float64 // SM-nanoseconds its kernels held
	MemNs    float64 // time × share of the device's memory bandwidth it moved
	Launches uint64
	MemUsed  uint64
}

// EventNotifier receives an event's completion: its id, which record of it
// completed (1 for the first) and when, on the simulator's clock (ns). The
// driver keeps it so that cuEventQuery and cuEventElapsedTime answer without a
// round trip, as a real driver reads the completion the GPU wrote to host memory.
type EventNotifier func(id uint32, gen uint64, atNs float64)

// NotifyEvents has fn told of every completion of this process's events from now
// on; it is called without the simulator lock and must not block.
func (c *Client) NotifyEvents(fn EventNotifier) {
	c.s.mu.Lock()
	c.evDone = fn
	c.s.mu.Unlock()
}

// Connect registers a process. notify is called, without the simulator lock,
// when one of its contexts takes a sticky error.
func (s *Sim) Connect(pid, uid int, notify Notifier) *Client {
	if notify == nil {
		notify = func(uint32, Result) {}
	}
	c := &Client{s: s, PID: pid, UID: uid, notify: notify, ctxs: map[uint32]*Context{},
		streams: map[uint32]*Stream{}, events: map[uint32]*Event{}, modules: map[uint32]*Module{},
		funcs: map[uint32]Function{}, room: make(chan struct{}, 1), stats: make([]procStats, len(s.devs))}
	s.mu.Lock()
	s.clients[c] = true
	c.start = s.nowNs()
	s.mu.Unlock()
	return c
}

// Context is a process's context on one device.
type Context struct {
	ID       uint32
	c        *Client
	dev      *Device
	mps      *MPSServer // nil without MPS
	smCap    int        // SMs this context's blocks may occupy at once (active-thread percentage)
	atp      float64
	memLimit uint64 // 0 = device memory only
	memUsed  uint64
	allocs   map[uint64]uint64
	streams  map[uint32]*Stream
	slist    []*Stream // the same streams, for the scheduler's loops
	smsHeld  int       // SMs holding at least one of its blocks (the MPS active-thread cap counts these)
	priority int       // time-slicing priority (higher runs first)
	err      Result    // sticky error
	grp      *group
	syncs    []*ctxSync
	// parent is the context a green context was made from (nil for any other):
	// the green context's memory is the parent's (memOwner).
	parent *Context
}

// memOwner is the context whose memory accounting x's allocations count in:
// a green context's are its parent's, as a real green context shares its primary
// context's address space.
func (x *Context) memOwner() *Context {
	if x.parent != nil {
		return x.parent
	}
	return x
}

type ctxSync struct {
	left int
	cb   func(Result)
}

type opKind uint8

const (
	opKernel opKind = iota
	opCopyH2D
	opCopyD2H
	opCopyD2D // also memset: device-bandwidth bound, no SMs
	opMarker  // event record
	opWait    // stream waits for an event
)

type op struct {
	kind   opKind
	rem    float64 // copies: remaining nominal ns
	bw     float64
	ev     *Event
	gen    uint64 // event generation recorded or awaited
	rate   float64
	client *Client
	ctx    *Context
	// kernels: block-level execution (blocks.go)
	sh        shape
	blockNs   float64 // one block's time on an SM its kernel fills alone
	fixedLeft float64 // launch cost still to pay before the first block runs
	seq       uint64  // place in the block scheduler's queue; 0 = not yet queued
	pending   int     // blocks not yet dispatched
	resident  int     // blocks on SMs now
	smsHeld   int     // SMs holding at least one of its blocks
	saved     []savedBlocks
	bwUse     float64 // scratch (rates): bandwidth share it would use unhindered
	memSlow   float64 // scratch (rates): how much memory contention stretches its blocks
	bwGot     float64 // (rates) share of the device's bandwidth it moves now
	// A kernel's blocks advance on one clock: a block of base speed b (its SM's
	// share, blocks.go) does b·g ns of work per ns while the kernel's speed factor g
	// (clock and memory contention, set by rates) holds, so only work, the integral
	// of g, moves as the model advances; each block's end is a point on it.
	work    float64      // ∫g dt since the kernel first ran
	g       float64      // (rates) clock ÷ memory slow-down; 0 while the device is stalled
	minEnd  float64      // (rates) the earliest end of its blocks on work; +Inf with none
	res     []*residency // its blocks on the SMs (ends.go)
	rki     int          // its index in its device's resKern
	ends    endHeap      // its residencies' ends on work, stale marks included
	bwBase  float64      // Σ blocks × base speed over res: bandwidth at full clock ÷ bw
	dropped bool         // its stream was dropped (context fault or release)
	// model times for the op trace (ns): queued, reached the stream's head, first block placed
	queuedAt, headAt, ranAt float64
}

// Stream is an in-order queue of operations.
type Stream struct {
	ID      uint32
	ctx     *Context
	q       []*op
	enq     uint64 // operations ever queued
	done    uint64 // operations ever finished
	waiters []streamWaiter
}

type streamWaiter struct {
	seq uint64
	cb  func(Result)
}

// Event marks a point in a stream.
type Event struct {
	ID      uint32
	ctx     *Context
	recGen  uint64
	doneGen uint64
	doneAt  float64
	waiters []streamWaiter
}

// validate the things a process hands over.

func (c *Client) context(id uint32) (*Context, Result) {
	x, ok := c.ctxs[id]
	if !ok {
		return nil, ErrInvalidContext
	}
	return x, Success
}

// CreateContext makes context id on device dev. mpsPID names the MPS server
// the process joined (0: no MPS). atp and memLimit are the client's requested
// active-thread percentage (0 = none) and pinned memory limit (0 = none);
// under MPS they can only tighten the server's defaults.
func (c *Client) CreateContext(id uint32, dev int, defaultStream uint32, mpsPID int, atp float64, memLimit uint64) Result {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.Device(dev)
	if d == nil {
		return ErrInvalidDevice
	}
	if c.closed {
		return ErrInvalidContext
	}
	if d.lost {
		return ErrDeviceUnavailable
	}
	if _, dup := c.ctxs[id]; dup {
		return ErrInvalidValue
	}
	if _, dup := c.streams[defaultStream]; dup {
		return ErrInvalidValue
	}
	if atp < 0 || atp > 100 || math.IsNaN(atp) {
		return ErrInvalidValue
	}
	x := &Context{ID: id, c: c, dev: d, atp: 100, allocs: map[uint64]uint64{}, streams: map[uint32]*Stream{}}
	if mpsPID != 0 {
		srv := s.servers[mpsPID]
		if srv == nil {
			return ErrMPSConnectionFailed
		}
		if srv.UID != c.UID {
			return ErrMPSConnectionFailed
		}
		if srv.faulted {
			return ErrMPSServerNotReady
		}
		x.mps = srv
		x.atp = srv.ATP
		if atp > 0 && atp < x.atp {
			x.atp = atp
		}
		x.memLimit = srv.MemLimit[dev]
		if memLimit > 0 && (x.memLimit == 0 || memLimit < x.memLimit) {
			x.memLimit = memLimit
		}
		srv.clients[c] = true
	}
	x.smCap = smCap(x.atp, d.p.SMs)
	d.advance(s.nowNs())
	d.attach(x)
	c.add(x, defaultStream)
	return Success
}

// add registers a new context of the process with its default stream; lock held.
func (c *Client) add(x *Context, defaultStream uint32) {
	c.ctxs[x.ID] = x
	st := &Stream{ID: defaultStream, ctx: x}
	x.streams[defaultStream] = st
	x.slist = append(x.slist, st)
	c.streams[defaultStream] = st
}

// smCap is how many SMs an active-thread percentage allows: MPS hands out
// whole TPCs (pairs of SMs), rounding down — 50% of an 82-SM GPU is 40 SMs,
// not 41 (docs/gpusim-calibration.md, elvinger_atp_tpc) — and at least one TPC.
func smCap(atp float64, sms int) int {
	if atp >= 100 {
		return sms
	}
	return max(2, 2*int(math.Floor(atp/100*float64(sms)/2)))
}

// SetPriority sets a context's time-slicing priority (-1 low, 0 normal,
// 1 high). While a higher-priority group has kernels, lower ones do not run;
// groups of equal priority time-slice. This models the priority time-sharing
// baseline; the simulator still does not know what the work is.
func (c *Client) SetPriority(ctx uint32, prio int) Result {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	x, r := c.context(ctx)
	if r != Success {
		return r
	}
	if prio < -1 || prio > 1 {
		return ErrInvalidValue
	}
	x.dev.advance(c.s.nowNs())
	x.priority = prio
	x.dev.dirty = true
	x.dev.kick()
	return Success
}

// ContextInfo reports a context's effective limits.
func (c *Client) ContextInfo(id uint32) (atp float64, smCap int, memLimit uint64, r Result) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	x, r := c.context(id)
	if r != Success {
		return 0, 0, 0, r
	}
	return x.atp, int(x.smCap), x.memLimit, Success
}

// DestroyContext waits for the context's work to finish (as cuCtxDestroy
// does), and its green contexts' (which go with it), then releases it. done
// runs without the simulator lock.
func (c *Client) DestroyContext(id uint32, done func(Result)) {
	s := c.s
	s.mu.Lock()
	x, r := c.context(id)
	if r != Success {
		s.mu.Unlock()
		done(r)
		return
	}
	family := []*Context{x}
	for _, y := range c.ctxs {
		if y.parent == x {
			family = append(family, y)
		}
	}
	s.mu.Unlock()
	c.syncContexts(family, func() {
		s.mu.Lock()
		if c.ctxs[id] == x {
			c.releaseContext(x)
		}
		s.mu.Unlock()
		done(Success)
	})
}

// releaseContext drops a context; lock held.
func (c *Client) releaseContext(x *Context) {
	d := x.dev
	d.advance(c.s.nowNs())
	// A green context cannot outlive the context it was made from: its memory is
	// that context's, freed with it. The driver's green context holds a retain on
	// the primary context, so only cuDevicePrimaryCtxReset or the process's end
	// get here with children left.
	for _, y := range c.ctxs {
		if y.parent == x {
			c.releaseContext(y)
		}
	}
	for _, st := range x.streams {
		c.dropStream(st, ErrInvalidContext)
		delete(c.streams, st.ID)
	}
	for id, ev := range c.events {
		if ev.ctx == x {
			delete(c.events, id)
		}
	}
	d.memUsed -= x.memUsed
	c.stats[d.index].MemUsed -= x.memUsed
	x.memUsed = 0
	d.detach(x)
	delete(c.ctxs, x.ID)
	if x.mps != nil {
		c.s.mpsClientMaybeGone(x.mps, c)
	}
	d.kick()
}

// dropStream discards queued work, failing its waiters with code; lock held.
func (c *Client) dropStream(st *Stream, code Result) {
	d := st.ctx.dev
	if len(st.q) > 0 {
		d.dirty, d.dropped = true, true
	}
	c.pending -= len(st.q)
	st.done += uint64(len(st.q))
	for _, o := range st.q {
		o.dropped = true // the device frees its SMs at its next schedule
	}
	st.q = nil
	w := st.waiters
	st.waiters = nil
	for _, x := range w {
		d.post(x.cb, code)
	}
	c.signalRoom()
}

func (c *Client) signalRoom() {
	if c.pending < c.s.cfg.MaxPending {
		select {
		case c.room <- struct{}{}:
		default:
		}
	}
}

// CreateStream adds stream id to context ctx.
func (c *Client) CreateStream(ctx, id uint32) Result {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	x, r := c.context(ctx)
	if r != Success {
		return r
	}
	if _, dup := c.streams[id]; dup {
		return ErrInvalidValue
	}
	st := &Stream{ID: id, ctx: x}
	x.streams[id] = st
	x.slist = append(x.slist, st)
	c.streams[id] = st
	return Success
}

// DestroyStream releases a stream once its work is done (like
// cuStreamDestroy, which does not wait but lets queued work finish).
func (c *Client) DestroyStream(id uint32) Result {
	c.s.mu.Lock()
	st, ok := c.streams[id]
	if !ok {
		c.s.mu.Unlock()
		return ErrInvalidHandle
	}
	delete(c.streams, id)
	c.s.mu.Unlock()
	c.syncStream(st, func(Result) {
		c.s.mu.Lock()
		delete(st.ctx.streams, st.ID)
		st.ctx.slist = slices.DeleteFunc(st.ctx.slist, func(y *Stream) bool { return y == st })
		c.s.mu.Unlock()
	})
	return Success
}

// LoadModule parses a module image under handle id.
func (c *Client) LoadModule(id uint32, data []byte) Result {
	m, err := ParseModule(data)
	if err != nil {
		c.s.log.Debug("module rejected", "pid", c.PID, "err", err)
		return ErrInvalidImage
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if _, dup := c.modules[id]; dup {
		return ErrInvalidValue
	}
	c.modules[id] = m
	return Success
}

// UnloadModule forgets a module (its functions stay valid for queued work).
func (c *Client) UnloadModule(id uint32) Result {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if _, ok := c.modules[id]; !ok {
		return ErrInvalidHandle
	}
	delete(c.modules, id)
	return Success
}

// GetFunction binds function handle fn to name in module mod.
func (c *Client) GetFunction(mod, fn uint32, name string) Result {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	m, ok := c.modules[mod]
	if !ok {
		return ErrInvalidHandle
	}
	f, ok := m.Lookup(name)
	if !ok {
		return ErrNotFound
	}
	c.funcs[fn] = f
	return Success
}

// enqueue appends o to stream id; lock held.
func (c *Client) enqueue(stream uint32, o *op) Result {
	st, ok := c.streams[stream]
	if !ok {
		return ErrInvalidHandle
	}
	x := st.ctx
	if x.err != Success {
		return x.err
	}
	d := x.dev
	d.advance(c.s.nowNs())
	o.client, o.ctx = c, x
	o.queuedAt = d.t
	st.q = append(st.q, o)
	st.enq++
	c.pending++
	if len(st.q) == 1 {
		o.headAt = d.t
		// it starts now, in model time, not when the device goroutine next
		// wakes up
		d.dirty = true
		d.advance(d.t)
		d.kick()
	}
	return Success
}

// Launch queues a kernel. Errors are those a real launch reports at once.
func (c *Client) Launch(stream, fn uint32, grid, block [3]uint32) Result {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	f, ok := c.funcs[fn]
	if !ok {
		return ErrInvalidHandle
	}
	st, ok := c.streams[stream]
	if !ok {
		return ErrInvalidHandle
	}
	sh, err := kernelShape(&st.ctx.dev.p, f, grid, block)
	if err != nil {
		return ErrInvalidValue
	}
	r := c.enqueue(stream, &op{kind: opKernel, sh: sh, pending: sh.blocks, bw: f.BW, blockNs: f.BlockNs, fixedLeft: f.FixedNs})
	if r == Success {
		c.stats[st.ctx.dev.index].Launches++
	}
	return r
}

// Copy kinds for Copy.
const (
	CopyHostToDevice   = 1
	CopyDeviceToHost   = 2
	CopyDeviceToDevice = 3
	CopyMemset         = 4
)

// Copy queues a memory copy or memset of n bytes.
func (c *Client) Copy(stream uint32, kind int, n uint64) Result {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	st, ok := c.streams[stream]
	if !ok {
		return ErrInvalidHandle
	}
	p := &st.ctx.dev.p
	o := &op{}
	switch kind {
	case CopyHostToDevice:
		o.kind, o.rem = opCopyH2D, float64(n)/p.PCIeGBs
	case CopyDeviceToHost:
		o.kind, o.rem = opCopyD2H, float64(n)/p.PCIeGBs
	case CopyDeviceToDevice:
		// read and write: twice the bytes through device memory
		o.kind, o.rem = opCopyD2D, 2*float64(n)/p.MemBandwidthGBs
	case CopyMemset:
		o.kind, o.rem = opCopyD2D, float64(n)/p.MemBandwidthGBs
	default:
		return ErrInvalidValue
	}
	o.rem += 1000 // DMA setup, ~1us
	return c.enqueue(stream, o)
}

// CreateEvent adds event id to context ctx.
func (c *Client) CreateEvent(ctx, id uint32) Result {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	x, r := c.context(ctx)
	if r != Success {
		return r
	}
	if _, dup := c.events[id]; dup {
		return ErrInvalidValue
	}
	c.events[id] = &Event{ID: id, ctx: x}
	return Success
}

// DestroyEvent forgets an event.
func (c *Client) DestroyEvent(id uint32) Result {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if _, ok := c.events[id]; !ok {
		return ErrInvalidHandle
	}
	delete(c.events, id)
	return Success
}

// RecordEvent queues event ev on stream.
func (c *Client) RecordEvent(ev, stream uint32) Result {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	e, ok := c.events[ev]
	if !ok {
		return ErrInvalidHandle
	}
	e.recGen++
	return c.enqueue(stream, &op{kind: opMarker, ev: e, gen: e.recGen})
}

// WaitEvent makes stream wait for the event's latest record.
func (c *Client) WaitEvent(stream, ev uint32) Result {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	e, ok := c.events[ev]
	if !ok {
		return ErrInvalidHandle
	}
	if e.doneGen >= e.recGen {
		if _, ok := c.streams[stream]; !ok {
			return ErrInvalidHandle
		}
		return Success
	}
	return c.enqueue(stream, &op{kind: opWait, ev: e, gen: e.recGen})
}

// Sync targets.
const (
	SyncStream  = 1
	SyncContext = 2
	SyncEvent   = 3
)

// Sync calls done once the target's work queued so far has finished, or with
// the sticky error if the context faulted.
func (c *Client) Sync(kind int, id uint32, done func(Result)) {
	c.s.mu.Lock()
	switch kind {
	case SyncStream:
		st, ok := c.streams[id]
		c.s.mu.Unlock()
		if !ok {
			done(ErrInvalidHandle)
			return
		}
		c.syncStream(st, done)
	case SyncContext:
		x, r := c.context(id)
		c.s.mu.Unlock()
		if r != Success {
			done(r)
			return
		}
		c.syncContext(x, done)
	case SyncEvent:
		e, ok := c.events[id]
		if !ok {
			c.s.mu.Unlock()
			done(ErrInvalidHandle)
			return
		}
		d := e.ctx.dev
		d.advance(c.s.nowNs())
		if e.ctx.err != Success {
			r := e.ctx.err
			c.s.mu.Unlock()
			done(r)
			return
		}
		if e.doneGen >= e.recGen {
			c.s.mu.Unlock()
			done(Success)
			return
		}
		e.waiters = append(e.waiters, streamWaiter{seq: e.recGen, cb: done})
		c.s.mu.Unlock()
	default:
		c.s.mu.Unlock()
		done(ErrInvalidValue)
	}
}

// Query reports Success when the target is idle, ErrNotReady otherwise.
func (c *Client) Query(kind int, id uint32) Result {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	now := c.s.nowNs()
	switch kind {
	case SyncStream:
		st, ok := c.streams[id]
		if !ok {
			return ErrInvalidHandle
		}
		st.ctx.dev.advance(now)
		if st.ctx.err != Success {
			return st.ctx.err
		}
		if len(st.q) > 0 {
			return ErrNotReady
		}
	case SyncEvent:
		e, ok := c.events[id]
		if !ok {
			return ErrInvalidHandle
		}
		e.ctx.dev.advance(now)
		if e.ctx.err != Success {
			return e.ctx.err
		}
		if e.doneGen < e.recGen {
			return ErrNotReady
		}
	default:
		return ErrInvalidValue
	}
	return Success
}

// ElapsedMs is cuEventElapsedTime.
func (c *Client) ElapsedMs(start, end uint32) (float32, Result) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	a, ok1 := c.events[start]
	b, ok2 := c.events[end]
	if !ok1 || !ok2 {
		return 0, ErrInvalidHandle
	}
	a.ctx.dev.advance(c.s.nowNs())
	if a.recGen == 0 || b.recGen == 0 {
		return 0, ErrInvalidHandle
	}
	if a.doneGen < a.recGen || b.doneGen < b.recGen {
		return 0, ErrNotReady
	}
	return float32((b.doneAt - a.doneAt) / 1e6), Success
}

func (c *Client) syncStream(st *Stream, done func(Result)) {
	s := c.s
	s.mu.Lock()
	d := st.ctx.dev
	d.advance(s.nowNs())
	if st.ctx.err != Success {
		r := st.ctx.err
		s.mu.Unlock()
		done(r)
		return
	}
	if len(st.q) == 0 {
		s.mu.Unlock()
		done(Success)
		return
	}
	st.waiters = append(st.waiters, streamWaiter{seq: st.enq, cb: done})
	s.mu.Unlock()
}

// syncContexts calls done once every context in xs has finished the work
// queued so far (or taken a sticky error); it runs without the simulator lock.
func (c *Client) syncContexts(xs []*Context, done func()) {
	var left atomic.Int32
	left.Store(int32(len(xs)))
	for _, x := range xs {
		c.syncContext(x, func(Result) {
			if left.Add(-1) == 0 {
				done()
			}
		})
	}
}

func (c *Client) syncContext(x *Context, done func(Result)) {
	s := c.s
	s.mu.Lock()
	x.dev.advance(s.nowNs())
	if x.err != Success {
		r := x.err
		s.mu.Unlock()
		done(r)
		return
	}
	cs := &ctxSync{cb: done}
	for _, st := range x.streams {
		if len(st.q) == 0 {
			continue
		}
		cs.left++
		st.waiters = append(st.waiters, streamWaiter{seq: st.enq, cb: func(r Result) {
			// runs unlocked, after the device loop released the lock
			s.mu.Lock()
			cs.left--
			if r != Success && cs.left >= 0 {
				cs.left = -1 << 30
				s.mu.Unlock()
				done(r)
				return
			}
			fire := cs.left == 0
			s.mu.Unlock()
			if fire {
				done(Success)
			}
		}})
	}
	s.mu.Unlock()
	if cs.left == 0 {
		done(Success)
	}
}

// MemAlloc reserves n bytes in context ctx and returns a device address.
func (c *Client) MemAlloc(ctx uint32, n uint64) (uint64, Result) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	x, r := c.context(ctx)
	if r != Success {
		return 0, r
	}
	if x.err != Success {
		return 0, x.err
	}
	if n == 0 || n > 1<<50 {
		return 0, ErrInvalidValue
	}
	x = x.memOwner()
	d := x.dev
	if d.lost {
		return 0, ErrDeviceUnavailable
	}
	if d.memUsed+n > d.p.MemoryBytes {
		return 0, ErrOutOfMemory
	}
	if x.memLimit > 0 && x.memUsed+n > x.memLimit {
		return 0, ErrOutOfMemory
	}
	ptr := d.nextPtr
	d.nextPtr += (n + 0xfff) &^ 0xfff
	x.allocs[ptr] = n
	x.memUsed += n
	d.memUsed += n
	c.stats[d.index].MemUsed += n
	return ptr, Success
}

// MemFree releases an allocation made by MemAlloc in any of the process's
// contexts.
func (c *Client) MemFree(ptr uint64) Result {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	for _, x := range c.ctxs {
		if n, ok := x.allocs[ptr]; ok {
			delete(x.allocs, ptr)
			x.memUsed -= n
			x.dev.memUsed -= n
			c.stats[x.dev.index].MemUsed -= n
			return Success
		}
	}
	return ErrInvalidValue
}

// MemInfo is cuMemGetInfo for context ctx: free and total as the context sees
// them (an MPS pinned-memory limit shrinks both).
func (c *Client) MemInfo(ctx uint32) (free, total uint64, r Result) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	x, r := c.context(ctx)
	if r != Success {
		return 0, 0, r
	}
	x = x.memOwner()
	d := x.dev
	total = d.p.MemoryBytes
	free = total - d.memUsed
	if x.memLimit > 0 && x.memLimit < total {
		total = x.memLimit
		if lf := x.memLimit - min(x.memLimit, x.memUsed); lf < free {
			free = lf
		}
	}
	return free, total, Success
}

// Pending is the number of operations the process has queued and not finished.
func (c *Client) Pending() int {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	return c.pending
}

// WaitRoom blocks while the process has MaxPending operations queued, the way
// a full launch queue blocks cuLaunchKernel. It returns false if stop closes.
func (c *Client) WaitRoom(stop <-chan struct{}) bool {
	for {
		c.s.mu.Lock()
		full := c.pending >= c.s.cfg.MaxPending
		c.s.mu.Unlock()
		if !full {
			return true
		}
		select {
		case <-c.room:
		case <-stop:
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Close ends the process. Contexts still holding work die dirty: under MPS
// that faults every other client of the server on that device.
func (c *Client) Close() {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	for _, x := range c.ctxs {
		x.dev.advance(s.nowNs())
		busy := false
		for _, st := range x.streams {
			if len(st.q) > 0 {
				busy = true
			}
		}
		if busy && x.err == Success && x.mps != nil {
			s.log.Info("MPS client exited with work in flight; faulting the server's clients",
				"pid", c.PID, "device", x.dev.index, "server", x.mps.PID)
			x.dev.recordXid(43, c.PID, "MPS client exited with kernels in flight")
			s.mpsFault(x.mps, x.dev, ErrLaunchFailed, x)
		}
	}
	for _, x := range c.ctxs {
		c.releaseContext(x)
	}
	for _, srv := range s.servers {
		s.mpsClientMaybeGone(srv, c)
	}
	delete(s.clients, c)
}

// faultContext gives a context a sticky error; lock held.
func (s *Sim) faultContext(x *Context, code Result) {
	if x.err != Success {
		return
	}
	x.err = code
	for _, st := range x.streams {
		x.c.dropStream(st, code)
	}
	for _, e := range x.c.events {
		if e.ctx == x {
			for _, w := range e.waiters {
				x.dev.post(w.cb, code)
			}
			e.waiters = nil
		}
	}
	c, id := x.c, x.ID
	x.dev.post(func(r Result) { c.notify(id, r) }, code)
	x.dev.dirty = true
	x.dev.kick()
}
