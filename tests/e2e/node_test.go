// Package e2e holds end-to-end tests of a whole muxflow node on gpusim: a real muxd
// (the built binary) supervising gpusim's fake MPS control daemon, watching gpusim's
// GPUs through the NVML adapter, and real workload processes running over the fake
// driver with libxcuda preloaded.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/muxflow/muxflow/gpusim/simclient"
	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/matcher/profile"
	"github.com/muxflow/muxflow/monitor"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/client"
	"github.com/muxflow/muxflow/tests/testenv"
)

// node is one simulated GPU node: gpusimd, muxd and the workloads registered with it.
type node struct {
	t      *testing.T
	dir    string
	policy string
	sim    *simclient.Daemon
	muxd   *exec.Cmd
	client *client.Client
	// signal: workloads map the node's GPU signal page, as the runtime mounts it
	// (online-aware gating); the tests written before it run without.
	signal bool
}

// fastPolicy shortens the monitor's and evictor's clocks so that tests run in seconds.
const fastPolicy = `
[monitor]
period = "100ms"
hysteresis = 2
throttled_max = %q
recovery = "2s"
[alloc]
period = "100ms"
%s
[evict]
grace = %q
backoff = "5s"
containerd_address = %q
%s
`

// nodeOptions vary the policy between tests.
type nodeOptions struct {
	alloc        string        // extra lines for [alloc]
	throttledMax time.Duration // 0: 30s
	grace        time.Duration // 0: 3s
	containerd   string        // containerd's socket; "": stop by pid
	evict        string        // extra lines for [evict]
}

// startNode starts gpusimd and muxd; alloc holds extra lines for the [alloc] section.
func startNode(t *testing.T, alloc string) *node {
	t.Helper()
	return startNodeWith(t, nodeOptions{alloc: alloc})
}

func startNodeWith(t *testing.T, o nodeOptions) *node {
	t.Helper()
	if o.throttledMax == 0 {
		o.throttledMax = 30 * time.Second
	}
	if o.grace == 0 {
		o.grace = 3 * time.Second
	}
	ctx := context.Background()
	sim, err := simclient.Start(ctx, simclient.Options{GPUs: "h100"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Stop)
	dir := t.TempDir()
	n := &node{t: t, dir: dir, sim: sim, policy: filepath.Join(dir, "policy.toml")}
	text := fmt.Sprintf(`[node]
state_dir = %q
run_dir = %q
socket = %q
[mps]
control = %q
pipe_dir = %q
log_dir = %q
`, filepath.Join(dir, "state"), filepath.Join(dir, "run"), filepath.Join(dir, "run", "muxd.sock"),
		sim.Artifacts.MPSControl, sim.MPSPipeDir(), sim.MPSLogDir()) +
		fmt.Sprintf(fastPolicy, o.throttledMax.String(), o.alloc, o.grace.String(), o.containerd, o.evict)
	if err := os.WriteFile(n.policy, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	n.client = client.New(filepath.Join(dir, "run", "muxd.sock"), 2*time.Second)
	n.startMuxd()
	n.waitFor("MPS running", 10*time.Second, func() bool {
		info, err := n.client.Node(ctx)
		return err == nil && info.MPS.State == "running"
	})
	return n
}

func (n *node) startMuxd() {
	n.t.Helper()
	bin := testenv.Artifact(n.t, "bin/muxd")
	log, err := os.OpenFile(filepath.Join(n.dir, "muxd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	cmd := exec.Command(bin, "--policy", n.policy, "--gpus", "gpusim:"+n.sim.Socket)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.muxd = cmd
	n.t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
		}
		log.Close()
		if n.t.Failed() {
			data, _ := os.ReadFile(filepath.Join(n.dir, "muxd.log"))
			n.t.Logf("muxd log:\n%s", tail(string(data), 40))
		}
	})
	n.waitFor("muxd ready", 10*time.Second, func() bool { _, err := n.client.Node(context.Background()); return err == nil })
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

func (n *node) waitFor(what string, within time.Duration, ok func() bool) {
	n.t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			n.t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// workload is a registered process running over gpusim with libxcuda preloaded.
type workload struct {
	id   string
	cmd  *exec.Cmd
	done chan struct{}
	out  *strings.Builder
	ctl  api.ControlPaths
}

// run registers a container-like workload, starts the program with libxcuda preloaded
// and its control block, and reports its pid, as muxflow-runtime and muxflow-hook do.
func (n *node) run(id string, class api.Class, prog string, args ...string) *workload {
	n.t.Helper()
	return n.runLimits(id, class, api.Limits{}, prog, args...)
}

// runLimits is run with the container's limits (its muxflow.io/* annotations).
func (n *node) runLimits(id string, class api.Class, limits api.Limits, prog string, args ...string) *workload {
	n.t.Helper()
	ctx := context.Background()
	c, err := n.client.Register(ctx, api.RegisterRequest{ID: id, Class: class, GPUs: []string{"0"}, Limits: limits})
	if err != nil {
		n.t.Fatalf("register %s: %v", id, err)
	}
	w := &workload{id: id, done: make(chan struct{}), out: &strings.Builder{}, ctl: c.Control}
	w.cmd = exec.Command(prog, args...)
	w.cmd.Env = append(os.Environ(), n.sim.Env()...)
	w.cmd.Env = append(w.cmd.Env, "LD_PRELOAD="+testenv.Artifact(n.t, "lib/libxcuda.so"),
		ctlblock.EnvDir+"="+c.Control.Dir)
	if n.signal {
		w.cmd.Env = append(w.cmd.Env, ctlblock.EnvSignal+"="+ctlblock.SignalPagePath(filepath.Join(n.dir, "run")))
	}
	w.cmd.Stdout = w.out
	w.cmd.Stderr = w.out
	if err := w.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	go func() { w.cmd.Wait(); close(w.done) }()
	n.t.Cleanup(func() { w.cmd.Process.Kill(); <-w.done })
	if _, err := n.client.Start(ctx, id, w.cmd.Process.Pid); err != nil {
		n.t.Fatalf("start %s: %v", id, err)
	}
	return w
}

func (w *workload) running() bool {
	select {
	case <-w.done:
		return false
	default:
		return true
	}
}

func (n *node) gpu() api.GPU {
	g, err := n.client.GPUs(context.Background())
	if err != nil || len(g) != 1 {
		n.t.Fatalf("gpus: %v %v", g, err)
	}
	return g[0]
}

func (n *node) share(w *workload) (float64, bool) {
	b, err := ctlblock.Open(w.ctl.Dir)
	if err != nil {
		return -1, false
	}
	defer b.Close()
	l := b.Limits()
	return float64(l.ShareBP) / 100, l.Paused
}

// loadGPU runs an unregistered training job on the GPU for secs seconds.
func (n *node) loadGPU(secs int) {
	cmd := exec.Command(n.sim.Artifacts.Train, "--duration", fmt.Sprint(secs))
	cmd.Env = append(os.Environ(), n.sim.Env()...)
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
}

func (n *node) infer(id string, secs int) *workload {
	return n.run(id, api.Online, n.sim.Artifacts.Infer, "--rate", "constant:200", "--duration", fmt.Sprint(secs))
}

func (n *node) train(id string, secs int) *workload {
	return n.run(id, api.Offline, n.sim.Artifacts.Train, "--duration", fmt.Sprint(secs), "--mem", "1G")
}

func TestPowerCapThrottlesOffline(t *testing.T) {
	n := startNode(t, "")
	ctx := context.Background()
	n.infer("svc", 60)
	tr := n.train("job", 60)
	n.waitFor("offline share allocated", 5*time.Second, func() bool { s, _ := n.share(tr); return s > 20 })
	// A power limit far below what the two draw: the SM clock falls with a power-cap
	// reason, the monitor calls the GPU throttled, and offline work is cut to its floor.
	if err := n.sim.SetPowerLimit(ctx, 0, 150); err != nil {
		t.Fatal(err)
	}
	n.waitFor("GPU throttled", 10*time.Second, func() bool { return n.gpu().Health == "throttled" })
	n.waitFor("offline cut to its floor", 2*time.Second, func() bool { s, _ := n.share(tr); return s <= 5 })
	var ev []monitor.Event
	err := n.client.Events(ctx, &ev)
	if err != nil || len(ev) == 0 || !strings.Contains(fmt.Sprint(ev[len(ev)-1].Reason), "clock") {
		t.Errorf("the transition is not explained by the clock: %+v %v", ev, err)
	}
	if !tr.running() {
		t.Error("a throttled GPU evicted its offline work; it should only cut it")
	}
}

func TestXidFaultEvictsOfflineKeepsOnline(t *testing.T) {
	n := startNode(t, "")
	ctx := context.Background()
	on := n.infer("svc", 60)
	tr := n.train("job", 60)
	n.waitFor("train running on the GPU", 5*time.Second, func() bool { s, _ := n.share(tr); return s > 20 })
	// An application-class Xid that fails nobody's context: whatever happens to the
	// offline process is muxd's doing.
	if err := n.sim.InjectFault(ctx, simclient.Fault{Device: 0, Xid: 13}); err != nil {
		t.Fatal(err)
	}
	n.waitFor("offline process evicted", 10*time.Second, func() bool { return !tr.running() })
	if ws, ok := tr.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("offline process ended with %v, want the SIGTERM of a graceful eviction (libxcuda drains, then honours it)", tr.cmd.ProcessState)
	}
	if _, err := n.client.Container(ctx, "svc"); err != nil {
		t.Errorf("online container lost its registration: %v", err)
	}
	if !on.running() {
		t.Errorf("online process died: %s", on.out.String())
	}
	var ev []monitor.Event
	n.client.Events(ctx, &ev)
	var kinds []string
	for _, e := range ev {
		kinds = append(kinds, string(e.Kind)+":"+string(e.To))
	}
	if !strings.Contains(strings.Join(kinds, " "), "faulted") {
		t.Errorf("no faulted transition in the events: %v", kinds)
	}
	// The GPU refuses new offline work while it recovers or backs off.
	_, err := n.client.Register(ctx, api.RegisterRequest{ID: "next", Class: api.Offline, GPUs: []string{"0"}})
	if err == nil || !strings.Contains(err.Error(), "not admitted") {
		t.Errorf("offline work admitted right after a fault: %v", err)
	}
}

func TestMPSControlDaemonRestarted(t *testing.T) {
	n := startNode(t, "")
	ctx := context.Background()
	info, _ := n.client.Node(ctx)
	if info.MPS.PID == 0 {
		t.Fatal("no MPS control daemon pid")
	}
	if err := syscall.Kill(info.MPS.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n.waitFor("MPS control daemon restarted", 2*time.Second, func() bool {
		i, err := n.client.Node(ctx)
		return err == nil && i.MPS.State == "running" && i.MPS.Restarts == 1 && i.MPS.PID != info.MPS.PID
	})
	t.Logf("MPS control daemon restarted %v after kill -9", time.Since(start).Round(time.Millisecond))
	if _, err := n.sim.MPSCommand(ctx, "get_server_list"); err != nil {
		t.Errorf("the restarted daemon does not answer: %v", err)
	}
}

func TestMuxdKill9LimitsStayEnforced(t *testing.T) {
	n := startNode(t, "mode = \"static\"\nstatic_share = \"30%\"")
	ctx := context.Background()
	tr := n.train("job", 60)
	n.waitFor("static share applied", 5*time.Second, func() bool { s, _ := n.share(tr); return s == 30 })
	n.muxd.Process.Signal(syscall.SIGKILL)
	n.muxd.Wait()
	// muxd is gone; libxcuda keeps applying the last limits from the control block.
	before, _, _ := n.sim.Process(ctx, 0, tr.cmd.Process.Pid)
	t0 := time.Now()
	time.Sleep(2 * time.Second)
	after, _, _ := n.sim.Process(ctx, 0, tr.cmd.Process.Pid)
	frac := (after.BusyNs - before.BusyNs) / float64(time.Since(t0).Nanoseconds())
	if frac > 0.40 || frac < 0.15 {
		t.Errorf("with muxd dead the offline job used %.0f%% of GPU time, want about 30%%", frac*100)
	}
	n.startMuxd()
	c, err := n.client.Container(ctx, "job")
	if err != nil || c.State != api.StateRunning || c.PID != tr.cmd.Process.Pid {
		t.Fatalf("restarted muxd lost the container: %+v %v", c, err)
	}
	if c.Usage == nil || c.Usage.SharePercent != 30 || c.Usage.Launches == 0 {
		t.Errorf("restarted muxd does not see the live control block: %+v", c.Usage)
	}
	if !tr.running() {
		t.Errorf("train died: %s", tr.out.String())
	}
}

// TestNodeReportForTheMatcher: muxd's GET /v1/node is what muxmatch reads — GPU reports
// with the online workload's profile and its offline pairing, and a co-location record
// with both solo profiles and the measured normalised throughputs.
func TestNodeReportForTheMatcher(t *testing.T) {
	n := startNode(t, "")
	ctx := context.Background()
	tr := n.train("job", 7)
	time.Sleep(3500 * time.Millisecond) // train alone: its solo baseline
	n.infer("svc", 12)
	n.waitFor("pairing reported", 5*time.Second, func() bool {
		r, err := n.client.NodeReport(ctx)
		return err == nil && len(r.GPUs) == 1 && r.GPUs[0].Online != nil && len(r.GPUs[0].Offline) == 1
	})
	<-tr.done
	n.client.Unregister(ctx, "job") // what the poststop hook does
	// infer alone for a while: its solo baseline, after which the record is made.
	n.waitFor("co-location record", 10*time.Second, func() bool {
		r, err := n.client.NodeReport(ctx)
		return err == nil && len(r.Colocations) == 1
	})
	r, _ := n.client.NodeReport(ctx)
	var mr profile.NodeReport
	data, _ := json.Marshal(r)
	if err := json.Unmarshal(data, &mr); err != nil {
		t.Fatal(err)
	}
	if err := mr.Validate(); err != nil {
		t.Errorf("the matcher rejects muxd's report: %v\n%s", err, data)
	}
	c := mr.Colocations[0]
	if c.A.Name != "svc" || c.B.Name != "job" || c.GPUType != "H100" || c.BNormTput <= 0 || c.BNormTput > 1.2 || c.ANormTput <= 0 {
		t.Errorf("record: %+v", c)
	}
	t.Logf("co-location: online %.2f, offline %.2f of solo speed; offline solo util %.0f%%", c.ANormTput, c.BNormTput, c.B.GPUUtil)
}

// TestMuxdRestartKeepsMPS: a restart of muxd (an upgrade, systemctl restart) must not take
// the MPS servers away from running GPU work.
func TestMuxdRestartKeepsMPS(t *testing.T) {
	n := startNode(t, "")
	ctx := context.Background()
	on := n.infer("svc", 4)
	time.Sleep(500 * time.Millisecond)
	n.muxd.Process.Signal(syscall.SIGTERM)
	n.muxd.Wait()
	if _, err := n.sim.MPSCommand(ctx, "get_server_list"); err != nil {
		t.Fatalf("the MPS control daemon stopped with muxd: %v", err)
	}
	n.startMuxd()
	n.waitFor("MPS adopted", 5*time.Second, func() bool {
		i, err := n.client.Node(ctx)
		return err == nil && i.MPS.State == "running" && i.MPS.Restarts == 0
	})
	<-on.done
	if !strings.Contains(on.out.String(), `"errors":0`) {
		t.Errorf("the online service saw errors across the muxd restart: %s", on.out.String())
	}
}

// TestStickyErrorSpreadThroughMPSIsHandled: a fault in the offline client of an MPS
// server spreads to the online client of the same server (MPS semantics). The online
// container's libxcuda reports the sticky error through its control block; muxd
// attributes it to the GPU, evicts the offline work and restarts the MPS server, which
// would otherwise refuse new clients — an application-class Xid alone never restarts it.
func TestStickyErrorSpreadThroughMPSIsHandled(t *testing.T) {
	n := startNode(t, "")
	ctx := context.Background()
	on := n.infer("svc", 30)
	tr := n.train("job", 30)
	n.waitFor("both running", 5*time.Second, func() bool {
		p, ok, _ := n.sim.Process(ctx, 0, tr.cmd.Process.Pid)
		q, ok2, _ := n.sim.Process(ctx, 0, on.cmd.Process.Pid)
		return ok && ok2 && p.Launches > 100 && q.Launches > 100
	})
	// A kernel fault in the offline job (Xid 31, MMU fault): under MPS every client of
	// its server loses its context.
	if err := n.sim.InjectFault(ctx, simclient.Fault{Device: 0, Xid: 31, PID: tr.cmd.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	n.waitFor("MPS restarted after the online client's error", 10*time.Second, func() bool {
		i, err := n.client.Node(ctx)
		return err == nil && i.MPS.Restarts >= 1 && i.MPS.State == "running"
	})
	<-on.done
	if !strings.Contains(on.out.String(), `"first_error":"CUDA_ERROR_`) {
		t.Errorf("the online process saw no error, so the test proves nothing: %s", on.out.String())
	}
	data, _ := os.ReadFile(filepath.Join(n.dir, "muxd.log"))
	if !strings.Contains(string(data), `"msg":"a container reports its GPU context died","part":"guard","id":"svc"`) {
		t.Errorf("muxd did not attribute the online container's error:\n%s", tail(string(data), 20))
	}
}
