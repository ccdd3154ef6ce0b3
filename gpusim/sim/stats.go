package sim

import (
	"math"
	"sort"
	"time"
)

type note struct {
	cb   func(Result)
	code Result
}

// post queues cb(code) for the notifier goroutine: completions are decided
// under the lock but delivered outside it, in order.
func (s *Sim) post(cb func(Result), code Result) {
	s.notes = append(s.notes, note{cb, code})
	if !s.notifying {
		s.notifying = true
		s.wg.Add(1)
		go s.deliver()
	}
}

func (s *Sim) deliver() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		batch := s.notes
		s.notes = nil
		if len(batch) == 0 {
			s.notifying = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		for _, n := range batch {
			n.cb(n.code)
		}
	}
}

// Clock-event reason bits, as NVML defines them.
const (
	ReasonGpuIdle    = 0x1
	ReasonSwPowerCap = 0x4
	ReasonHwSlowdown = 0x8
)

// ProcessStats are one process's figures on one device.
type ProcessStats struct {
	PID        int     `json:"pid"`
	MemUsed    uint64  `json:"mem_used"`
	BusyNs     float64 `json:"busy_ns"`     // cumulative time its kernels held SMs
	SMNs       float64 `json:"sm_ns"`       // cumulative SM-nanoseconds
	MemNs      float64 `json:"mem_ns"`      // cumulative time × share of the memory bandwidth it moved
	Launches   uint64  `json:"launches"`    // kernels launched
	Util       float64 `json:"util"`        // % of the window its kernels ran
	MemUtil    float64 `json:"mem_util"`    // % of the memory bandwidth it moved, window average
	SMActivity float64 `json:"sm_activity"` // fraction of SMs it held, window average
	MPS        bool    `json:"mps"`
}

// DeviceStats is a device's state and counters at one instant.
type DeviceStats struct {
	Index           int            `json:"index"`
	Name            string         `json:"name"`
	UUID            string         `json:"uuid"`
	SMs             int            `json:"sms"`
	MemTotal        uint64         `json:"mem_total"`
	MemUsed         uint64         `json:"mem_used"`
	Util            float64        `json:"util"`        // NVML: % of the window any kernel ran
	MemUtil         float64        `json:"mem_util"`    // NVML: % of the memory bandwidth in use, window average
	SMActivity      float64        `json:"sm_activity"` // DCGM: fraction of SMs busy, window average
	SMActivityNow   float64        `json:"sm_activity_now"`
	SMClockMHz      int            `json:"sm_clock_mhz"`
	MaxSMClockMHz   int            `json:"max_sm_clock_mhz"`
	MemClockMHz     int            `json:"mem_clock_mhz"`
	PowerW          float64        `json:"power_w"`
	PowerLimitW     float64        `json:"power_limit_w"`
	DefaultPowerW   float64        `json:"default_power_limit_w"`
	EnergyJ         float64        `json:"energy_j"`
	TempC           int            `json:"temp_c"`
	ClockReasons    uint64         `json:"clock_reasons"`
	BusyNs          float64        `json:"busy_ns"`
	SMNs            float64        `json:"sm_ns"`
	MemNs           float64        `json:"mem_ns"`
	Hung            bool           `json:"hung"`
	Lost            bool           `json:"lost"`
	Processes       []ProcessStats `json:"processes"`
	TimestampUnixUs int64          `json:"timestamp_us"`
	// The simulator's own stalls (stall.go), not the simulated GPU's: how many times
	// the model held every process up for 2 ms or more while catching up with real
	// time, for how long in all and at most.
	Stalls     int     `json:"stalls"`
	StalledNs  float64 `json:"stalled_ns"`
	MaxStallNs float64 `json:"max_stall_ns"`
}

// sampler records counters every 50ms so utilisation can be averaged over a
// trailing window, as NVML does.
func (d *Device) sampler() {
	defer d.s.wg.Done()
	tk := time.NewTicker(50 * time.Millisecond)
	defer tk.Stop()
	keep := int(2*d.s.cfg.Window/(50*time.Millisecond)) + 4
	for {
		select {
		case <-d.s.stop:
			return
		case <-tk.C:
		}
		s := d.s
		s.mu.Lock()
		d.advance(s.nowNs())
		d.samples = append(d.samples, d.snapshot())
		if len(d.samples) > keep {
			d.samples = append(d.samples[:0], d.samples[len(d.samples)-keep:]...)
		}
		s.mu.Unlock()
	}
}

func (d *Device) snapshot() sample {
	sm := sample{t: d.t, busyNs: d.busyNs, smNs: d.smNs, memNs: d.memNs, proc: map[int][3]float64{}}
	for c := range d.s.clients {
		st := c.stats[d.index]
		if st.BusyNs > 0 || st.MemUsed > 0 || st.MemNs > 0 {
			sm.proc[c.PID] = [3]float64{st.BusyNs, st.SMNs, st.MemNs}
		}
	}
	return sm
}

// Stats returns device dev's figures, utilisation averaged over the window.
func (s *Sim) Stats(dev int) (DeviceStats, bool) {
	d := s.Device(dev)
	if d == nil {
		return DeviceStats{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.nowNs()
	d.advance(now)
	cur := d.snapshot()
	// The newest sample a window old; on a device younger than the window, its start
	// (every counter zero): the oldest sample may have been taken after all the work.
	base := sample{t: 0, proc: map[int][3]float64{}}
	win := float64(s.cfg.Window.Nanoseconds())
	for i := len(d.samples) - 1; i >= 0; i-- {
		if d.samples[i].t <= now-win {
			base = d.samples[i]
			break
		}
	}
	span := cur.t - base.t
	st := DeviceStats{Index: d.index, Name: d.p.Name, UUID: d.uuid, SMs: d.p.SMs, MemTotal: d.p.MemoryBytes,
		MemUsed: d.memUsed, SMActivityNow: d.smAct, MaxSMClockMHz: d.p.MaxSMClockMHz,
		SMClockMHz: int(math.Round(d.clockRel * float64(d.p.MaxSMClockMHz))), MemClockMHz: d.p.MemClockMHz,
		PowerW: d.power, PowerLimitW: d.powerLimit, DefaultPowerW: d.p.PowerLimitW, EnergyJ: d.energyJ,
		BusyNs: d.busyNs, SMNs: d.smNs, MemNs: d.memNs, Hung: d.hung, Lost: d.lost, TimestampUnixUs: time.Now().UnixMicro(),
		Stalls: d.stalls.count, StalledNs: float64(d.stalls.total.Nanoseconds()), MaxStallNs: float64(d.stalls.max.Nanoseconds())}
	st.TempC = int(math.Round(30 + 50*d.power/d.p.PowerLimitW))
	if span > 0 {
		st.Util = 100 * (cur.busyNs - base.busyNs) / span
		st.SMActivity = (cur.smNs - base.smNs) / span / float64(d.p.SMs)
		st.MemUtil = 100 * (cur.memNs - base.memNs) / span
	}
	switch {
	case d.clockRel < 1:
		st.ClockReasons |= ReasonSwPowerCap
	case len(d.running) == 0:
		st.ClockReasons |= ReasonGpuIdle
	}
	if len(d.running) == 0 {
		st.SMClockMHz = d.p.MaxSMClockMHz
	}
	for c := range s.clients {
		ps := c.stats[d.index]
		has := ps.MemUsed > 0 || ps.Launches > 0
		mps := false
		for _, x := range c.ctxs {
			if x.dev == d {
				has = true
				mps = mps || x.mps != nil
			}
		}
		if !has {
			continue
		}
		p := ProcessStats{PID: c.PID, MemUsed: ps.MemUsed, BusyNs: ps.BusyNs, SMNs: ps.SMNs, MemNs: ps.MemNs, Launches: ps.Launches, MPS: mps}
		b := base.proc[c.PID]
		pspan := span
		if c.start > base.t {
			pspan = cur.t - c.start
			b = [3]float64{}
		}
		if pspan > 0 {
			p.Util = 100 * (ps.BusyNs - b[0]) / pspan
			p.SMActivity = (ps.SMNs - b[1]) / pspan / float64(d.p.SMs)
			p.MemUtil = 100 * (ps.MemNs - b[2]) / pspan
		}
		st.Processes = append(st.Processes, p)
	}
	sort.Slice(st.Processes, func(i, j int) bool { return st.Processes[i].PID < st.Processes[j].PID })
	return st, true
}
