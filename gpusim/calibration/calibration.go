// Package calibration reproduces published measurements of GPU co-location
// (MPS, time slicing, concurrent streams) on gpusim's model and compares the
// ratios. Each Point describes the published setup as workloads of kernels
// whose shapes are written down next to it; Run plays the setup alone and
// shared on an in-process simulator and reports gpusim's ratio beside the
// published one. docs/gpusim-calibration.md explains every point and where
// it was read.
package calibration

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/muxflow/muxflow/gpusim/sim"
)

// Kernel is one kernel launch of a workload.
type Kernel struct {
	BlockUs float64 // one block's time on an SM its kernel fills alone
	BW      float64 // memory-bandwidth share at full speed
	FixedUs float64 // launch cost paid in the GPU's front end
	Grid    int     // blocks
	Threads int     // threads per block
	Regs    int     // registers per thread (0: gpusim's default)
}

// Arrival says how a workload issues its units of work.
type Arrival int

const (
	// Loop issues units back to back, each after the previous one finished
	// (a saturating inference loop); its figure is the units' latency.
	Loop Arrival = iota
	// Poisson issues units at Poisson arrivals of Rate per second into a
	// first-come first-served queue; latency counts the wait in the queue.
	Poisson
	// Stream keeps two units queued at all times (a training job); its
	// figure is units per second.
	Stream
)

// Workload is a program on the GPU: a unit (a request or a training
// iteration) is Kernels in order.
type Workload struct {
	Name    string
	Kernels []Kernel
	Arrival Arrival
	Rate    float64 // units per second (Poisson)
	// NoQueue: a Poisson unit's latency is its own time on the GPU, without
	// the wait behind earlier units (a load generator that measures served
	// requests only, as Tally's does)
	NoQueue bool
}

// Metric is the figure of the subject workload a point compares.
type Metric int

const (
	MeanLatency Metric = iota
	P99Latency
	Throughput
	SMsGranted // the SMs an MPS client at Subject.ATP may use (no run)
)

// Sharing is how the workloads share the GPU.
type Sharing int

const (
	MPS       Sharing = iota // one MPS server, every workload a client
	TimeSlice                // every workload its own context, no MPS
	Streams                  // one context, every workload its own stream
)

// Point is one published measurement.
type Point struct {
	ID        string
	Source    string // paper or artifact, and where in it
	GPU       sim.Profile
	Sharing   Sharing
	Subject   Workload   // the workload whose figure is published
	Others    []Workload // what runs beside it
	Metric    Metric
	ATP       float64 // SMsGranted: the active-thread percentage
	Published float64 // shared ÷ alone (latency: >1 is slower; throughput: <1 is slower)
	Seconds   float64 // how long each run measures, in model time
	Short     bool    // part of the quick subset make test runs
	// Lockstep (Streams, Loop subject): every unit of the subject launches
	// one unit of each neighbour beside it, and its latency runs until all
	// have finished (two kernels launched together, as Elvinger et al. time
	// them)
	Lockstep bool
}

// Result is one point's outcome.
type Result struct {
	Point
	Alone, Shared float64 // the subject's figure alone and shared
	Ratio         float64 // gpusim's shared ÷ alone
	Err           float64 // (Ratio - Published) / Published
}

var quiet = slog.New(slog.DiscardHandler)

// timeScale slows the model down (sim.Config.TimeScale) so that the
// in-process clients issue their launches ahead of the model's kernels even
// on a small, busy machine: the published setups' hosts kept up with their
// GPUs, and a ratio must not measure this machine's CPU.
const timeScale = 3

// Tolerance is the largest relative error a calibrated point may have.
const Tolerance = 0.20

// OK: the point is within Tolerance.
func (r Result) OK() bool { return math.Abs(r.Err) <= Tolerance }

// Run plays every point (alone runs are shared between points with the same
// GPU, sharing and subject) and returns their results in order.
func Run(ctx context.Context, points []Point, progress func(string)) ([]Result, error) {
	alone := map[string]float64{}
	var out []Result
	for _, p := range points {
		r := Result{Point: p}
		if p.Metric == SMsGranted {
			sms, err := grantedSMs(p.GPU, p.ATP)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.ID, err)
			}
			r.Alone, r.Shared, r.Ratio = float64(p.GPU.SMs), float64(sms), float64(sms)
		} else {
			key := fmt.Sprintf("%s/%d/%s/%v", p.GPU.Name, p.Sharing, p.Subject.Name, p.Seconds)
			a, ok := alone[key]
			if !ok {
				if progress != nil {
					progress(p.ID + ": alone")
				}
				var err error
				if a, err = play(ctx, p, false); err != nil {
					return nil, fmt.Errorf("%s alone: %w", p.ID, err)
				}
				alone[key] = a
			}
			if progress != nil {
				progress(p.ID + ": shared")
			}
			s, err := play(ctx, p, true)
			if err != nil {
				return nil, fmt.Errorf("%s shared: %w", p.ID, err)
			}
			r.Alone, r.Shared, r.Ratio = a, s, s/a
		}
		r.Err = (r.Ratio - p.Published) / p.Published
		out = append(out, r)
	}
	return out, nil
}

// grantedSMs is what an MPS client asking for atp percent of the threads
// may hold on a GPU of profile p.
func grantedSMs(p sim.Profile, atp float64) (int, error) {
	s, err := sim.New(sim.Config{Devices: []sim.Profile{p}, Logger: quiet})
	if err != nil {
		return 0, err
	}
	defer s.Close()
	if err := s.RegisterServer(1000, 0, 100, nil); err != nil {
		return 0, err
	}
	c := s.Connect(1, 0, nil)
	defer c.Close()
	if r := c.CreateContext(1, 0, 100, 1000, atp, 0); r != sim.Success {
		return 0, fmt.Errorf("create context: %v", r)
	}
	_, sms, _, _ := c.ContextInfo(1)
	return sms, nil
}

// play runs the point's subject, alone or with its neighbours, and returns
// the subject's figure.
func play(ctx context.Context, p Point, shared bool) (float64, error) {
	s, err := sim.New(sim.Config{Devices: []sim.Profile{p.GPU}, Logger: quiet, TimeScale: timeScale})
	if err != nil {
		return 0, err
	}
	defer s.Close()
	const mpsPID = 1000
	if p.Sharing == MPS {
		if err := s.RegisterServer(mpsPID, 0, 100, nil); err != nil {
			return 0, err
		}
	}
	works := []Workload{p.Subject}
	if shared {
		works = append(works, p.Others...)
	}
	runs := make([]*runner, len(works))
	var shared1 *sim.Client
	for i, w := range works {
		r := &runner{w: w, stream: uint32(100 + i), evBase: uint32(1000 * (i + 1)), fnBase: uint32(100 * (i + 1))}
		switch p.Sharing {
		case Streams:
			if shared1 == nil {
				shared1 = s.Connect(1, 0, nil)
				if res := shared1.CreateContext(1, 0, 99, 0, 0, 0); res != sim.Success {
					return 0, fmt.Errorf("create context: %v", res)
				}
			}
			r.c = shared1
			if res := r.c.CreateStream(1, r.stream); res != sim.Success {
				return 0, fmt.Errorf("create stream: %v", res)
			}
		default:
			r.c = s.Connect(i+1, 0, nil)
			mps := 0
			if p.Sharing == MPS {
				mps = mpsPID
			}
			if res := r.c.CreateContext(1, 0, r.stream, mps, 0, 0); res != sim.Success {
				return 0, fmt.Errorf("create context: %v", res)
			}
		}
		if err := r.load(); err != nil {
			return 0, fmt.Errorf("%s: %w", w.Name, err)
		}
		runs[i] = r
	}
	dur := time.Duration(p.Seconds * timeScale * float64(time.Second))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if p.Lockstep {
		runs[0].partners, runs = runs[1:], runs[:1]
	}
	var wg sync.WaitGroup
	for _, r := range runs[1:] {
		wg.Add(1)
		go func() { defer wg.Done(); r.run(ctx, 0) }()
	}
	if len(runs) > 1 {
		time.Sleep(50 * timeScale * time.Millisecond) // the neighbours are under way
	}
	fig, err := runs[0].measure(ctx, p.Metric, dur)
	cancel()
	wg.Wait()
	return fig, err
}

// runner drives one workload on one stream.
type runner struct {
	w        Workload
	c        *sim.Client
	stream   uint32
	evBase   uint32
	fnBase   uint32
	partners []*runner // Lockstep neighbours
	lat      []float64 // ms per unit
	units    int
	span     float64 // ms of model time the counted units took (Stream)
	err      error
}

const moduleHeader = "gpusim-module 1\n"

func (r *runner) load() error {
	var b strings.Builder
	b.WriteString(moduleHeader)
	for i, k := range r.w.Kernels {
		fmt.Fprintf(&b, "func k%d block_us=%g bw=%g fixed_us=%g", i, k.BlockUs, k.BW, k.FixedUs)
		if k.Regs > 0 {
			fmt.Fprintf(&b, " regs=%d", k.Regs)
		}
		b.WriteString("\n")
	}
	mod := r.fnBase
	if res := r.c.LoadModule(mod, []byte(b.String())); res != sim.Success {
		return fmt.Errorf("load module: %v", res)
	}
	for i := range r.w.Kernels {
		if res := r.c.GetFunction(mod, r.fnBase+1+uint32(i), fmt.Sprintf("k%d", i)); res != sim.Success {
			return fmt.Errorf("get function: %v", res)
		}
	}
	for i := uint32(0); i < 4; i++ {
		if res := r.c.CreateEvent(1, r.evBase+i); res != sim.Success {
			return fmt.Errorf("create event: %v", res)
		}
	}
	return nil
}

func (r *runner) launchUnit() sim.Result {
	for i, k := range r.w.Kernels {
		if res := r.c.Launch(r.stream, r.fnBase+1+uint32(i), [3]uint32{uint32(k.Grid), 1, 1}, [3]uint32{uint32(k.Threads), 1, 1}); res != sim.Success {
			return res
		}
	}
	return sim.Success
}

func (r *runner) sync(ev uint32) sim.Result {
	ch := make(chan sim.Result, 1)
	r.c.Sync(sim.SyncEvent, ev, func(res sim.Result) { ch <- res })
	return <-ch
}

// measure runs the workload for dur and returns its figure.
func (r *runner) measure(ctx context.Context, m Metric, dur time.Duration) (float64, error) {
	r.run(ctx, dur)
	if r.err != nil {
		return 0, r.err
	}
	switch m {
	case Throughput:
		if r.span <= 0 || r.units == 0 {
			return 0, fmt.Errorf("%s finished no unit", r.w.Name)
		}
		return float64(r.units) / r.span * 1000, nil
	case P99Latency, MeanLatency:
		if len(r.lat) < 5 {
			return 0, fmt.Errorf("%s finished only %d units", r.w.Name, len(r.lat))
		}
		if m == MeanLatency {
			sum := 0.0
			for _, v := range r.lat {
				sum += v
			}
			return sum / float64(len(r.lat)), nil
		}
		v := slices.Clone(r.lat)
		slices.Sort(v)
		return v[int(math.Ceil(0.99*float64(len(v))))-1], nil
	}
	return 0, fmt.Errorf("metric %d needs no run", m)
}

// run issues units until ctx ends or dur (if > 0) has passed, keeping what
// measure needs. The first 10% of dur is warm-up and not counted.
func (r *runner) run(ctx context.Context, dur time.Duration) {
	start := time.Now()
	warm := start.Add(dur / 10)
	end := start.Add(dur)
	done := func() bool {
		return ctx.Err() != nil || (dur > 0 && time.Now().After(end))
	}
	ev0, ev1 := r.evBase, r.evBase+1
	switch r.w.Arrival {
	case Loop:
		for !done() {
			r.c.RecordEvent(ev0, r.stream)
			for _, q := range r.partners {
				q.c.WaitEvent(q.stream, ev0) // start together
			}
			if res := r.launchUnit(); res != sim.Success {
				r.err = fmt.Errorf("launch: %v", res)
				return
			}
			for _, q := range r.partners {
				if res := q.launchUnit(); res != sim.Success {
					r.err = fmt.Errorf("launch: %v", res)
					return
				}
				q.c.RecordEvent(q.evBase+1, q.stream)
			}
			r.c.RecordEvent(ev1, r.stream)
			if res := r.sync(ev1); res != sim.Success {
				r.err = fmt.Errorf("sync: %v", res)
				return
			}
			ms, _ := r.c.ElapsedMs(ev0, ev1)
			for _, q := range r.partners {
				if res := r.sync(q.evBase + 1); res != sim.Success {
					r.err = fmt.Errorf("sync: %v", res)
					return
				}
				qms, _ := r.c.ElapsedMs(ev0, q.evBase+1)
				ms = max(ms, qms)
			}
			if time.Now().After(warm) {
				r.lat = append(r.lat, float64(ms))
			}
		}
	case Poisson:
		// arrivals and GPU-side service times make a first-come
		// first-served queue; the host's own delays are left out
		rng := rand.New(rand.NewPCG(1, uint64(r.evBase)))
		arrival := rng.ExpFloat64() / r.w.Rate
		finish := 0.0
		for !done() {
			if d := time.Until(start.Add(time.Duration(arrival * timeScale * float64(time.Second)))); d > 0 {
				time.Sleep(d)
			}
			r.c.RecordEvent(ev0, r.stream)
			if res := r.launchUnit(); res != sim.Success {
				r.err = fmt.Errorf("launch: %v", res)
				return
			}
			r.c.RecordEvent(ev1, r.stream)
			if res := r.sync(ev1); res != sim.Success {
				r.err = fmt.Errorf("sync: %v", res)
				return
			}
			ms, _ := r.c.ElapsedMs(ev0, ev1)
			finish = math.Max(arrival, finish) + float64(ms)/1000
			if start.Add(time.Duration(arrival * timeScale * float64(time.Second))).After(warm) {
				if r.w.NoQueue {
					r.lat = append(r.lat, float64(ms))
				} else {
					r.lat = append(r.lat, (finish-arrival)*1000)
				}
			}
			arrival += rng.ExpFloat64() / r.w.Rate
		}
	case Stream:
		// two units in flight; a mark recorded after the warm-up starts the
		// counted span, which ends with the last unit
		marked, n, i := false, 0, 0
		var prev uint32
		for !done() {
			if !marked && time.Now().After(warm) {
				r.c.RecordEvent(r.evBase+2, r.stream)
				marked = true
			}
			if res := r.launchUnit(); res != sim.Success {
				r.err = fmt.Errorf("launch: %v", res)
				return
			}
			ev := r.evBase + uint32(i%2)
			r.c.RecordEvent(ev, r.stream)
			if marked {
				n++
			}
			if i > 0 {
				if res := r.sync(prev); res != sim.Success {
					r.err = fmt.Errorf("sync: %v", res)
					return
				}
			}
			prev, i = ev, i+1
		}
		if marked && n > 0 && r.sync(prev) == sim.Success {
			if ms, res := r.c.ElapsedMs(r.evBase+2, prev); res == sim.Success {
				r.units, r.span = n, float64(ms)
			}
		}
	}
}
