package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/muxflow/muxflow/gpusim/simclient"
	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/client"
	"github.com/muxflow/muxflow/policy"
)

// mode is how a run's GPU is shared.
type mode int

const (
	modeAlone     mode = iota // one program, no MPS
	modeTimeSlice             // several contexts time-slice (no MPS)
	modeMPS                   // a plain MPS control daemon, no limits
	modeMuxd                  // the real muxd (MPS supervision, allocator, libxcuda)
)

// Artifacts are the built programs the harness drives.
type Artifacts struct {
	simclient.Artifacts
	Muxd  string // build/bin/muxd
	XCuda string // build/lib/libxcuda.so
}

// FindArtifacts locates the build ($MUXFLOW_BUILD or <repo>/build) and fails with the
// command that makes what is missing.
func FindArtifacts() (Artifacts, error) {
	a, err := simclient.Paths()
	if err != nil {
		return Artifacts{}, err
	}
	b, err := simclient.Build()
	if err != nil {
		return Artifacts{}, err
	}
	out := Artifacts{Artifacts: a, Muxd: filepath.Join(b, "bin", "muxd"), XCuda: filepath.Join(b, "lib", "libxcuda.so")}
	for _, p := range []string{out.Muxd, out.XCuda} {
		if _, err := os.Stat(p); err != nil {
			return out, fmt.Errorf("%s is missing: run `make build` first (or set MUXFLOW_BUILD)", p)
		}
	}
	return out, nil
}

// PriorityEnv is the variable that, once gpusim's fake driver reads it at context
// creation, makes a context's work run first under time-slicing ("high"): the priority
// time-sharing baseline.
const PriorityEnv = "GPUSIM_PRIORITY"

// PrioritySupported reports whether the built fake driver knows PriorityEnv (it names
// every variable it reads), so the priority time-sharing row is measured, not faked.
func (a Artifacts) PrioritySupported() bool {
	data, err := os.ReadFile(filepath.Join(a.LibDir, "libcuda.so.1"))
	return err == nil && bytes.Contains(data, []byte(PriorityEnv))
}

// node is one simulated GPU node for one run: a private gpusimd, and, depending on the
// mode, a plain MPS control daemon or a real muxd.
type node struct {
	mode   mode
	art    Artifacts
	dir    string
	log    *slog.Logger
	sim    *simclient.Daemon
	muxd   *exec.Cmd
	muxdCh chan struct{}
	client *client.Client
	signal string // muxd's GPU signal page
}

// startNode brings a node up; stop tears it down (always call it).
func startNode(ctx context.Context, s *Scenario, m mode, art Artifacts, dir string, alloc string, opTrace bool, log *slog.Logger) (*node, error) {
	sections := policySections(s)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create run directory: %w", err)
	}
	simLog, err := os.Create(filepath.Join(dir, "gpusimd.log"))
	if err != nil {
		return nil, fmt.Errorf("create gpusimd log: %w", err)
	}
	defer simLog.Close() // gpusimd holds its own descriptor
	simArgs := []string{"-log-level", "warn"}
	if opTrace {
		simArgs = append(simArgs, "-op-trace", filepath.Join(dir, "gpusim-ops.csv"))
	}
	sim, err := simclient.Start(ctx, simclient.Options{GPUs: s.GPU, TimeSlice: s.TimeSlice.D(), Stderr: simLog, Args: simArgs})
	if err != nil {
		return nil, fmt.Errorf("start gpusimd: %w", err)
	}
	n := &node{mode: m, art: art, dir: dir, log: log, sim: sim}
	switch m {
	case modeMPS:
		if err := sim.StartMPS(ctx); err != nil {
			n.stop()
			return nil, err
		}
	case modeMuxd:
		if err := n.startMuxd(ctx, alloc, sections); err != nil {
			n.stop()
			return nil, err
		}
	}
	return n, nil
}

// muxdPolicy is the node policy for a harness run: fast monitor and allocator clocks,
// private paths, no containerd; alloc is the [alloc] section's body.
const muxdPolicy = `[node]
state_dir = %q
run_dir = %q
socket = %q
log_level = "warn"
[mps]
control = %q
pipe_dir = %q
log_dir = %q
[monitor]
period = "100ms"
[alloc]
%s
%s`

func (n *node) startMuxd(ctx context.Context, alloc, sections string) error {
	// Unix socket paths are short; muxd's run directory lives beside gpusimd's socket.
	run := filepath.Join(n.sim.Dir, "muxd")
	n.signal = ctlblock.SignalPagePath(run)
	state := filepath.Join(n.dir, "muxd-state")
	sock := filepath.Join(run, "muxd.sock")
	text := fmt.Sprintf(muxdPolicy, state, run, sock, n.art.MPSControl, n.sim.MPSPipeDir(), n.sim.MPSLogDir(), alloc, sections)
	pol := filepath.Join(n.dir, "policy.toml")
	if err := os.WriteFile(pol, []byte(text), 0o644); err != nil {
		return fmt.Errorf("write muxd policy: %w", err)
	}
	logf, err := os.Create(filepath.Join(n.dir, "muxd.log"))
	if err != nil {
		return fmt.Errorf("create muxd log: %w", err)
	}
	cmd := exec.Command(n.art.Muxd, "--policy", pol, "--gpus", "gpusim:"+n.sim.Socket)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start muxd: %w", err)
	}
	n.muxd, n.muxdCh = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(n.muxdCh) }()
	n.client = client.New(sock, 2*time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := n.client.Node(ctx)
		if err == nil && info.MPS.State == "running" {
			return nil
		}
		select {
		case <-n.muxdCh:
			log := filepath.Join(n.dir, "muxd.log")
			out, _ := os.ReadFile(log)
			return fmt.Errorf("muxd exited during start-up: %s (see %s)", lastLine(string(out)), log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("muxd did not report MPS running within 20s (last error: %v; see %s)", err, filepath.Join(n.dir, "muxd.log"))
		}
	}
}

func (n *node) stop() {
	if n.muxd != nil && n.muxd.Process != nil {
		_ = n.muxd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.muxdCh:
		case <-time.After(5 * time.Second):
			_ = n.muxd.Process.Kill()
			<-n.muxdCh
		}
	}
	n.sim.Stop()
}

// proc is one workload process of a run.
type proc struct {
	name  string
	class api.Class
	cmd   *exec.Cmd
	out   bytes.Buffer
	mu    sync.Mutex
	done  chan struct{}
	ended time.Time
	// stopped: the harness ended it after the measurement window (not an eviction, and
	// its own result line is not needed: its figures come from gpusim's counters).
	stopped bool
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// output returns what the process printed so far.
func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// start runs a workload on the node: under muxd it is registered as a container first,
// started with libxcuda preloaded and its control block, and its pid reported, as the
// OCI hook does; otherwise it is a plain process on the simulated GPU.
func (n *node) start(ctx context.Context, name string, class api.Class, prog string, args ...string) (*proc, error) {
	return n.startEnv(ctx, name, class, nil, prog, args...)
}

// startEnv is start with extra environment variables.
func (n *node) startEnv(ctx context.Context, name string, class api.Class, env []string, prog string, args ...string) (*proc, error) {
	p := &proc{name: name, class: class, done: make(chan struct{})}
	p.cmd = exec.Command(prog, args...)
	p.cmd.Env = append(append(os.Environ(), n.sim.Env()...), env...)
	var ctl api.ControlPaths
	if n.mode == modeMuxd {
		c, err := n.client.Register(ctx, api.RegisterRequest{ID: name, Class: class, GPUs: []string{"0"}})
		if err != nil {
			return nil, fmt.Errorf("register %s with muxd: %w", name, err)
		}
		ctl = c.Control
		// What muxd's wiring mounts into a container: libxcuda, the container's control
		// block and the node's GPU signal page.
		p.cmd.Env = append(p.cmd.Env, "LD_PRELOAD="+n.art.XCuda, ctlblock.EnvDir+"="+ctl.Dir, ctlblock.EnvSignal+"="+n.signal)
	}
	w := lockedWriter{&p.mu, &p.out}
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = p.cmd.Wait(); p.ended = time.Now(); close(p.done) }()
	if n.mode == modeMuxd {
		if _, err := n.client.Start(ctx, name, p.cmd.Process.Pid); err != nil {
			p.kill()
			return nil, fmt.Errorf("report %s's pid to muxd: %w", name, err)
		}
	}
	return p, nil
}

// kill ends the process at once and waits for it.
func (p *proc) kill() {
	if p.running() {
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

// wait waits for the process to exit, killing it after limit.
func (p *proc) wait(ctx context.Context, limit time.Duration) error {
	select {
	case <-p.done:
		return nil
	case <-time.After(limit):
		p.kill()
		return fmt.Errorf("%s did not finish within %v (killed): %w", p.name, limit, errFellBehind)
	case <-ctx.Done():
		p.kill()
		return ctx.Err()
	}
}

// errFellBehind: a program was still running long after its schedule should have ended
// (an online service that could not keep up drains its backlog for ever).
var errFellBehind = errors.New("it fell behind its schedule")

// signalled reports whether the process was ended by a signal (an eviction, when the
// harness did not send it).
func (p *proc) signalled() bool {
	if p.cmd.ProcessState == nil {
		return false
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

// waitLaunching waits until the process has launched kernels on GPU 0, so that a shared
// run measures the online service against offline work that is already going.
func (n *node) waitLaunching(ctx context.Context, p *proc, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		st, ok, err := n.sim.Process(ctx, 0, p.cmd.Process.Pid)
		if err == nil && ok && st.Launches > 0 {
			return nil
		}
		if !p.running() {
			return fmt.Errorf("%s exited before launching work: %s", p.name, lastLine(p.output()))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s launched nothing within %v", p.name, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// onlineSettle is how long the online service runs alone before the offline jobs join:
// muxd measures its kernels' width and sizes the offline MPS budget within a few periods
// (waitOnlineSeen returns as soon as it has); every strategy waits the same way.
const onlineSettle = 3 * time.Second

// waitOnlineSeen waits until muxd has seen the online service's kernels on GPU 0 (their
// width, which sizes the MPS percentage the offline contexts are created with), or
// onlineSettle; without muxd, a few periods' worth.
func (n *node) waitOnlineSeen(ctx context.Context) error {
	if n.mode != modeMuxd {
		return sleepCtx(ctx, 300*time.Millisecond)
	}
	deadline := time.Now().Add(onlineSettle)
	for time.Now().Before(deadline) {
		if g, err := n.client.GPUs(ctx); err == nil && len(g) > 0 && g[0].OnlineWidth > 0 {
			return nil
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	n.log.Warn("muxd saw no online kernel width before the offline jobs started: they get the default MPS percentage")
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func lastLine(s string) string {
	b := bytes.TrimSpace([]byte(s))
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	if len(b) > 300 {
		b = b[:300]
	}
	return string(b)
}

// allocSection is the [alloc] body for muxd in the given strategy.
func allocSection(s *Scenario, static bool) string {
	m := s.Muxflow
	mode := "dynamic"
	if static {
		mode = "static"
	}
	// A day too short for muxd to learn (its policy refuses it) is given as a real one:
	// within the run the allocator then forecasts nothing.
	day := s.DayLength()
	if day < policy.MinDayLength(m.Period.D()) {
		day = 24 * time.Hour
	}
	text := fmt.Sprintf("mode = %q\nperiod = %q\nday_length = %q\n", mode, m.Period.D().String(), day.String())
	if m.Headroom != nil {
		text += percentLine("headroom", *m.Headroom)
	}
	if m.GiveBack != nil {
		text += percentLine("give_back", *m.GiveBack)
	}
	if m.StaticShare != nil {
		text += percentLine("static_share", *m.StaticShare)
	}
	if m.Fit != nil {
		text += fmt.Sprintf("fit = %t\n", *m.Fit)
	}
	if m.FitMin != nil {
		text += percentLine("fit_min", *m.FitMin)
	}
	if m.Confine != nil {
		text += percentLine("confine", *m.Confine)
	}
	return text
}

// policySections is the policy text beyond [alloc]: muxd stops evicted work by pid (no
// containerd), and what a scenario's [muxflow] keys set.
func policySections(s *Scenario) string {
	m := s.Muxflow
	dur := func(key string, d policy.Duration) string { return key + " = " + strconv.Quote(d.D().String()) + "\n" }
	sections := "[evict]\ncontainerd_address = \"\"\n"
	if m.KernelRisk != nil {
		sections += dur("kernel_risk", *m.KernelRisk)
	}
	if m.OfflineSMMax != nil {
		sections += "[classes.offline]\n" + percentLine("sm_max", *m.OfflineSMMax)
	}
	hold := ""
	if m.HoldQueue != nil {
		hold += dur("queue", *m.HoldQueue)
	}
	if m.HoldLinger != nil {
		hold += dur("linger", *m.HoldLinger)
	}
	if m.HoldPeriod != nil {
		hold += dur("period", *m.HoldPeriod)
	}
	if m.HoldMax != nil {
		hold += percentLine("max", *m.HoldMax)
	}
	if hold != "" {
		sections += "[hold]\n" + hold
	}
	return sections
}

// percentLine is one policy line `key = "N%"`.
func percentLine(key string, p policy.Percent) string {
	b, _ := p.MarshalText()
	return key + " = " + strconv.Quote(string(b)) + "\n"
}
