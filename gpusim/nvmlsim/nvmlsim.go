// Package nvmlsim is an implementation of go-nvml's nvml.Interface backed by
// gpusimd, so that the monitor runs the same code on real and simulated GPUs.
// It covers what muxflow samples: devices, UUID, name, memory, utilisation,
// SM and max clocks, temperature, power and limit, clock-event reasons,
// running processes and their utilisation, GPM SM activity (Hopper
// profiles, as on real hardware) and Xid events through an event set.
// Everything else answers nvml.ERROR_NOT_SUPPORTED.
//
//go:generate go run ./internal/gen
package nvmlsim

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/muxflow/muxflow/gpusim/sim"
	"github.com/muxflow/muxflow/gpusim/simclient"
	"github.com/muxflow/muxflow/gpusim/simd"
)

// Lib is the simulated NVML library.
type Lib struct {
	unsupportedLib
	c    *simclient.Client
	conn *conn

	mu       sync.Mutex
	inited   int
	cache    []simclient.DeviceStats
	cachedAt time.Time
	// sets are the event sets with registered devices: each refresh of the reading
	// also asks for new Xids (pipelined, one round trip) and hands them to the sets,
	// so that a set need not poll gpusimd on its own while someone samples.
	sets []*EventSet
	// xidSeq is the last Xid sequence the refreshes saw; xidsAt (unix ns) when they
	// last asked, 0 while gpusimd cannot answer for every device at once.
	xidSeq    uint64
	xidsAt    atomic.Int64
	noAllXids bool // gpusimd cannot answer for every device at once (an older one)
	// gpmAt is, by device, the time stamp of the reading its last GPM sample came from.
	gpmAt map[int]int64
}

var _ nvml.Interface = (*Lib)(nil)

// New returns an NVML library backed by the gpusimd serving socket.
func New(socket string) *Lib { return &Lib{c: simclient.New(socket), conn: &conn{socket: socket}} }

// cacheFor is how long one stats reading answers queries: a monitor sample
// asks a dozen questions about the same instant.
const cacheFor = 5 * time.Millisecond

func (l *Lib) stats() ([]simclient.DeviceStats, nvml.Return) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inited == 0 {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	if l.cache != nil && time.Since(l.cachedAt) < cacheFor {
		return l.cache, nvml.SUCCESS
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	qs := []simd.Request{{Op: "stats", Packed: true}}
	withXids := len(l.sets) > 0 && !l.noAllXids
	if withXids {
		qs = append(qs, simd.Request{Op: "xids", Device: -1, After: l.xidSeq})
	}
	rs, err := l.conn.roundTrip(ctx, qs...)
	if err != nil || rs[0].Error != "" {
		return nil, nvml.ERROR_UNKNOWN
	}
	devs := rs[0].Devices // an older gpusimd ignores "packed"
	if rs[0].Packed != nil {
		if devs, err = sim.DecodeStats(rs[0].Packed); err != nil {
			return nil, nvml.ERROR_UNKNOWN
		}
	}
	l.cache, l.cachedAt = devs, time.Now()
	if withXids {
		if rs[1].Error != "" {
			l.noAllXids = true // an older gpusimd: the sets poll per device
			l.xidsAt.Store(0)
		} else {
			for _, x := range rs[1].Xids {
				l.xidSeq = max(l.xidSeq, x.Seq)
			}
			for _, e := range l.sets {
				e.offer(rs[1].Xids)
			}
			l.xidsAt.Store(l.cachedAt.UnixNano())
		}
	}
	return l.cache, nvml.SUCCESS
}

func (l *Lib) gpmStamp(dev int) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gpmAt[dev]
}

func (l *Lib) setGPMStamp(dev int, at int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gpmAt == nil {
		l.gpmAt = map[int]int64{}
	}
	l.gpmAt[dev] = at
}

// xidsFresh reports whether a refresh asked gpusimd for Xids within d.
func (l *Lib) xidsFresh(d time.Duration) bool {
	at := l.xidsAt.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < d
}

func (l *Lib) dev(i int) (simclient.DeviceStats, nvml.Return) {
	st, r := l.stats()
	if r != nvml.SUCCESS {
		return simclient.DeviceStats{}, r
	}
	if i < 0 || i >= len(st) {
		return simclient.DeviceStats{}, nvml.ERROR_INVALID_ARGUMENT
	}
	if st[i].Lost {
		return st[i], nvml.ERROR_GPU_IS_LOST
	}
	return st[i], nvml.SUCCESS
}

// Init checks that gpusimd answers; like NVML, calls nest.
func (l *Lib) Init() nvml.Return {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := l.c.Ping(ctx); err != nil {
		return nvml.ERROR_DRIVER_NOT_LOADED
	}
	l.mu.Lock()
	l.inited++
	l.mu.Unlock()
	return nvml.SUCCESS
}

// InitWithFlags is Init.
func (l *Lib) InitWithFlags(uint32) nvml.Return { return l.Init() }

// Shutdown undoes one Init.
func (l *Lib) Shutdown() nvml.Return {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inited == 0 {
		return nvml.ERROR_UNINITIALIZED
	}
	l.inited--
	if l.inited == 0 {
		l.conn.close()
	}
	return nvml.SUCCESS
}

// ErrorString names a Return.
func (l *Lib) ErrorString(r nvml.Return) string { return r.Error() }

// Extensions lets callers ask which NVML symbols exist.
func (l *Lib) Extensions() nvml.ExtendedInterface { return symbols{} }

type symbols struct{}

// LookupSymbol reports every symbol present except the versioned
// temperature call, whose go-nvml handler needs the real library.
func (symbols) LookupSymbol(name string) error {
	if name == "nvmlDeviceGetTemperatureV" {
		return errors.New("nvmlDeviceGetTemperatureV is not simulated")
	}
	return nil
}

// SystemGetDriverVersion reports the simulated driver.
func (l *Lib) SystemGetDriverVersion() (string, nvml.Return) { return "gpusim-560.35.03", nvml.SUCCESS }

// SystemGetNVMLVersion reports the simulated NVML.
func (l *Lib) SystemGetNVMLVersion() (string, nvml.Return) { return "12.560.35.03", nvml.SUCCESS }

// SystemGetCudaDriverVersion matches the fake libcuda.
func (l *Lib) SystemGetCudaDriverVersion() (int, nvml.Return) { return 12060, nvml.SUCCESS }

// SystemGetCudaDriverVersion_v2 matches the fake libcuda.
func (l *Lib) SystemGetCudaDriverVersion_v2() (int, nvml.Return) { return 12060, nvml.SUCCESS }

// DeviceGetCount counts simulated GPUs.
func (l *Lib) DeviceGetCount() (int, nvml.Return) {
	st, r := l.stats()
	return len(st), r
}

// DeviceGetHandleByIndex returns device i.
func (l *Lib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	st, r := l.stats()
	if r != nvml.SUCCESS {
		return nil, r
	}
	if i < 0 || i >= len(st) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return &Device{l: l, index: i}, nvml.SUCCESS
}

// DeviceGetHandleByUUID finds a device by UUID.
func (l *Lib) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	st, r := l.stats()
	if r != nvml.SUCCESS {
		return nil, r
	}
	for i, d := range st {
		if strings.EqualFold(d.UUID, uuid) {
			return &Device{l: l, index: i}, nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

// EventSetCreate makes an event set for Xid events.
func (l *Lib) EventSetCreate() (nvml.EventSet, nvml.Return) {
	if _, r := l.stats(); r != nvml.SUCCESS {
		return nil, r
	}
	return &EventSet{l: l, last: map[int]uint64{}, mask: map[int]uint64{}, notify: make(chan struct{}, 1)}, nvml.SUCCESS
}

// GpmSampleAlloc allocates a GPM sample buffer.
func (l *Lib) GpmSampleAlloc() (nvml.GpmSample, nvml.Return) { return &GpmSample{}, nvml.SUCCESS }

// GpmMetricsGet computes metrics between two samples of one device:
// GRAPHICS_UTIL (time any kernel ran, %) and SM_UTIL (SM activity, %).
func (l *Lib) GpmMetricsGet(q *nvml.GpmMetricsGetType) nvml.Return {
	if q == nil || q.NumMetrics > uint32(len(q.Metrics)) {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	a, ok1 := q.Sample1.(*GpmSample)
	b, ok2 := q.Sample2.(*GpmSample)
	if !ok1 || !ok2 || !a.valid || !b.valid || a.dev != b.dev {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	span := float64(b.at.Sub(a.at).Nanoseconds())
	for i := uint32(0); i < q.NumMetrics; i++ {
		m := &q.Metrics[i]
		m.NvmlReturn = uint32(nvml.SUCCESS)
		switch nvml.GpmMetricId(m.MetricId) {
		case nvml.GPM_METRIC_GRAPHICS_UTIL:
			m.Value = pctOf(b.busyNs-a.busyNs, span)
		case nvml.GPM_METRIC_SM_UTIL:
			m.Value = pctOf((b.smNs-a.smNs)/float64(b.sms), span)
		default:
			m.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
		}
	}
	return nvml.SUCCESS
}

func pctOf(x, span float64) float64 {
	if span <= 0 {
		return 0
	}
	return min(100, max(0, 100*x/span))
}

// GpmSample is a GPM sample buffer.
type GpmSample struct {
	unsupportedGpmSample
	valid  bool
	dev    int
	sms    int
	at     time.Time
	busyNs float64
	smNs   float64
}

// Free releases the sample.
func (s *GpmSample) Free() nvml.Return { return nvml.SUCCESS }

// Get fills the sample from device d.
func (s *GpmSample) Get(d nvml.Device) nvml.Return {
	if dd, ok := d.(*Device); ok {
		return dd.GpmSampleGet(s)
	}
	return nvml.ERROR_INVALID_ARGUMENT
}

// EventSet delivers Xid events as NVML events.
type EventSet struct {
	unsupportedEventSet
	l      *Lib
	notify chan struct{} // a token when offer queued events
	mu     sync.Mutex
	mask   map[int]uint64 // device -> registered event types
	last   map[int]uint64 // device -> last Xid sequence delivered
	q      []nvml.EventData
	// seq is the last Xid sequence delivered on any device (sequence numbers
	// are node-wide), for the one-call poll of every device; perDevice is
	// set when gpusimd does not know that call (an older one).
	seq       uint64
	perDevice bool
	listed    bool // in l.sets
	polls     int  // requests of its own (for tests)
}

// pollEvery is how often Wait asks gpusimd for new Xids itself, when nobody samples:
// while the library's readings are refreshed (a monitor sampling every period), each
// refresh brings the new Xids in the same round trip and Wait only waits for them, so
// a fault is seen within a sampling period at no cost of its own. On real hardware
// nvmlEventSetWait blocks in the driver at no cost.
const pollEvery = 50 * time.Millisecond

// staleAfter: readings older than this mean nobody samples, and Wait polls itself.
const staleAfter = 250 * time.Millisecond

// Free releases the set.
func (e *EventSet) Free() nvml.Return {
	e.l.mu.Lock()
	defer e.l.mu.Unlock()
	for i, s := range e.l.sets {
		if s == e {
			e.l.sets = append(e.l.sets[:i], e.l.sets[i+1:]...)
			break
		}
	}
	return nvml.SUCCESS
}

// listen has the library's refreshes bring this set's Xids (after the first
// registration).
func (e *EventSet) listen() {
	e.l.mu.Lock()
	defer e.l.mu.Unlock()
	e.mu.Lock()
	listed := e.listed
	e.listed = true
	e.mu.Unlock()
	if !listed {
		e.l.sets = append(e.l.sets, e)
	}
}

// offer queues the Xids of a refresh that this set has not delivered yet.
func (e *EventSet) offer(xs []simclient.XidEvent) {
	if len(xs) == 0 {
		return
	}
	e.mu.Lock()
	n := len(e.q)
	for _, x := range xs {
		e.seq = max(e.seq, x.Seq)
		if mask, ok := e.mask[x.Device]; ok && x.Seq > e.last[x.Device] {
			e.deliver(x.Device, mask, x)
		}
	}
	queued := len(e.q) > n
	e.mu.Unlock()
	if queued {
		select {
		case e.notify <- struct{}{}:
		default:
		}
	}
}

// Wait returns the next event, waiting until timeoutMs passes: for the library's
// refreshes to bring one, or polling gpusimd every pollEvery when there are none.
func (e *EventSet) Wait(timeoutMs uint32) (nvml.EventData, nvml.Return) {
	deadline := time.Now().Add(time.Duration(timeoutMs) * time.Millisecond)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		e.mu.Lock()
		if len(e.q) > 0 {
			ev := e.q[0]
			e.q = e.q[1:]
			e.mu.Unlock()
			return ev, nvml.SUCCESS
		}
		fed := !e.perDevice && e.l.xidsFresh(staleAfter)
		if !fed {
			e.poll()
		}
		n := len(e.q)
		e.mu.Unlock()
		if n > 0 {
			continue
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
		if !fed {
			left = min(left, pollEvery)
		}
		// While fed, a set whose sampler stops is noticed at the deadline (the
		// caller's timeout), and polls from then on.
		if timer == nil {
			timer = time.NewTimer(left)
		} else {
			timer.Reset(left)
		}
		select {
		case <-e.notify:
		case <-timer.C:
		}
	}
}

// poll fetches new Xids of registered devices; e.mu held.
func (e *EventSet) poll() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if len(e.mask) == 0 {
		return
	}
	e.polls++
	if !e.perDevice {
		// One request for every device.
		xs, err := e.l.xids(ctx, -1, e.seq)
		if err == nil {
			for _, x := range xs {
				e.seq = max(e.seq, x.Seq)
				if mask, ok := e.mask[x.Device]; ok && x.Seq > e.last[x.Device] {
					e.deliver(x.Device, mask, x)
				}
			}
			return
		}
		if !strings.Contains(err.Error(), "does not exist") {
			return
		}
		e.perDevice = true // an older gpusimd: one request per device
	}
	for dev, mask := range e.mask {
		xs, err := e.l.xids(ctx, dev, e.last[dev])
		if err != nil {
			continue
		}
		for _, x := range xs {
			e.deliver(dev, mask, x)
		}
	}
}

// xids asks gpusimd for Xids of dev (every device when negative) after a sequence.
func (l *Lib) xids(ctx context.Context, dev int, after uint64) ([]simclient.XidEvent, error) {
	r, err := l.conn.one(ctx, simd.Request{Op: "xids", Device: dev, After: after})
	if err != nil {
		return nil, err
	}
	return r.Xids, nil
}

// deliver queues one Xid of dev as an NVML event if mask asks for its type; e.mu held.
func (e *EventSet) deliver(dev int, mask uint64, x simclient.XidEvent) {
	e.last[dev] = x.Seq
	typ := uint64(nvml.EventTypeXidCriticalError)
	if x.Xid == 48 {
		typ = uint64(nvml.EventTypeDoubleBitEccError)
	}
	if mask&typ == 0 {
		return
	}
	e.q = append(e.q, nvml.EventData{Device: &Device{l: e.l, index: dev}, EventType: typ,
		EventData: uint64(x.Xid), GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF})
}
