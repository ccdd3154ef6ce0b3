package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/muxflow/muxflow/gpusim/simclient"
	"github.com/muxflow/muxflow/muxd/api"
)

// Strategy is one way of sharing the GPU that an experiment compares.
type Strategy string

const (
	// OnlineAlone: the online service has the GPU to itself (the latency baseline).
	OnlineAlone Strategy = "online-alone"
	// TimeSharing: online and offline contexts time-slice the GPU (no MPS).
	TimeSharing Strategy = "time-sharing"
	// PriorityTimeSharing: time-slicing where the online context runs first whenever it
	// has work (gpusim's GPUSIM_PRIORITY; n/a with a gpusim too old to know it).
	PriorityTimeSharing Strategy = "priority-time-sharing"
	// PlainMPS: both share one MPS server with no limits.
	PlainMPS Strategy = "mps"
	// StaticShare: muxflow (muxd, libxcuda, MPS) with a fixed offline share.
	StaticShare Strategy = "muxflow-static"
	// Muxflow: muxflow with dynamic SM allocation.
	Muxflow Strategy = "muxflow"
)

// offlineSlack is how much longer than the online window an offline job is asked to
// run: more than any start-up of the other jobs and the online service takes.
const offlineSlack = 60 * time.Second

// Strategies lists every strategy in table order.
var Strategies = []Strategy{OnlineAlone, TimeSharing, PriorityTimeSharing, PlainMPS, StaticShare, Muxflow}

// Description says in a few words what a strategy is.
func (s Strategy) Description() string {
	switch s {
	case OnlineAlone:
		return "online alone on the GPU"
	case TimeSharing:
		return "time-sharing (no MPS)"
	case PriorityTimeSharing:
		return "priority time-sharing"
	case PlainMPS:
		return "plain MPS (no limits)"
	case StaticShare:
		return "muxflow, static share"
	case Muxflow:
		return "muxflow"
	}
	return string(s)
}

// ParseStrategies reads a comma-separated list ("all" for every strategy).
func ParseStrategies(list string) ([]Strategy, error) {
	if strings.TrimSpace(list) == "all" || strings.TrimSpace(list) == "" {
		return slices.Clone(Strategies), nil
	}
	var out []Strategy
	for _, f := range strings.Split(list, ",") {
		s := Strategy(strings.TrimSpace(f))
		if !slices.Contains(Strategies, s) {
			names := make([]string, len(Strategies))
			for i, v := range Strategies {
				names[i] = string(v)
			}
			return nil, fmt.Errorf("unknown strategy %q (known: %s)", s, strings.Join(names, ", "))
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

// Result is what one strategy's run measured.
type Result struct {
	Strategy Strategy
	// Skipped, when set, says why the strategy could not run (the row shows n/a).
	Skipped string
	// Online latency in ms. Req (the primary figure): request latency from arrival to
	// completion, queueing included, as infer rebuilds it from each request's scheduled
	// arrival and its GPU-side time (a FIFO single server: f_i = max(a_i, f_{i-1}) + g_i),
	// so an overloaded service shows its waits while this machine's CPU contention stays
	// out. GPU: the service time g_i alone, from the request's events (waits for SMs or
	// time slices included, queueing behind earlier requests not). Host: arrival to
	// completion by the client's wall clock, queueing and host delays included.
	ReqP50, ReqP99   float64
	GPUP50, GPUP99   float64
	HostP50, HostP99 float64
	// BusyPerRequest is the online service's mean kernel time per request (ms) from
	// gpusim's counters: how much sharing slowed its kernels, whatever the host did.
	BusyPerRequest float64
	Requests       int
	// OfflineItPerS is each offline job's iterations per second over the window.
	OfflineItPerS []float64
	// OfflineNorm is the sum over offline jobs of shared it/s ÷ alone it/s.
	OfflineNorm float64
	// Util is NVML-style utilisation (share of time a kernel ran) and SMActivity the
	// DCGM-style share of SMs busy, both over the window.
	Util, SMActivity float64
	Errors           int
	Evictions        int
	// SimStalls and SimStalledMs are gpusimd's own stalls in the window (its model
	// behind real time, every process held up for 2 ms or more; totals over passes):
	// where they add up, the latencies measure the simulator as well as what it
	// simulates (a note says so from 1% of the window).
	SimStalls    int
	SimStalledMs float64
	Window       time.Duration
	Samples      []Sample
	// Changes are muxd's changes of the GPU's offline ceiling during the window, each
	// with its reason (muxflow strategies only).
	Changes []CeilingChange
	// Trace is every online request, when the built infer can write it.
	Trace []Request `json:"-"`
	// Notes are problems met during the run (also counted in Errors where they are).
	Notes []string
	// KernelRisks are the offline containers muxd named, at some point in the window,
	// as keeping the online requests waiting for their kernels whatever their share
	// (the latest report of each; muxflow strategies only).
	KernelRisks []api.KernelRisk
	// Confinement is, per container muxd confined among those, what its libxcuda last
	// reported of it ("confined", or why not; api.Usage.Confine).
	Confinement map[string]string `json:",omitempty"`
}

// noteRisks adds to seen the kernel risks of one reading, replacing an earlier report of
// the same container.
func noteRisks(seen, now []api.KernelRisk) []api.KernelRisk {
	for _, r := range now {
		if i := slices.IndexFunc(seen, func(o api.KernelRisk) bool { return o.ID == r.ID }); i >= 0 {
			seen[i] = r
		} else {
			seen = append(seen, r)
		}
	}
	return seen
}

// Sample is one sampling period of a run, for the plot.
type Sample struct {
	T time.Duration // end of the period, from the window's start
	// OnlineQPS is requests started per second in the period; OnlineGPUms the online
	// service's mean GPU time per request (NaN when it served none).
	OnlineQPS, OnlineGPUms float64
	Util, SMActivity       float64
	// OfflineShare and OnlineDemand are muxd's figures in percent (NaN without muxd).
	OfflineShare, OnlineDemand float64
	// Reason is why muxd last changed the ceiling ("" without muxd).
	Reason string
}

// CeilingChange is one change of the GPU's offline ceiling by muxd.
type CeilingChange struct {
	T time.Duration // from the window's start
	// From, To and Demand are percent of GPU time.
	From, To, Demand float64
	// Reason is muxd's short key (calm, burst, burst over, ...); Detail its figures.
	Reason, Detail string
}

// Report is an experiment: the scenario, the offline baselines and one result per
// strategy (medians over the passes when it was repeated).
type Report struct {
	Scenario *Scenario
	// OfflineAlone is each offline job's it/s with the GPU to itself.
	OfflineAlone []float64
	Results      []Result
	// Passes are the individual runs; ratios to online-alone are taken within a pass.
	Passes  []Pass
	Started time.Time
	Elapsed time.Duration
}

// Pass is one run of every strategy.
type Pass struct {
	OfflineAlone []float64
	Results      []Result
}

// Result returns the strategy's result, if it was run.
func (r *Report) Result(s Strategy) (Result, bool) {
	for _, x := range r.Results {
		if x.Strategy == s {
			return x, true
		}
	}
	return Result{}, false
}

// Runner runs a scenario's strategies one after the other, each on a fresh simulated
// node, so that no run inherits another's state.
type Runner struct {
	Scenario  *Scenario
	Artifacts Artifacts
	// Dir receives each run's logs (gpusimd, muxd, policy); a temporary one if empty.
	Dir string
	Log *slog.Logger
	// OpTrace has gpusimd write every GPU operation of the compared runs to
	// gpusim-ops.csv in the run's directory (keep Dir to read it).
	OpTrace bool
	// Progress, if set, is told when each run starts.
	Progress func(what string)
	// NoOfflineBaseline skips running the offline jobs alone (offline norm. shows "-").
	NoOfflineBaseline bool
	// Repeat runs every strategy this many times (in turn, so that this machine's load
	// weighs on all alike) and reports medians; 0 means once.
	Repeat int
	// StallReruns is how many times a run in which gpusimd fell behind real time
	// (simStalled) is run again; the last run is the one reported, and a note names the
	// stalls of each run it replaced.
	StallReruns int
}

// Run measures the offline baselines (when a shared strategy is asked for) and each
// strategy in turn.
func (r *Runner) Run(ctx context.Context, strategies []Strategy) (*Report, error) {
	if r.Log == nil {
		r.Log = slog.New(slog.DiscardHandler)
	}
	if r.Dir == "" {
		d, err := os.MkdirTemp("", "muxexp-")
		if err != nil {
			return nil, fmt.Errorf("create work directory: %w", err)
		}
		r.Dir = d
	}
	// muxd's policy names its state directory under it, and muxd takes only absolute
	// paths (muxexp --logs logs).
	abs, err := filepath.Abs(r.Dir)
	if err != nil {
		return nil, fmt.Errorf("work directory %s: %w", r.Dir, err)
	}
	r.Dir = abs
	rep := &Report{Scenario: r.Scenario, Started: time.Now()}
	n := max(1, r.Repeat)
	for k := range n {
		dir := r.Dir
		if n > 1 {
			dir = filepath.Join(r.Dir, fmt.Sprintf("pass-%d", k+1))
		}
		p, err := r.pass(ctx, strategies, dir, k+1, n)
		if err != nil {
			return nil, err
		}
		rep.Passes = append(rep.Passes, p)
	}
	rep.aggregate()
	rep.Elapsed = time.Since(rep.Started)
	return rep, nil
}

// pass runs the offline baselines (when a shared strategy is asked for) and each
// strategy once.
func (r *Runner) pass(ctx context.Context, strategies []Strategy, dir string, k, n int) (Pass, error) {
	var p Pass
	tag := ""
	if n > 1 {
		tag = fmt.Sprintf(" (pass %d of %d)", k, n)
	}
	shared := slices.ContainsFunc(strategies, func(s Strategy) bool { return s != OnlineAlone })
	if shared && !r.NoOfflineBaseline {
		for i, j := range r.Scenario.Offline {
			r.progress(fmt.Sprintf("offline %s alone (baseline)%s", j.Name, tag))
			v, err := r.offlineAlone(ctx, i, dir)
			if err != nil {
				return p, fmt.Errorf("offline baseline of %s: %w", j.Name, err)
			}
			p.OfflineAlone = append(p.OfflineAlone, v)
		}
	}
	for _, s := range Strategies {
		if !slices.Contains(strategies, s) {
			continue
		}
		r.progress(string(s) + tag)
		res, err := r.runStrategy(ctx, s, p.OfflineAlone, dir)
		res, err = rerunStalled(res, err, r.StallReruns, func(try int) (Result, error) {
			r.progress(fmt.Sprintf("%s%s again: gpusimd fell behind real time", s, tag))
			// The stalled run's logs stay beside the new one's, and its muxd state
			// cannot leak into it.
			run := filepath.Join(dir, string(s))
			if err := os.Rename(run, fmt.Sprintf("%s.stalled-%d", run, try)); err != nil {
				os.RemoveAll(run)
			}
			return r.runStrategy(ctx, s, p.OfflineAlone, dir)
		})
		if err != nil && s != OnlineAlone && errors.Is(err, errFellBehind) {
			// A sharing strategy the online service cannot keep up under is a result,
			// not a failure of the experiment: its row says so.
			res, err = Result{Strategy: s, Skipped: err.Error()}, nil
		}
		if err != nil {
			return p, fmt.Errorf("strategy %s: %w", s, err)
		}
		p.Results = append(p.Results, res)
	}
	return p, nil
}

func (r *Runner) progress(what string) {
	r.Log.Info("run", "scenario", r.Scenario.Name, "what", what)
	if r.Progress != nil {
		r.Progress(what)
	}
}

// offlineAlone runs offline job i alone and returns its it/s over a window that starts
// once it is launching.
func (r *Runner) offlineAlone(ctx context.Context, i int, dir string) (float64, error) {
	s := r.Scenario
	j := s.Offline[i]
	n, err := startNode(ctx, s, modeAlone, r.Artifacts, filepath.Join(dir, "offline-alone-"+j.Name), "", false, r.Log)
	if err != nil {
		return 0, err
	}
	defer n.stop()
	d := s.offlineBaseline()
	p, err := n.start(ctx, j.Name, api.Offline, n.art.Train, j.TrainArgs(d+time.Second)...)
	if err != nil {
		return 0, err
	}
	defer p.kill()
	if err := n.waitLaunching(ctx, p, 15*time.Second); err != nil {
		return 0, err
	}
	a, err := n.processSnap(ctx, p)
	if err != nil {
		return 0, err
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	b, err := n.processSnap(ctx, p)
	if err != nil {
		return 0, err
	}
	if err := p.wait(ctx, 30*time.Second); err != nil {
		return 0, err
	}
	if out := parseTrain(p.output()); out.Errors > 0 || out.Iterations == 0 {
		return 0, fmt.Errorf("train failed alone: %s", lastLine(p.output()))
	}
	return itPerS(a, b, j.Kernels), nil
}

// snap is a process's gpusim counters at one instant.
type snap struct {
	at       time.Time
	launches uint64
	busyNs   float64
}

func (n *node) processSnap(ctx context.Context, p *proc) (snap, error) {
	st, ok, err := n.sim.Process(ctx, 0, p.cmd.Process.Pid)
	if err != nil {
		return snap{}, fmt.Errorf("read %s's counters from gpusim: %w", p.name, err)
	}
	if !ok {
		return snap{}, fmt.Errorf("gpusim does not know %s (pid %d)", p.name, p.cmd.Process.Pid)
	}
	return snap{at: time.Now(), launches: st.Launches, busyNs: st.BusyNs}, nil
}

func itPerS(a, b snap, kernels int) float64 {
	dt := b.at.Sub(a.at).Seconds()
	if dt <= 0 || b.launches < a.launches {
		return 0
	}
	return float64(b.launches-a.launches) / float64(kernels) / dt
}

// inferOut and trainOut are the workload programs' JSON lines.
type inferOut struct {
	Requests   int    `json:"requests"`
	Completed  int    `json:"completed"`
	Errors     int    `json:"errors"`
	FirstError string `json:"first_error"`
	// ReqP50 and ReqP99 are nil when infer did not print them (a build from before
	// request latency was added): an error, not a zero.
	ReqP50 *float64 `json:"req_p50_ms"`
	ReqP99 *float64 `json:"req_p99_ms"`
	P50    float64  `json:"p50_ms"`
	P99    float64  `json:"p99_ms"`
	GPUP50 float64  `json:"gpu_p50_ms"`
	GPUP99 float64  `json:"gpu_p99_ms"`
	ok     bool
}

type trainOut struct {
	Iterations int     `json:"iterations"`
	ItPerS     float64 `json:"it_per_s"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error"`
	ok         bool
}

// lastJSON decodes the last line of out that is a JSON object into v.
func lastJSON(out string, v any) bool {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), v) == nil {
			return true
		}
	}
	return false
}

func parseInfer(out string) inferOut {
	var o inferOut
	o.ok = lastJSON(out, &o)
	return o
}

func parseTrain(out string) trainOut {
	var o trainOut
	o.ok = lastJSON(out, &o)
	return o
}

func modeOf(s Strategy) mode {
	switch s {
	case OnlineAlone:
		return modeAlone
	case TimeSharing:
		return modeTimeSlice
	case PlainMPS:
		return modeMPS
	case PriorityTimeSharing:
		return modeTimeSlice
	default:
		return modeMuxd
	}
}

// runStrategy runs the online service (and, except alone, the offline jobs) under one
// strategy and measures the window in which the online service ran.
func (r *Runner) runStrategy(ctx context.Context, st Strategy, alone []float64, dir string) (Result, error) {
	res := Result{Strategy: st}
	if st == PriorityTimeSharing && !r.Artifacts.PrioritySupported() {
		res.Skipped = "gpusim's fake driver does not read " + PriorityEnv + " (the time-slice scheduler cannot favour a context yet)"
		return res, nil
	}
	s := r.Scenario
	alloc := ""
	if st == StaticShare || st == Muxflow {
		alloc = allocSection(s, st == StaticShare)
	}
	n, err := startNode(ctx, s, modeOf(st), r.Artifacts, filepath.Join(dir, string(st)), alloc, r.OpTrace, r.Log)
	if err != nil {
		return res, err
	}
	defer n.stop()
	dur := s.Duration.D()

	// The online service comes first, as on a real node (the matcher places offline jobs
	// on GPUs that already serve): it warms up at its trace's starting rate, unmeasured,
	// and muxd sees its kernels; the offline jobs join; then its measured schedule starts.
	args := append(s.InferArgs(dur), "--warmup")
	tracePath := ""
	if r.Artifacts.TraceSupported() {
		tracePath = filepath.Join(n.dir, "online-trace.csv")
		args = append(args, TraceFlag, tracePath)
	}
	var env []string
	if st == PriorityTimeSharing {
		env = []string{PriorityEnv + "=high"}
	}
	on, err := n.startEnv(ctx, "online", api.Online, env, n.art.Infer, args...)
	if err != nil {
		return res, err
	}
	defer on.kill()
	if err := n.waitLaunching(ctx, on, 15*time.Second); err != nil {
		return res, err
	}
	if err := n.waitOnlineSeen(ctx); err != nil {
		return res, err
	}

	var offline []*proc
	defer func() {
		for _, p := range offline {
			p.kill()
		}
	}()
	if st != OnlineAlone {
		for _, j := range s.Offline {
			// Offline jobs outlive the online window whatever the start-up of the others
			// and of the online service takes (several jobs waiting to launch, an online
			// service that falls behind), so it is shared throughout; the harness ends
			// them once the window is measured.
			p, err := n.start(ctx, j.Name, api.Offline, n.art.Train, j.TrainArgs(dur+offlineSlack)...)
			if err != nil {
				return res, err
			}
			offline = append(offline, p)
		}
		for _, p := range offline {
			if err := n.waitLaunching(ctx, p, 15*time.Second); err != nil {
				return res, err
			}
		}
	}

	dev0, err := n.deviceSnap(ctx)
	if err != nil {
		return res, err
	}
	off0 := make([]snap, len(offline))
	for i, p := range offline {
		if off0[i], err = n.processSnap(ctx, p); err != nil {
			return res, err
		}
	}
	if err := on.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return res, fmt.Errorf("start the online service's measured schedule: %w", err)
	}
	smp := &sampler{n: n, online: on, kernels: s.Online.Kernels, start: dev0}
	sctx, stopSampling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); smp.run(sctx, s.Sample.D()) }()
	werr := on.wait(ctx, dur+60*time.Second)
	stopSampling()
	wg.Wait()
	if werr != nil {
		return res, werr
	}
	dev1, err := n.deviceSnap(ctx)
	if err != nil {
		return res, err
	}
	off1 := make([]snap, len(offline))
	for i, p := range offline {
		if p.running() {
			if off1[i], err = n.processSnap(ctx, p); err != nil {
				return res, err
			}
		} else {
			res.Notes = append(res.Notes, fmt.Sprintf("%s ended before the online service did", p.name))
			off1[i] = off0[i] // counted as nothing; it is an error or an eviction below
		}
	}
	// Every job still running is marked stopped before any is killed: a job killed with
	// kernels in flight faults its MPS server's other clients (as on a real GPU), and
	// one of those that exits on that error before its own kill is the harness's doing,
	// not an error of the strategy (two were counted in a random scenario's static run).
	for _, p := range offline {
		p.stopped = p.running()
	}
	for _, p := range offline {
		if p.stopped {
			p.kill()
		}
	}
	for _, p := range offline {
		if err := p.wait(ctx, 30*time.Second); err != nil {
			res.Notes = append(res.Notes, err.Error())
			res.Errors++
		}
	}

	// Online figures.
	io := parseInfer(on.output())
	if !io.ok {
		return res, fmt.Errorf("the online service printed no result: %s", lastLine(on.output()))
	}
	if io.ReqP50 == nil || io.ReqP99 == nil {
		return res, fmt.Errorf("the online service's result has no req_p50_ms/req_p99_ms (an old infer? run `make build`): %s", lastLine(on.output()))
	}
	res.ReqP50, res.ReqP99 = *io.ReqP50, *io.ReqP99
	res.GPUP50, res.GPUP99, res.HostP50, res.HostP99 = io.GPUP50, io.GPUP99, io.P50, io.P99
	res.Requests = io.Requests
	res.Errors += io.Errors
	if io.FirstError != "" {
		res.Notes = append(res.Notes, "online: "+io.FirstError)
	}
	// Offline figures.
	for i, p := range offline {
		v := itPerS(off0[i], off1[i], s.Offline[i].Kernels)
		res.OfflineItPerS = append(res.OfflineItPerS, v)
		if i < len(alone) && alone[i] > 0 {
			res.OfflineNorm += v / alone[i]
		}
		t := parseTrain(p.output())
		switch {
		case p.stopped:
		case p.signalled():
			res.Evictions++
			res.Notes = append(res.Notes, fmt.Sprintf("%s was ended by a signal: %s", p.name, p.cmd.ProcessState))
		case !t.ok:
			res.Errors++
			res.Notes = append(res.Notes, fmt.Sprintf("%s printed no result: %s", p.name, lastLine(p.output())))
		case t.Errors > 0:
			res.Errors += t.Errors
			res.Notes = append(res.Notes, fmt.Sprintf("%s: %s", p.name, t.FirstError))
		}
	}
	// GPU figures over the window.
	res.Window = dev1.at.Sub(dev0.at)
	res.SimStalls, res.SimStalledMs = dev1.stalls-dev0.stalls, (dev1.stalledNs-dev0.stalledNs)/1e6
	if n := stallNote(res.SimStalls, res.SimStalledMs, dev1.maxStallNs/1e6, res.Window); n != "" {
		res.Notes = append(res.Notes, n)
	}
	if w := float64(res.Window.Nanoseconds()); w > 0 {
		res.Util = (dev1.busyNs - dev0.busyNs) / w
		if dev1.sms > 0 {
			res.SMActivity = (dev1.smNs - dev0.smNs) / w / float64(dev1.sms)
		}
	}
	res.Samples, res.Changes, res.KernelRisks, res.Confinement = smp.samples, smp.changes, smp.risks, smp.confine
	if tracePath != "" {
		f, err := os.Open(tracePath)
		if err != nil {
			return res, fmt.Errorf("the online service wrote no trace: %w", err)
		}
		res.Trace, err = ParseTrace(f)
		f.Close()
		if err != nil {
			return res, fmt.Errorf("online trace: %w", err)
		}
	}
	res.BusyPerRequest = math.NaN()
	if smp.requests > 0 {
		res.BusyPerRequest = smp.busyNs / smp.requests / 1e6
	}
	return res, nil
}

// simStalled says when gpusimd's own stalls in a window of that length can be what its
// latencies are made of: from 1% of the window (a stall now and then, a few ms from the
// VM or a collection, is noise).
func simStalled(stalls int, stalledMs float64, window time.Duration) bool {
	return stalls > 0 && stalledMs >= float64(window.Milliseconds())/100
}

// rerunStalled runs again (again(1), again(2), ...), up to reruns times, a run that
// ended without error but with gpusimd stalled (simStalled): its latencies measure the
// simulator on this machine, not the strategy. The last run is kept whatever its own
// stalls (so a strategy that always stalls the simulator still says so), with a note
// for each run it replaced.
func rerunStalled(res Result, err error, reruns int, again func(k int) (Result, error)) (Result, error) {
	var replaced []string
	for k := 1; k <= reruns && err == nil && simStalled(res.SimStalls, res.SimStalledMs, res.Window); k++ {
		replaced = append(replaced, fmt.Sprintf("run %d stalled gpusimd %d times (%.0f ms)", k, res.SimStalls, res.SimStalledMs))
		res, err = again(k)
	}
	if err == nil && len(replaced) > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("run %d times, as gpusimd fell behind real time for 1%% of the window or more; these figures are the last run's (%s)",
			len(replaced)+1, strings.Join(replaced, "; ")))
	}
	return res, err
}

// stallNote says when gpusimd stalled enough (simStalled) for a note under the table.
// maxMs is the longest stall of the run.
func stallNote(stalls int, stalledMs, maxMs float64, window time.Duration) string {
	if !simStalled(stalls, stalledMs, window) {
		return ""
	}
	return fmt.Sprintf("gpusimd stalled %d times in the window (%.0f ms in all, at most %.1f ms): "+
		"its model fell behind real time on this machine and held every process's operations up, so the latency "+
		"figures include the simulator's stalls, not only the simulated GPU's behaviour; fewer or less launch-heavy "+
		"offline jobs, or a machine with more cores, avoid it", stalls, stalledMs, maxMs)
}

// devSnap is GPU 0's cumulative counters at one instant (gpusim's model clock).
type devSnap struct {
	at            time.Time
	busyNs, smNs  float64
	sms           int
	stalls        int     // gpusimd's own stalls so far (sim.DeviceStats)
	stalledNs     float64 // their total
	maxStallNs    float64 // the longest
	onlineLaunch  uint64
	onlineBusyNs  float64
	haveOnlineCtr bool
}

func (n *node) deviceSnap(ctx context.Context) (devSnap, error) {
	st, err := n.sim.Stats(ctx)
	if err != nil {
		return devSnap{}, fmt.Errorf("read gpusim counters: %w", err)
	}
	if len(st) == 0 {
		return devSnap{}, fmt.Errorf("gpusim reports no GPU")
	}
	return devSnapOf(st[0], -1), nil
}

func devSnapOf(d simclient.DeviceStats, onlinePID int) devSnap {
	s := devSnap{at: time.UnixMicro(d.TimestampUnixUs), busyNs: d.BusyNs, smNs: d.SMNs, sms: d.SMs,
		stalls: d.Stalls, stalledNs: d.StalledNs, maxStallNs: d.MaxStallNs}
	for _, p := range d.Processes {
		if p.PID == onlinePID {
			s.onlineLaunch, s.onlineBusyNs, s.haveOnlineCtr = p.Launches, p.BusyNs, true
		}
	}
	return s
}

// sampler records the plot's series while the online service runs.
type sampler struct {
	n       *node
	online  *proc
	kernels int
	start   devSnap
	samples []Sample
	// changes of the ceiling muxd reported, and the time of the latest
	changes    []CeilingChange
	lastChange time.Time
	risks      []api.KernelRisk  // the latest report of each container muxd named
	confine    map[string]string // what the confined ones' libxcuda last reported
	// totals over the samples that saw the online process
	busyNs, requests float64
}

func (sm *sampler) run(ctx context.Context, every time.Duration) {
	prev := sm.start
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, err := sm.n.sim.Stats(ctx)
		if err != nil || len(st) == 0 {
			continue
		}
		cur := devSnapOf(st[0], sm.online.cmd.Process.Pid)
		smp := Sample{T: cur.at.Sub(sm.start.at), OnlineQPS: math.NaN(), OnlineGPUms: math.NaN(), OfflineShare: math.NaN(), OnlineDemand: math.NaN()}
		dt := float64(cur.at.Sub(prev.at).Nanoseconds())
		if dt <= 0 {
			continue
		}
		smp.Util = (cur.busyNs - prev.busyNs) / dt
		if cur.sms > 0 {
			smp.SMActivity = (cur.smNs - prev.smNs) / dt / float64(cur.sms)
		}
		if cur.haveOnlineCtr && prev.haveOnlineCtr && cur.onlineLaunch >= prev.onlineLaunch {
			req := float64(cur.onlineLaunch-prev.onlineLaunch) / float64(sm.kernels)
			smp.OnlineQPS = req / (dt / 1e9)
			if req >= 1 {
				smp.OnlineGPUms = (cur.onlineBusyNs - prev.onlineBusyNs) / req / 1e6
			}
			sm.busyNs += cur.onlineBusyNs - prev.onlineBusyNs
			sm.requests += req
		}
		if sm.n.client != nil {
			if g, err := sm.n.client.GPUs(ctx); err == nil && len(g) > 0 {
				smp.OfflineShare, smp.OnlineDemand, smp.Reason = g[0].OfflineShare, g[0].OnlineDemand, g[0].CeilingReasonKey
				// muxd keeps its latest changes: take those not seen yet.
				for _, c := range g[0].CeilingHistory {
					if !c.At.After(sm.lastChange) {
						continue
					}
					sm.lastChange = c.At
					if c.At.Before(sm.start.at) {
						continue
					}
					sm.changes = append(sm.changes, CeilingChange{T: c.At.Sub(sm.start.at), From: c.From, To: c.To, Demand: c.Demand, Reason: c.Reason, Detail: c.Detail})
				}
				sm.risks = noteRisks(sm.risks, g[0].KernelRisks)
				for _, r := range g[0].KernelRisks {
					if r.ConfinePercent == 0 {
						continue
					}
					if c, err := sm.n.client.Container(ctx, r.ID); err == nil && c.Usage != nil && c.Usage.Confine != "" {
						if sm.confine == nil {
							sm.confine = map[string]string{}
						}
						sm.confine[r.ID] = c.Usage.Confine
					}
				}
			}
		}
		sm.samples = append(sm.samples, smp)
		prev = cur
	}
}
