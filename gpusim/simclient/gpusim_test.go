package simclient_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/muxflow/muxflow/gpusim/simclient"
)

// These tests run the real programs: gpusimd, the fake libcuda under the C
// workloads, and the fake MPS control tool. Timing assertions compare runs
// inside one test and allow wide tolerances: the build machine is shared.

func start(t *testing.T, o simclient.Options) *simclient.Daemon {
	t.Helper()
	if _, err := simclient.Paths(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, err := simclient.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}

func startMPS(t *testing.T, d *simclient.Daemon) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := d.StartMPS(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.StopMPS)
}

type proc struct {
	cmd *exec.Cmd
	out *strings.Builder
	err *strings.Builder
}

func spawn(t *testing.T, d *simclient.Daemon, env []string, bin string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append(os.Environ(), d.Env()...), env...)
	p := &proc{cmd: cmd, out: &strings.Builder{}, err: &strings.Builder{}}
	cmd.Stdout, cmd.Stderr = p.out, p.err
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return p
}

// wait returns the program's JSON result and exit status.
func (p *proc) wait(t *testing.T) (map[string]any, int) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Fatalf("%s did not finish; stderr: %s", p.cmd.Path, p.err)
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", p.cmd.Path, err)
	}
	var m map[string]any
	line := strings.TrimSpace(p.out.String())
	if i := strings.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("%s printed no JSON (exit %d): stdout %q stderr %q", filepath.Base(p.cmd.Path), code, p.out, p.err)
	}
	return m, code
}

// waitLaunches waits until p has launched kernels.
func waitLaunches(t *testing.T, d *simclient.Daemon, p *proc) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if ps, ok, _ := d.Process(context.Background(), 0, p.cmd.Process.Pid); ok && ps.Launches > 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never launched a kernel; stderr: %s", p.cmd.Path, p.err)
}

func run(t *testing.T, d *simclient.Daemon, env []string, bin string, args ...string) (map[string]any, int) {
	t.Helper()
	return spawn(t, d, env, bin, args...).wait(t)
}

func num(t *testing.T, m map[string]any, k string) float64 {
	t.Helper()
	v, ok := m[k].(float64)
	if !ok {
		t.Fatalf("result %v has no number %q", m, k)
	}
	return v
}

// a training step of 4 GPU-filling kernels of 2 waves x 2ms: 16ms nominal
var bigTrain = []string{"--kernels", "4", "--big-share", "1", "--kernel-us", "2000", "--mem", "64M"}

func TestAPIProbe(t *testing.T) {
	runProbe(t, start(t, simclient.Options{}), "apiprobe")
}

// runProbe runs one of the fake driver's C probes (gpusim/tests/*.c) against d: each of
// its FAIL lines is an error, and it must reach its "failures 0" summary.
func runProbe(t *testing.T, d *simclient.Daemon, name string) {
	t.Helper()
	b, err := simclient.Build()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(b, "gpusim", "test", name))
	cmd.Env = append(os.Environ(), d.Env()...)
	out, err := cmd.CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "FAIL") {
			t.Error(l)
		}
	}
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	if !strings.Contains(string(out), "failures 0") {
		t.Fatalf("%s did not finish: %s", name, out)
	}
}

func TestBadInputIsRefused(t *testing.T) {
	d := start(t, simclient.Options{})
	a := d.Artifacts
	for _, args := range [][]string{
		{"--kernels", "0"}, {"--big-share", "2"}, {"--mem", "lots"}, {"--nonsense", "1"},
	} {
		cmd := exec.Command(a.Train, args...)
		cmd.Env = append(os.Environ(), d.Env()...)
		if err := cmd.Run(); err == nil {
			t.Errorf("train %v succeeded, want a usage error", args)
		}
	}
	for _, rate := range []string{"constant:-1", "diurnal:5:1:10", "csv:/does/not/exist", "sine:3"} {
		cmd := exec.Command(a.Infer, "--rate", rate, "--duration", "0.1")
		cmd.Env = append(os.Environ(), d.Env()...)
		if err := cmd.Run(); err == nil {
			t.Errorf("infer --rate %s succeeded, want a usage error", rate)
		}
	}
	ctx := context.Background()
	if err := d.InjectFault(ctx, simclient.Fault{Device: 7, Xid: 13}); err == nil {
		t.Error("fault on a missing device accepted")
	}
	if err := d.InjectFault(ctx, simclient.Fault{Device: 0, Xid: -1}); err == nil {
		t.Error("negative Xid accepted")
	}
	if err := d.SetPowerLimit(ctx, 0, 1); err == nil {
		t.Error("1 W power limit accepted")
	}
}

func TestSharingAndCaps(t *testing.T) {
	d := start(t, simclient.Options{GPUs: "h100"})
	a := d.Artifacts
	// step times are GPU times between events; the fastest step is the one
	// no host-side delay (a descheduled launcher) stretched
	alone, _ := run(t, d, nil, a.Train, append([]string{"--iters", "15"}, bigTrain...)...)
	stepAlone := num(t, alone, "gpu_ms_min")
	// host-side launch gaps inside a step can only add
	if stepAlone < 15.9 || stepAlone > 18 {
		t.Errorf("alone: %.2f ms per step, want 16ms nominal", stepAlone)
	}

	startMPS(t, d)
	p1 := spawn(t, d, nil, a.Train, append([]string{"--duration", "1"}, bigTrain...)...)
	p2 := spawn(t, d, nil, a.Train, append([]string{"--duration", "1"}, bigTrain...)...)
	m1, _ := p1.wait(t)
	m2, _ := p2.wait(t)
	for i, m := range []map[string]any{m1, m2} {
		// the two overlap for most, not all, of their run
		ratio := stepAlone / num(t, m, "gpu_ms_p50")
		t.Logf("MPS client %d: %.2f of solo speed (solo step %.2fms)", i, ratio, stepAlone)
		if ratio < 0.45 || ratio > 0.65 {
			t.Errorf("MPS client %d with an equal neighbour ran at %.2f of its solo speed, want about 0.5", i, ratio)
		}
	}

	capped, _ := run(t, d, []string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30"}, a.Train,
		append([]string{"--iters", "6"}, bigTrain...)...)
	ratio := stepAlone / num(t, capped, "gpu_ms_min")
	t.Logf("30%% active threads alone: %.3f of full speed (want %.3f)", ratio, 40.0/132)
	if want := 40.0 / 132; math.Abs(ratio-want) > 0.1*want {
		t.Errorf("alone at 30%% active threads: %.2f of full speed, want about %.2f", ratio, want)
	}
}

func TestTimeSlicingInflatesLatency(t *testing.T) {
	const slice = 10 * time.Millisecond
	d := start(t, simclient.Options{TimeSlice: slice})
	a := d.Artifacts
	// one kernel per request: a second kernel sent after the first finished
	// (a slow host thread) would find the slice handed back and wait anew
	inferArgs := []string{"--rate", "constant:40", "--duration", "1.5", "--kernels", "1", "--kernel-us", "1000", "--io-bytes", "0"}
	alone, _ := run(t, d, nil, a.Infer, inferArgs...)
	// 100ms kernels: the neighbour keeps the GPU busy even when this loaded
	// machine delays its host thread
	tr := spawn(t, d, nil, a.Train, "--duration", "4.5", "--kernels", "1", "--big-share", "1", "--kernel-us", "50000", "--mem", "0")
	waitLaunches(t, d, tr)
	shared, _ := run(t, d, nil, a.Infer, inferArgs...)
	// with GPUSIM_PRIORITY=high the request preempts the neighbour at once
	high, _ := run(t, d, []string{"GPUSIM_PRIORITY=high"}, a.Infer, inferArgs...)
	tr.wait(t)
	if g := num(t, high, "gpu_p50_ms") - num(t, alone, "gpu_p50_ms"); g > 0.15*float64(slice.Milliseconds()) {
		t.Errorf("a high-priority client beside a busy neighbour waited %.1fms more, want almost nothing", g)
	}
	// GPU-side request time: no host-side noise; a request arriving while
	// the neighbour holds the GPU waits for the rest of its slice
	grow := num(t, shared, "gpu_p50_ms") - num(t, alone, "gpu_p50_ms")
	sliceMs := float64(slice.Milliseconds())
	t.Logf("time slicing: median GPU-side request time %.2fms alone, %.2fms beside a busy neighbour (slice %v); wall p50 %.2f -> %.2f ms",
		num(t, alone, "gpu_p50_ms"), num(t, shared, "gpu_p50_ms"), slice, num(t, alone, "p50_ms"), num(t, shared, "p50_ms"))
	if grow < 0.25*sliceMs || grow > 1.1*sliceMs {
		t.Errorf("without MPS a busy neighbour raised median GPU latency by %.1fms, want roughly a %v slice (0.25-1.1x)", grow, slice)
	}
	// the start event is recorded just before the kernels are sent, so
	// host-side launch gaps add a little
	if g := num(t, alone, "gpu_p50_ms"); g < 0.99 || g > 1.5 {
		t.Errorf("alone a request took %.2fms on the GPU, want 1ms plus launch gaps", g)
	}
}

func TestOutOfMemory(t *testing.T) {
	d := start(t, simclient.Options{GPUs: "t4"})
	a := d.Artifacts
	m, code := run(t, d, nil, a.Train, "--iters", "1", "--mem", "20G")
	if code != 3 || m["first_error"] != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("20G on a 16GB T4: exit %d, result %v; want exit 3 with CUDA_ERROR_OUT_OF_MEMORY", code, m)
	}
	m, code = run(t, d, nil, a.Train, "--iters", "1", "--mem", "14G")
	if code != 0 {
		t.Errorf("14G on a 16GB T4 failed: %v", m)
	}
	// an MPS pinned memory limit is per client
	startMPS(t, d)
	lim := []string{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1G"}
	if m, code := run(t, d, lim, a.Train, "--iters", "1", "--mem", "2G"); code != 3 || m["first_error"] != "CUDA_ERROR_OUT_OF_MEMORY" {
		t.Errorf("2G under a 1G MPS limit: exit %d, %v; want out of memory", code, m)
	}
	if m, code := run(t, d, lim, a.Train, "--iters", "1", "--mem", "512M"); code != 0 {
		t.Errorf("512M under a 1G MPS limit failed: %v", m)
	}
}

func TestDirtyExitFaultsMPSNeighbours(t *testing.T) {
	for _, mps := range []bool{true, false} {
		t.Run(fmt.Sprintf("mps=%v", mps), func(t *testing.T) {
			d := start(t, simclient.Options{})
			a := d.Artifacts
			if mps {
				startMPS(t, d)
			}
			// long enough to outlive the neighbour's start on a loaded machine
			// (under MPS it ends at the fault)
			online := spawn(t, d, nil, a.Infer, "--rate", "constant:100", "--duration", "4", "--io-bytes", "0")
			waitLaunches(t, d, online)
			// one 0.5s kernel: whenever it is killed, it has a kernel in flight
			offline := spawn(t, d, nil, a.Train, "--iters", "1", "--kernels", "1", "--big-share", "1", "--kernel-us", "500000", "--mem", "0")
			waitLaunches(t, d, offline)
			if _, ok, _ := d.Process(context.Background(), 0, online.cmd.Process.Pid); !ok {
				t.Fatal("the online client ended before its neighbour was killed: nothing was tested")
			}
			_ = offline.cmd.Process.Signal(syscall.SIGKILL) // dies with kernels in flight
			_ = offline.cmd.Wait()
			m, code := online.wait(t)
			if mps {
				if code != 3 || m["first_error"] != "CUDA_ERROR_LAUNCH_FAILED" {
					t.Errorf("under MPS the online client ended with exit %d, %v; want CUDA_ERROR_LAUNCH_FAILED", code, m)
				}
				x, err := d.Xids(context.Background(), 0, 0)
				if err != nil || len(x) == 0 || x[0].Xid != 43 {
					t.Errorf("Xids after the fault = %v, %v; want an Xid 43", x, err)
				}
				// once every client has gone the server takes new ones
				if m, code := run(t, d, nil, a.Train, "--iters", "2", "--mem", "0"); code != 0 {
					t.Errorf("a new client after the fault cleared: %v", m)
				}
			} else if code != 0 || num(t, m, "errors") != 0 {
				t.Errorf("without MPS the online client saw %v (exit %d); want no errors", m, code)
			}
		})
	}
}

func TestInjectedFaultAndHang(t *testing.T) {
	d := start(t, simclient.Options{})
	a := d.Artifacts
	ctx := context.Background()
	tr := spawn(t, d, nil, a.Train, append([]string{"--duration", "30"}, bigTrain...)...)
	waitLaunches(t, d, tr)
	if err := d.SetHung(ctx, 0, true); err != nil {
		t.Fatal(err)
	}
	st, err := d.Stats(ctx)
	if err != nil || !st[0].Hung {
		t.Fatalf("stats after hang: %v, %v", st, err)
	}
	before := st[0].SMNs
	time.Sleep(100 * time.Millisecond)
	if err := d.SetHung(ctx, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := d.InjectFault(ctx, simclient.Fault{Device: 0, Xid: 31, PID: tr.cmd.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	m, code := tr.wait(t)
	if code != 3 || m["first_error"] != "CUDA_ERROR_ILLEGAL_ADDRESS" {
		t.Errorf("after an injected Xid 31 train ended with exit %d, %v; want CUDA_ERROR_ILLEGAL_ADDRESS", code, m)
	}
	if before <= 0 {
		t.Errorf("no SM time accumulated before the hang")
	}
	x, _ := d.Xids(ctx, 0, 0)
	var codes []int
	for _, e := range x {
		codes = append(codes, e.Xid)
	}
	if diff := cmp.Diff([]int{43, 31}, codes); diff != "" {
		t.Errorf("Xid log (-want +got):\n%s", diff)
	}
}

func TestStatsAgreeWithWhatRan(t *testing.T) {
	d := start(t, simclient.Options{Window: 500 * time.Millisecond})
	a := d.Artifacts
	ctx := context.Background()
	// 10 iterations x 4 GPU-filling kernels of 4ms: 160ms busy, all SMs
	run(t, d, nil, a.Train, append([]string{"--iters", "10"}, bigTrain...)...)
	st, err := d.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	busy := st[0].BusyNs / 1e6
	if math.Abs(busy-160) > 0.1*160 {
		t.Errorf("busy time %.1fms, want 160ms", busy)
	}
	// every SM holds blocks, but not to the last moment of each wave (the
	// blocks of some SMs finish a little earlier)
	if act := st[0].SMNs / st[0].BusyNs / float64(st[0].SMs); act < 0.85 || act > 1 {
		t.Errorf("SM activity while busy %.2f, want 0.85-1 for GPU-filling kernels", act)
	}
	// small kernels: NVML utilisation counts the time, DCGM SM activity the SMs
	p := spawn(t, d, nil, a.Train, "--duration", "2.5", "--kernels", "4", "--big-share", "0", "--small-grid", "33", "--kernel-us", "1000", "--mem", "256M")
	// wait until it runs, then let a whole window pass
	waitLaunches(t, d, p)
	time.Sleep(700 * time.Millisecond)
	st, err = d.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ps *simclient.ProcessStats
	for i := range st[0].Processes {
		if st[0].Processes[i].PID == p.cmd.Process.Pid {
			ps = &st[0].Processes[i]
		}
	}
	p.wait(t)
	if ps == nil {
		t.Fatalf("running process %d missing from %+v", p.cmd.Process.Pid, st[0].Processes)
	}
	if ps.MemUsed != 256<<20 || st[0].MemUsed < 256<<20 {
		t.Errorf("memory: process %d, device %d; want 256MiB", ps.MemUsed, st[0].MemUsed)
	}
	// each kernel ran alone for 1ms: the process's busy time is its launches,
	// less the (at most 4) of the current step not finished yet
	if got, want := ps.BusyNs/1e6, float64(ps.Launches); got > want+0.01 || got < want-4.01 {
		t.Errorf("process busy %.2fms after %d one-millisecond kernels", got, ps.Launches)
	}
	if st[0].Util < 30 || math.Abs(st[0].Util-ps.Util) > 1 {
		t.Errorf("NVML utilisation device %.0f%% process %.0f%%, want equal and well above 0", st[0].Util, ps.Util)
	}
	// SM activity is utilisation scaled by the share of SMs the kernels held
	// (33 blocks: one on each of 33 SMs; a little less in the tail of each
	// kernel, when the faster SMs have finished)
	if want, got := 33.0/132, st[0].SMActivity/(st[0].Util/100); got < want-0.04 || got > want+0.01 {
		t.Errorf("SM activity %.3f at %.0f%% utilisation, want %.2f of it (33 of 132 SMs)", st[0].SMActivity, st[0].Util, want)
	}
}

func TestMPSControlCommands(t *testing.T) {
	d := start(t, simclient.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := d.MPSCommand(ctx, "get_server_list"); err == nil {
		t.Error("command mode without a daemon succeeded")
	}
	startMPS(t, d)
	if err := d.StartMPS(ctx); err == nil {
		t.Error("a second daemon started on the same pipe directory")
	}
	tests := []struct{ cmd, want string }{
		{"get_default_active_thread_percentage", "100.0\n"},
		{"set_default_active_thread_percentage 40", "40.0\n"},
		{"get_default_active_thread_percentage", "40.0\n"},
		{"set_default_active_thread_percentage 0", "40.0\n"},
		{"set_default_active_thread_percentage 140", "40.0\n"},
		{"set_default_device_pinned_mem_limit 0 2G", ""},
		{"get_default_device_pinned_mem_limit 0", "2G\n"},
		{"get_server_list", ""},
		{"no_such_command", "Unknown command \"no_such_command\"\n"},
	}
	for _, tc := range tests {
		got, err := d.MPSCommand(ctx, tc.cmd)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.cmd, got, tc.want)
		}
	}
	// a client makes the daemon start a server, which takes the defaults
	p := spawn(t, d, nil, d.Artifacts.Train, append([]string{"--duration", "2"}, bigTrain...)...)
	var server string
	for i := 0; i < 100 && server == ""; i++ {
		time.Sleep(30 * time.Millisecond)
		out, _ := d.MPSCommand(ctx, "get_server_list")
		server = strings.TrimSpace(out)
	}
	if server == "" {
		t.Fatal("no MPS server appeared for the client")
	}
	clients, _ := d.MPSCommand(ctx, "get_client_list "+server)
	if want := fmt.Sprintf("%d\n", p.cmd.Process.Pid); clients != want {
		t.Errorf("get_client_list: got %q, want %q", clients, want)
	}
	for cmd, want := range map[string]string{
		"get_active_thread_percentage " + server: "40.0\n",
		"get_server_status " + server:            "ACTIVE\n",
	} {
		if got, _ := d.MPSCommand(ctx, cmd); got != want {
			t.Errorf("%s: got %q, want %q", cmd, got, want)
		}
	}
	servers, err := d.MPSServers(ctx)
	if err != nil || len(servers) != 1 || servers[0].ATP != 40 {
		t.Errorf("gpusimd's view of the servers: %+v, %v", servers, err)
	}
	p.wait(t)
	if out, err := d.MPSCommand(ctx, "quit"); err != nil || out != "" {
		t.Errorf("quit: %q, %v", out, err)
	}
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(filepath.Join(d.MPSPipeDir(), "control")); err != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Error("control socket still there after quit")
}

func TestMPSLogs(t *testing.T) {
	d := start(t, simclient.Options{})
	startMPS(t, d)
	run(t, d, nil, d.Artifacts.Train, "--iters", "1", "--mem", "0")
	d.StopMPS()
	f, err := os.Open(filepath.Join(d.MPSLogDir(), "control.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var saw bool
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		saw = saw || strings.Contains(sc.Text(), "Starting new server")
	}
	if !saw {
		t.Error("control.log does not record the server start")
	}
}

func TestWorkloadModes(t *testing.T) {
	d := start(t, simclient.Options{})
	a := d.Artifacts
	for _, mode := range [][]string{{}, {"--graph"}, {"--dlsym"}, {"--graph", "--dlsym"}} {
		m, code := run(t, d, nil, a.Train, append(append([]string{"--iters", "5"}, mode...), bigTrain...)...)
		if code != 0 || num(t, m, "iterations") != 5 || m["graph"] != (len(mode) > 0 && mode[0] == "--graph") {
			t.Errorf("train %v: exit %d, %v", mode, code, m)
		}
	}
	// a CSV rate trace: 50 QPS for half a second, then 200 QPS
	csv := filepath.Join(t.TempDir(), "rate.csv")
	if err := os.WriteFile(csv, []byte("seconds,qps\n0,50\n0.5,200\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, code := run(t, d, nil, a.Infer, "--rate", "csv:"+csv, "--duration", "1", "--uniform", "--io-bytes", "0", "--dlsym")
	if n := num(t, m, "requests"); code != 0 || n < 115 || n > 135 {
		t.Errorf("CSV trace: exit %d, %v; want about 125 requests", code, m)
	}
	m, code = run(t, d, nil, a.Infer, "--rate", "bursty:0:400:100:500", "--duration", "1", "--uniform", "--io-bytes", "0")
	if n := num(t, m, "requests"); code != 0 || n < 70 || n > 90 {
		t.Errorf("bursty trace: exit %d, %v; want about 80 requests", code, m)
	}
}

func TestMPSTerminateClientAndServerDeath(t *testing.T) {
	d := start(t, simclient.Options{})
	startMPS(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := d.Artifacts
	long := append([]string{"--duration", "20"}, bigTrain...)

	victim := spawn(t, d, nil, a.Train, long...)
	bystander := spawn(t, d, nil, a.Train, long...)
	waitLaunches(t, d, victim)
	waitLaunches(t, d, bystander)
	out, _ := d.MPSCommand(ctx, "get_server_list")
	server := strings.TrimSpace(out)
	if out, err := d.MPSCommand(ctx, fmt.Sprintf("terminate_client %s %d", server, victim.cmd.Process.Pid)); err != nil || out != "" {
		t.Fatalf("terminate_client: %q, %v", out, err)
	}
	if m, code := victim.wait(t); code != 3 || m["first_error"] != "CUDA_ERROR_MPS_CLIENT_TERMINATED" {
		t.Errorf("terminated client: exit %d, %v", code, m)
	}
	if out, _ := d.MPSCommand(ctx, "terminate_client "+server+" 1"); !strings.Contains(out, "no client 1") {
		t.Errorf("terminating a non-client answered %q", out)
	}
	// the bystander is unharmed until its server dies under it
	if ps, ok, _ := d.Process(ctx, 0, bystander.cmd.Process.Pid); !ok || ps.Launches == 0 {
		t.Fatalf("bystander gone after terminate_client: %+v %v", ps, ok)
	}
	var pid int
	if _, err := fmt.Sscanf(server, "%d", &pid); err != nil {
		t.Fatalf("server pid %q: %v", server, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if m, code := bystander.wait(t); code != 3 || m["first_error"] != "CUDA_ERROR_MPS_RPC_FAILURE" {
		t.Errorf("client of a dead server: exit %d, %v", code, m)
	}
}

// infer's measured arrivals depend on its seed only, not on how long it warmed up:
// runs compared side by side see the same schedule.
func TestWarmUpDoesNotMoveTheSchedule(t *testing.T) {
	d := start(t, simclient.Options{})
	var schedules []string
	for _, warm := range []time.Duration{100 * time.Millisecond, 400 * time.Millisecond} {
		trace := filepath.Join(t.TempDir(), "trace.csv")
		p := spawn(t, d, nil, d.Artifacts.Infer, "--rate", "constant:200", "--duration", "0.3",
			"--io-bytes", "0", "--seed", "7", "--warmup", "--trace", trace)
		waitLaunches(t, d, p)
		time.Sleep(warm)
		if err := p.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		if _, code := p.wait(t); code != 0 {
			t.Fatalf("infer exit %d: %s", code, p.err)
		}
		b, err := os.ReadFile(trace)
		if err != nil {
			t.Fatal(err)
		}
		var starts []string
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n")[1:] {
			starts = append(starts, strings.SplitN(l, ",", 2)[0])
		}
		schedules = append(schedules, strings.Join(starts, " "))
	}
	if schedules[0] != schedules[1] || schedules[0] == "" {
		t.Errorf("measured arrivals after a 100 ms and a 400 ms warm-up differ:\n%s\n%s", schedules[0], schedules[1])
	}
}
