package monitor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Clock is the monitor's source of time, faked in tests.
type Clock interface {
	Now() time.Time
	NewTicker(d time.Duration) Ticker
}

// Ticker delivers the sampling ticks.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

type realClock struct{}

func (realClock) Now() time.Time                   { return time.Now() }
func (realClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }

// GPUStatus is the last known sample and health of one GPU, as served by
// muxd's API and shown by `muxctl status`. Sample and LastFault are shared
// with the monitor and must be treated as read-only.
type GPUStatus struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Name  string `json:"name,omitempty"`
	// State and Since: the health state and when it was entered.
	State State     `json:"state"`
	Since time.Time `json:"since"`
	// Reason is why the GPU entered State.
	Reason Reason `json:"reason"`
	// AdmitsOffline: new offline work may be placed on this GPU.
	AdmitsOffline bool `json:"admits_offline"`
	// Samples counts samples taken; Sample is the latest (nil before the first).
	Samples   uint64  `json:"samples"`
	Sample    *Sample `json:"sample,omitempty"`
	LastFault *Fault  `json:"last_fault,omitempty"`
}

// EventKind tells what an Event records.
type EventKind string

const (
	// EventTransition: a GPU changed health state.
	EventTransition EventKind = "transition"
	// EventFault: an error event (Xid, ECC, GPU lost) hit a GPU, whether or
	// not it changed the state.
	EventFault EventKind = "fault"
	// EventClear: muxd's error handler said it reset the GPU.
	EventClear EventKind = "clear"
	// EventContainer: muxd acted on, or declined to act on, what one container's control
	// block reported on this GPU (a corrupt usage block, an unconfirmed error report).
	EventContainer EventKind = "container"
)

// Event is one entry of the monitor's log, as shown by `muxctl events`.
// Seq increases by one per event, so a subscriber that sees a gap knows it
// missed events and can fetch them with Events.
type Event struct {
	Seq    uint64    `json:"seq"`
	Time   time.Time `json:"time"`
	GPU    int       `json:"gpu"`
	UUID   string    `json:"uuid"`
	Kind   EventKind `json:"kind"`
	From   State     `json:"from,omitempty"`
	To     State     `json:"to,omitempty"`
	Reason Reason    `json:"reason"`
	Fault  *Fault    `json:"fault,omitempty"`
	// Container is the container an EventContainer is about.
	Container string `json:"container,omitempty"`
}

// ErrUnknownGPU is returned for a GPU UUID the monitor does not watch.
var ErrUnknownGPU = errors.New("unknown GPU")

// Monitor samples every GPU each period and keeps their health. All methods
// are safe for concurrent use.
type Monitor struct {
	cfg     Config
	clock   Clock
	log     *slog.Logger
	sampler *sampler
	lib     nvml.Interface

	// pollMu serialises Poll and Close, which own the sampler's per-GPU
	// state; mu guards everything below it.
	pollMu sync.Mutex

	// listening is true while the NVML event set is registered.
	listening atomic.Bool

	mu       sync.Mutex
	gpus     []*gpu
	status   []gpuState
	elog     eventLog
	subs     map[int]chan Event
	nextSub  int
	counters counters
}

type gpuState struct {
	machine   *Machine
	reason    Reason
	samples   uint64
	sample    *Sample
	lastFault *Fault
	// lostReported: the current loss of the GPU already made a fault event.
	lostReported bool
}

// counters feed the Prometheus collector.
type counters struct {
	transitions  map[[2]string]uint64 // {uuid, to}
	faults       map[[2]string]uint64 // {uuid, class}
	sampleErrors map[[2]string]uint64 // {uuid, metric}
	dropped      uint64               // notifications a slow subscriber missed
	lastPoll     time.Duration        // NVML time of the latest Poll
}

// New discovers the GPUs of lib and returns a monitor for them. lib must
// be initialised (nvml.Init) by the caller. A nil clock means the real
// clock; a nil logger means slog.Default().
func New(lib nvml.Interface, cfg Config, clock Clock, log *slog.Logger) (*Monitor, error) {
	if lib == nil {
		return nil, errors.New("monitor needs an NVML interface")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if clock == nil {
		clock = realClock{}
	}
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "monitor")
	gpus, err := discover(lib, log)
	if err != nil {
		return nil, fmt.Errorf("starting GPU monitor: %w", err)
	}
	now := clock.Now()
	m := &Monitor{
		cfg:     cfg,
		clock:   clock,
		log:     log,
		lib:     lib,
		sampler: newSampler(lib, log, cfg),
		gpus:    gpus,
		status:  make([]gpuState, len(gpus)),
		elog:    eventLog{max: cfg.EventLogSize},
		subs:    make(map[int]chan Event),
		counters: counters{
			transitions:  make(map[[2]string]uint64),
			faults:       make(map[[2]string]uint64),
			sampleErrors: make(map[[2]string]uint64),
		},
	}
	for i := range gpus {
		m.status[i] = gpuState{machine: NewMachine(cfg, now), reason: Reason{Text: "monitor started"}}
	}
	log.Info("GPU monitor ready", "gpus", len(gpus), "period", cfg.Period)
	return m, nil
}

// Run samples every GPU each period and listens for NVML error events until
// ctx is cancelled. It returns nil on cancellation.
func (m *Monitor) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { m.WatchEvents(ctx) })
	defer wg.Wait()

	t := m.clock.NewTicker(m.cfg.Period)
	defer t.Stop()
	warned := false
	poll := func() {
		// The period is "100 ms or what NVML allows": when the driver is
		// slower, ticks are dropped and the effective period stretches;
		// say so once so the policy can be raised.
		if d := m.Poll(); d > m.cfg.Period && !warned {
			warned = true
			m.log.Warn("sampling all GPUs takes longer than the period; samples will be further apart", "took", d, "period", m.cfg.Period)
		}
	}
	poll()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			poll()
		}
	}
}

// Poll samples every GPU once, steps its state machine, and returns how
// long the NVML calls took (real time, whatever the monitor's clock). Run
// calls it each period; tests and one-shot tools call it directly.
func (m *Monitor) Poll() time.Duration {
	m.pollMu.Lock()
	defer m.pollMu.Unlock()
	samples := make([]*Sample, len(m.gpus))
	// NVML calls are made without the lock so that Snapshot never waits
	// on a slow driver.
	start := time.Now()
	for i, g := range m.gpus {
		samples[i] = m.sampler.sample(g, m.clock.Now())
	}
	took := time.Since(start)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counters.lastPoll = took
	for i, s := range samples {
		st := &m.status[i]
		st.samples++
		st.sample = s
		for metric := range s.Errors {
			m.counters.sampleErrors[[2]string{m.gpus[i].uuid, metric}]++
		}
		in := Input{Time: s.Time, Sample: s}
		// A loss is one fault however many samples it lasts.
		if s.Lost && !st.lostReported {
			f := Fault{Time: s.Time, Kind: FaultGPULost, Class: FaultReset, Description: "NVML reports the GPU is lost or needs a reset"}
			in.Faults = []Fault{f}
			m.recordFaultLocked(i, f)
		}
		st.lostReported = s.Lost
		m.stepLocked(i, in)
	}
	return took
}

// Faults apply to the GPU at once rather than waiting for the next sample:
// muxd must start error handling as soon as the driver reports the error.
func (m *Monitor) applyFault(i int, f Fault) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recordFaultLocked(i, f)
	m.stepLocked(i, Input{Time: f.Time, Faults: []Fault{f}})
}

func (m *Monitor) recordFaultLocked(i int, f Fault) {
	g := m.gpus[i]
	m.status[i].lastFault = &f
	m.counters.faults[[2]string{g.uuid, string(f.Class)}]++
	level := slog.LevelError
	if f.Class == FaultInformational {
		level = slog.LevelWarn
	}
	m.log.Log(context.Background(), level, "GPU error event", "gpu", g.index, "uuid", g.uuid, "kind", f.Kind, "xid", f.Xid, "class", f.Class, "description", f.Description)
	m.emitLocked(Event{Time: f.Time, GPU: g.index, UUID: g.uuid, Kind: EventFault,
		Reason: Reason{Metric: MetricFault, Value: float64(f.Xid), Text: f.Description}, Fault: &f})
}

func (m *Monitor) stepLocked(i int, in Input) {
	st := &m.status[i]
	t, ok := st.machine.Step(in)
	if !ok {
		return
	}
	g := m.gpus[i]
	st.reason = t.Reason
	m.counters.transitions[[2]string{g.uuid, string(t.To)}]++
	m.log.Info("GPU health changed", "gpu", g.index, "uuid", g.uuid, "from", t.From, "to", t.To,
		"metric", t.Reason.Metric, "value", t.Reason.Value, "threshold", t.Reason.Threshold, "reason", t.Reason.Text)
	m.emitLocked(Event{Time: in.Time, GPU: g.index, UUID: g.uuid, Kind: EventTransition, From: t.From, To: t.To, Reason: t.Reason})
}

// ClearFault tells the monitor that muxd's error handler has reset the GPU
// with this UUID, releasing a Faulted state held by a reset-class fault.
// The GPU then cools down in Recovering before it is Healthy again.
func (m *Monitor) ClearFault(uuid string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, g := range m.gpus {
		if g.uuid != uuid {
			continue
		}
		now := m.clock.Now()
		m.emitLocked(Event{Time: now, GPU: g.index, UUID: g.uuid, Kind: EventClear, Reason: Reason{Text: "error handler reports the GPU was reset"}})
		m.stepLocked(i, Input{Time: now, ClearFault: true})
		return nil
	}
	return fmt.Errorf("clearing fault of GPU %q: %w", uuid, ErrUnknownGPU)
}

// RecordContainerEvent logs an EventContainer about one container on the GPU with this
// UUID: text says what the container's block reported and what muxd did about it.
func (m *Monitor) RecordContainerEvent(uuid, container, text string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, g := range m.gpus {
		if g.uuid == uuid {
			m.emitLocked(Event{Time: m.clock.Now(), GPU: g.index, UUID: g.uuid, Kind: EventContainer, Container: container, Reason: Reason{Text: text}})
			return nil
		}
	}
	return fmt.Errorf("recording an event of GPU %q: %w", uuid, ErrUnknownGPU)
}

// ListeningForEvents reports whether NVML error events (Xid, ECC) are being
// received. When false, faults are only seen as a lost GPU in sampling.
func (m *Monitor) ListeningForEvents() bool { return m.listening.Load() }

// Snapshot returns the latest sample and health of every GPU, by index.
func (m *Monitor) Snapshot() []GPUStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]GPUStatus, len(m.gpus))
	for i, g := range m.gpus {
		st := m.status[i]
		out[i] = GPUStatus{
			Index:         g.index,
			UUID:          g.uuid,
			Name:          g.name,
			State:         st.machine.State(),
			Since:         st.machine.Since(),
			Reason:        st.reason,
			AdmitsOffline: st.machine.State().AdmitsOffline(),
			Samples:       st.samples,
			Sample:        st.sample,
			LastFault:     st.lastFault,
		}
	}
	return out
}

// Events returns the logged events at or after since, oldest first. The
// log keeps the latest Config.EventLogSize events.
func (m *Monitor) Events(since time.Time) []Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.elog.since(since)
}

// Subscribe returns a channel that receives every event from now on, and a
// function that cancels the subscription and closes the channel. Sends never
// block the monitor: when the buffer is full the event is dropped (and
// counted), and the subscriber sees a gap in Seq; Snapshot always has the
// current state.
func (m *Monitor) Subscribe(buffer int) (<-chan Event, func()) {
	if buffer < 1 {
		buffer = 1
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	id := m.nextSub
	m.nextSub++
	ch := make(chan Event, buffer)
	m.subs[id] = ch
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			delete(m.subs, id)
			close(ch)
		})
	}
}

func (m *Monitor) emitLocked(e Event) {
	e = m.elog.add(e)
	for _, ch := range m.subs {
		select {
		case ch <- e:
		default:
			m.counters.dropped++
		}
	}
}

// Close releases NVML resources the monitor holds (GPM buffers). Call it
// after Run has returned, before nvml.Shutdown.
func (m *Monitor) Close() {
	m.pollMu.Lock()
	defer m.pollMu.Unlock()
	for _, g := range m.gpus {
		g.freeGPM()
	}
}

// eventLog is a bounded ring of events in Seq order.
type eventLog struct {
	max    int
	events []Event
	seq    uint64
}

func (l *eventLog) add(e Event) Event {
	l.seq++
	e.Seq = l.seq
	if len(l.events) >= l.max {
		// Shift rather than index a ring: the log is small and read far
		// more often than the rare transition is written.
		copy(l.events, l.events[1:])
		l.events = l.events[:len(l.events)-1]
	}
	l.events = append(l.events, e)
	return e
}

func (l *eventLog) since(t time.Time) []Event {
	var out []Event
	for _, e := range l.events {
		if !e.Time.Before(t) {
			out = append(out, e)
		}
	}
	return out
}
