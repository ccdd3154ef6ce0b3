// Package probe runs SysMonitor against an NVML library for a while and
// reports what it sampled and the health it derived: the real-GPU check
// behind tests/gpu/monitor.sh, runnable by hand on any GPU node as
// `nvmlprobe`.
package probe

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/muxflow/muxflow/monitor"
)

// newLib opens NVML; tests replace it with a mock.
var newLib = func(path string) nvml.Interface {
	if path == "" {
		return nvml.New()
	}
	return nvml.New(nvml.WithLibraryPath(path))
}

type options struct {
	duration      time.Duration
	period        time.Duration
	printEvery    time.Duration
	jsonPath      string
	libPath       string
	requireBusy   bool
	allowNoEvents bool
	verbose       bool
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("nvmlprobe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.duration, "duration", 30*time.Second, "how long to sample")
	fs.DurationVar(&o.period, "period", monitor.DefaultConfig().Period, "sampling period")
	fs.DurationVar(&o.printEvery, "print-every", time.Second, "how often to print the GPU table")
	fs.StringVar(&o.jsonPath, "json", "", "write the final snapshot, events and statistics as JSON to this file")
	fs.StringVar(&o.libPath, "lib", "", "path of libnvidia-ml.so.1 (default: the dynamic linker's choice)")
	fs.BoolVar(&o.requireBusy, "require-busy", false, "fail unless some GPU reached 50% utilisation (run a load alongside)")
	fs.BoolVar(&o.allowNoEvents, "allow-no-events", false, "pass even if NVML error events cannot be registered")
	fs.BoolVar(&o.verbose, "v", false, "log the monitor's debug messages")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.duration <= 0 || o.printEvery <= 0 {
		return o, errors.New("-duration and -print-every must be positive")
	}
	return o, nil
}

// Run parses args, samples every GPU for -duration and prints the table,
// the events and a verdict to stdout. It fails when NVML cannot be used or
// a check fails.
func Run(ctx context.Context, args []string) error {
	return run(ctx, args, os.Stdout, os.Stderr)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	lib := newLib(o.libPath)
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("initialising NVML (is the NVIDIA driver installed and libnvidia-ml.so.1 on the library path?): %w", ret)
	}
	defer lib.Shutdown()
	printSystem(stdout, lib)
	// Count and time every NVML call the sampling makes: on a real driver
	// each is an ioctl, and their costs say what a poll costs per GPU.
	var calls monitor.CallCounter
	lib = calls.Wrap(lib)

	cfg := monitor.DefaultConfig()
	cfg.Period = o.period
	// The probe characterises a GPU over a short run: every metric every period.
	cfg.SlowPeriod = 0
	m, err := monitor.New(lib, cfg, nil, log)
	if err != nil {
		return err
	}
	defer m.Close()

	ctx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	events, unsubscribe := m.Subscribe(256)
	defer unsubscribe()
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); m.WatchEvents(ctx) }()

	st := newStats(len(m.Snapshot()))
	calls.Reset() // the polls' calls, not the set-up's
	cpuStart := processCPU()
	start := time.Now()
	tick := time.NewTicker(o.period)
	defer tick.Stop()
	nextPrint := start
	for ctx.Err() == nil {
		st.pollCost = append(st.pollCost, m.Poll())
		st.add(m.Snapshot())
		st.listened = st.listened || m.ListeningForEvents()
		drainEvents(stdout, events)
		if now := time.Now(); !now.Before(nextPrint) {
			fmt.Fprintf(stdout, "--- %v\n", now.Sub(start).Round(time.Millisecond))
			if err := monitor.WriteStatus(stdout, m.Snapshot(), now); err != nil {
				return err
			}
			nextPrint = nextPrint.Add(o.printEvery)
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	<-watchDone
	cpu := processCPU() - cpuStart
	drainEvents(stdout, events)

	final := m.Snapshot()
	fmt.Fprintln(stdout, "=== final state")
	if err := monitor.WriteStatus(stdout, final, time.Now()); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "NVML error events (Xid/ECC) listened for: %v\n", st.listened)
	writeCallCosts(stdout, &calls, len(st.pollCost), len(final), cpu)
	problems := st.report(stdout, final, o)
	if o.jsonPath != "" {
		if err := writeJSON(o.jsonPath, final, m.Events(time.Time{}), st, problems); err != nil {
			return err
		}
	}
	if len(problems) > 0 {
		fmt.Fprintln(stdout, "VERDICT: FAIL")
		return fmt.Errorf("monitor probe found %d problem(s): %s", len(problems), strings.Join(problems, "; "))
	}
	fmt.Fprintln(stdout, "VERDICT: PASS")
	return nil
}

// writeCallCosts prints each NVML function's calls per GPU per poll and its
// mean time, the most costly first, and the process's CPU time per poll.
func writeCallCosts(w io.Writer, c *monitor.CallCounter, polls, gpus int, cpu time.Duration) {
	if polls == 0 || gpus == 0 {
		return
	}
	n, spent := c.Calls(), c.Spent()
	names := slices.SortedFunc(maps.Keys(n), func(a, b string) int { return cmp.Compare(spent[b], spent[a]) })
	var total time.Duration
	for _, k := range names {
		total += spent[k]
	}
	fmt.Fprintf(w, "NVML calls: %.1f per GPU per poll, %v per GPU per poll in NVML; process CPU %v per poll\n",
		float64(c.Total())/float64(polls*gpus), (total / time.Duration(polls*gpus)).Round(time.Microsecond),
		(cpu / time.Duration(polls)).Round(time.Microsecond))
	for _, k := range names {
		fmt.Fprintf(w, "  %-34s %5.2f calls/GPU/poll  mean %8v  %5.1f%% of NVML time\n", k,
			float64(n[k])/float64(polls*gpus), (spent[k] / time.Duration(n[k])).Round(100*time.Nanosecond),
			100*float64(spent[k])/float64(max(total, 1)))
	}
}

// processCPU is this process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func drainEvents(w io.Writer, ch <-chan monitor.Event) {
	for {
		select {
		case e := <-ch:
			_ = monitor.WriteEvents(w, []monitor.Event{e})
		default:
			return
		}
	}
}

func printSystem(w io.Writer, lib nvml.Interface) {
	get := func(f func() (string, nvml.Return)) string {
		v, ret := f()
		if ret != nvml.SUCCESS {
			return "unknown (" + ret.Error() + ")"
		}
		return v
	}
	cuda := get(func() (string, nvml.Return) {
		v, ret := lib.SystemGetCudaDriverVersion()
		return fmt.Sprintf("%d.%d", v/1000, v%1000/10), ret
	})
	fmt.Fprintf(w, "driver %s, NVML %s, CUDA %s\n", get(lib.SystemGetDriverVersion), get(lib.SystemGetNVMLVersion), cuda)
}

// stats accumulates every sample of the run per GPU.
type stats struct {
	pollCost []time.Duration
	gpus     []gpuStats
	listened bool
}

type gpuStats struct {
	Samples     int                `json:"samples"`
	Lost        int                `json:"lost_samples"`
	Util        []float64          `json:"-"`
	SMActivity  []float64          `json:"-"`
	ClockPct    []float64          `json:"-"`
	Temp        []float64          `json:"-"`
	PowerPct    []float64          `json:"-"`
	MemPct      []float64          `json:"-"`
	MaxProcs    int                `json:"max_processes"`
	Errors      map[string]int     `json:"errors,omitempty"`
	Unsupported []string           `json:"unsupported,omitempty"`
	States      map[string]int     `json:"samples_by_state"`
	Summary     map[string]summary `json:"metrics"`
	lastSample  *monitor.Sample
}

type summary struct {
	N      int     `json:"n"`
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
}

func newStats(n int) *stats {
	st := &stats{gpus: make([]gpuStats, n)}
	for i := range st.gpus {
		st.gpus[i].Errors = map[string]int{}
		st.gpus[i].States = map[string]int{}
	}
	return st
}

func (st *stats) add(snap []monitor.GPUStatus) {
	for i, g := range snap {
		if i >= len(st.gpus) || g.Sample == nil || g.Sample == st.gpus[i].lastSample {
			continue
		}
		gs := &st.gpus[i]
		s := g.Sample
		gs.lastSample = s
		gs.Samples++
		gs.States[string(g.State)]++
		if s.Lost {
			gs.Lost++
			continue
		}
		for metric := range s.Errors {
			gs.Errors[metric]++
		}
		gs.Unsupported = s.Unsupported
		if s.GPUUtilPercent != nil {
			gs.Util = append(gs.Util, float64(*s.GPUUtilPercent))
		}
		if s.SMActivityPercent != nil {
			gs.SMActivity = append(gs.SMActivity, *s.SMActivityPercent)
		}
		if v, ok := s.SMClockPercent(); ok {
			gs.ClockPct = append(gs.ClockPct, v)
		}
		if s.TemperatureC != nil {
			gs.Temp = append(gs.Temp, float64(*s.TemperatureC))
		}
		if v, ok := s.PowerPercent(); ok {
			gs.PowerPct = append(gs.PowerPct, v)
		}
		if v, ok := s.MemoryUsedPercent(); ok {
			gs.MemPct = append(gs.MemPct, v)
		}
		gs.MaxProcs = max(gs.MaxProcs, len(s.Processes))
	}
}

func summarize(v []float64) summary {
	if len(v) == 0 {
		return summary{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return summary{N: len(s), Min: s[0], Median: s[len(s)/2], Max: s[len(s)-1]}
}

// report prints per-GPU statistics and returns the failed checks.
func (st *stats) report(w io.Writer, final []monitor.GPUStatus, o options) []string {
	var problems []string
	fail := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	var notes []string
	note := func(format string, a ...any) { notes = append(notes, fmt.Sprintf(format, a...)) }

	costs := slices.Clone(st.pollCost)
	slices.SortFunc(costs, cmp.Compare)
	if len(costs) > 0 {
		fmt.Fprintf(w, "poll cost (all GPUs): median %v, max %v over %d polls; period %v\n",
			costs[len(costs)/2], costs[len(costs)-1], len(costs), o.period)
	}
	if len(final) == 0 {
		fail("NVML reports no GPU")
	}
	busy := false
	for i, g := range final {
		gs := &st.gpus[i]
		gs.Summary = map[string]summary{
			"utilization_percent": summarize(gs.Util), "sm_activity_percent": summarize(gs.SMActivity),
			"sm_clock_percent_of_max": summarize(gs.ClockPct), "temperature_c": summarize(gs.Temp),
			"power_percent_of_limit": summarize(gs.PowerPct), "memory_used_percent": summarize(gs.MemPct),
		}
		fmt.Fprintf(w, "GPU %d %s (%s): %d samples, %d lost, final state %s, states seen %v\n",
			g.Index, g.UUID, g.Name, gs.Samples, gs.Lost, g.State, gs.States)
		for _, k := range slices.Sorted(maps.Keys(gs.Summary)) {
			s := gs.Summary[k]
			if s.N == 0 {
				fmt.Fprintf(w, "  %-24s unavailable\n", k)
				continue
			}
			fmt.Fprintf(w, "  %-24s min %7.1f  median %7.1f  max %7.1f  (n=%d)\n", k, s.Min, s.Median, s.Max, s.N)
		}
		fmt.Fprintf(w, "  max processes seen %d; unsupported %v; errors %v\n", gs.MaxProcs, gs.Unsupported, gs.Errors)

		// What a real GPU must give for the health checks to mean anything.
		if gs.Samples == 0 {
			fail("GPU %d: no sample", g.Index)
			continue
		}
		for _, c := range []struct {
			name string
			n    int
		}{{"utilization", len(gs.Util)}, {"temperature", len(gs.Temp)}, {"SM clock", len(gs.ClockPct)}, {"memory", len(gs.MemPct)}} {
			if c.n == 0 {
				fail("GPU %d: %s never read", g.Index, c.name)
			}
		}
		if s := gs.Summary["temperature_c"]; s.N > 0 && (s.Min < 1 || s.Max > 120) {
			fail("GPU %d: temperature %v..%v °C is implausible", g.Index, s.Min, s.Max)
		}
		if s := gs.Summary["sm_clock_percent_of_max"]; s.N > 0 && s.Max > 101 {
			fail("GPU %d: SM clock %.0f%% of max is implausible", g.Index, s.Max)
		}
		for metric, n := range gs.Errors {
			if n*10 > gs.Samples { // occasional errors are tolerated; persistent ones are a bug
				fail("GPU %d: %s failed in %d of %d samples", g.Index, metric, n, gs.Samples)
			}
		}
		if gs.Lost > 0 {
			fail("GPU %d: reported lost in %d samples", g.Index, gs.Lost)
		}
		if util := gs.Summary["utilization_percent"]; util.Max >= 50 {
			busy = true
			// A kernel-saturating load must show in SM activity too; if it
			// does not, the GPM metric or its units are read wrong.
			if act := gs.Summary["sm_activity_percent"]; act.N > 0 && act.Max < 10 {
				fail("GPU %d: SM activity stayed at or under %.1f%% while utilisation reached %.0f%%", g.Index, act.Max, util.Max)
			} else if act.N == 0 {
				note("GPU %d: busy, but SM activity (GPM) unavailable: expected before Hopper, a problem on H100/H200", g.Index)
			}
			if gs.MaxProcs == 0 {
				note("GPU %d: busy, but no compute process listed (another PID namespace?)", g.Index)
			}
		}
	}
	for _, n := range notes {
		fmt.Fprintln(w, "NOTE:", n)
	}
	if !st.listened && !o.allowNoEvents {
		fail("NVML error events could not be registered (Xids would only be seen as a lost GPU); -allow-no-events accepts that")
	}
	if o.requireBusy && !busy {
		fail("no GPU reached 50%% utilisation although a load was expected")
	}
	return problems
}

func writeJSON(path string, final []monitor.GPUStatus, events []monitor.Event, st *stats, problems []string) error {
	out := struct {
		GPUs     []monitor.GPUStatus `json:"gpus"`
		Events   []monitor.Event     `json:"events"`
		Stats    []gpuStats          `json:"stats"`
		Problems []string            `json:"problems"`
	}{final, events, st.gpus, problems}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding probe results: %w", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("writing probe results: %w", err)
	}
	return nil
}
