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
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/muxflow/muxflow/gpusim/simclient"
)

// Lib is the simulated NVML library.
type Lib struct {
	unsupportedLib
	c *simclient.Client

	mu       sync.Mutex
	inited   int
	cache    []simclient.DeviceStats
	cachedAt time.Time
}

var _ nvml.Interface = (*Lib)(nil)

// New returns an NVML library backed by the gpusimd serving socket.
func New(socket string) *Lib { return &Lib{c: simclient.New(socket)} }

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
	st, err := l.c.Stats(ctx)
	if err != nil {
		return nil, nvml.ERROR_UNKNOWN
	}
	l.cache, l.cachedAt = st, time.Now()
	return st, nvml.SUCCESS
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
	return &EventSet{l: l, last: map[int]uint64{}, mask: map[int]uint64{}}, nvml.SUCCESS
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
	l    *Lib
	mu   sync.Mutex
	mask map[int]uint64 // device -> registered event types
	last map[int]uint64 // device -> last Xid sequence delivered
	q    []nvml.EventData
	// seq is the last Xid sequence delivered on any device (sequence numbers
	// are node-wide), for the one-call poll of every device; perDevice is
	// set when gpusimd does not know that call (an older one).
	seq       uint64
	perDevice bool
}

// pollEvery is how often Wait asks gpusimd for new Xids. On real hardware
// nvmlEventSetWait blocks in the driver at no cost; here each poll is a
// request, so it is as rare as still lets a consumer sampling every 100 ms
// see a fault within its period.
const pollEvery = 50 * time.Millisecond

// Free releases the set.
func (e *EventSet) Free() nvml.Return { return nvml.SUCCESS }

// Wait returns the next event, polling gpusimd until timeoutMs passes.
func (e *EventSet) Wait(timeoutMs uint32) (nvml.EventData, nvml.Return) {
	deadline := time.Now().Add(time.Duration(timeoutMs) * time.Millisecond)
	for {
		e.mu.Lock()
		if len(e.q) > 0 {
			ev := e.q[0]
			e.q = e.q[1:]
			e.mu.Unlock()
			return ev, nvml.SUCCESS
		}
		e.poll()
		n := len(e.q)
		e.mu.Unlock()
		if n > 0 {
			continue
		}
		if !time.Now().Before(deadline) {
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
		time.Sleep(min(pollEvery, time.Until(deadline)))
	}
}

// poll fetches new Xids of registered devices; e.mu held.
func (e *EventSet) poll() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if len(e.mask) == 0 {
		return
	}
	if !e.perDevice {
		// One request for every device.
		xs, err := e.l.c.Xids(ctx, -1, e.seq)
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
		xs, err := e.l.c.Xids(ctx, dev, e.last[dev])
		if err != nil {
			continue
		}
		for _, x := range xs {
			e.deliver(dev, mask, x)
		}
	}
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
