package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/muxflow/muxflow/gpusim/simclient"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/client"
)

// muxdPolicy is the node policy for the overhead runs: the default policy (10 Hz
// sampling, default allocator period) with private paths and no containerd.
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
[evict]
containerd_address = ""
`

// muxdRun is one muxd (with its own gpusimd) under measurement.
type muxdRun struct {
	sim    *simclient.Daemon
	cmd    *exec.Cmd
	done   chan struct{}
	client *client.Client
	sleep  *exec.Cmd
	dir    string
}

func startMuxd(ctx context.Context, muxdBin, gpus string) (*muxdRun, error) {
	sim, err := simclient.Start(ctx, simclient.Options{GPUs: gpus, Stderr: io.Discard, Args: []string{"-log-level", "warn"}})
	if err != nil {
		return nil, fmt.Errorf("start gpusimd: %w", err)
	}
	r := &muxdRun{sim: sim, dir: sim.Dir}
	run := filepath.Join(sim.Dir, "muxd")
	sock := filepath.Join(run, "muxd.sock")
	pol := filepath.Join(sim.Dir, "policy.toml")
	text := fmt.Sprintf(muxdPolicy, filepath.Join(sim.Dir, "state"), run, sock, sim.Artifacts.MPSControl, sim.MPSPipeDir(), sim.MPSLogDir())
	if err := os.WriteFile(pol, []byte(text), 0o644); err != nil {
		r.stop()
		return nil, err
	}
	logf, err := os.Create(filepath.Join(os.TempDir(), "muxbench-muxd.log"))
	if err != nil {
		r.stop()
		return nil, err
	}
	r.cmd = exec.Command(muxdBin, "--policy", pol, "--gpus", "gpusim:"+sim.Socket)
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	if err := r.cmd.Start(); err != nil {
		logf.Close()
		r.stop()
		return nil, err
	}
	r.done = make(chan struct{})
	go func() { _ = r.cmd.Wait(); logf.Close(); close(r.done) }()
	r.client = client.New(sock, 60*time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := r.client.Node(ctx)
		if err == nil && info.MPS.State == "running" {
			break
		}
		select {
		case <-r.done:
			r.stop()
			return nil, fmt.Errorf("muxd exited during start-up (see %s)", logf.Name())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			r.stop()
			return nil, fmt.Errorf("muxd not ready: %v", err)
		}
	}
	// One long-lived process stands in for every container's init process.
	r.sleep = exec.Command("sleep", "100000")
	if err := r.sleep.Start(); err != nil {
		r.stop()
		return nil, err
	}
	return r, nil
}

// addContainers registers and starts n containers spread over gpus GPUs; online ones
// first (one per GPU), the rest offline.
func (r *muxdRun) addContainers(ctx context.Context, from, n, gpus int) error {
	for i := from; i < from+n; i++ {
		class := api.Offline
		if i < gpus {
			class = api.Online
		}
		id := fmt.Sprintf("bench-%d", i)
		if _, err := r.client.Register(ctx, api.RegisterRequest{ID: id, Class: class, GPUs: []string{strconv.Itoa(i % gpus)}}); err != nil {
			return fmt.Errorf("register %s: %w", id, err)
		}
		if _, err := r.client.Start(ctx, id, r.sleep.Process.Pid); err != nil {
			return fmt.Errorf("start %s: %w", id, err)
		}
	}
	return nil
}

func (r *muxdRun) stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.done:
		case <-time.After(5 * time.Second):
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	}
	if r.sleep != nil && r.sleep.Process != nil {
		_ = r.sleep.Process.Kill()
		_ = r.sleep.Wait()
	}
	r.sim.Stop()
}

// cpuTicks is utime+stime of pid in clock ticks.
func cpuTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st, nil
}

// rssMiB is pid's resident set.
func rssMiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

const clkTck = 100 // sysconf(_SC_CLK_TCK) on Linux

// cpuPercent measures the CPU share of each pid over the same window.
func cpuPercent(window time.Duration, pids ...int) ([]float64, error) {
	before := make([]int64, len(pids))
	for i, p := range pids {
		t, err := cpuTicks(p)
		if err != nil {
			return nil, err
		}
		before[i] = t
	}
	start := time.Now()
	time.Sleep(window)
	el := time.Since(start).Seconds()
	out := make([]float64, len(pids))
	for i, p := range pids {
		t, err := cpuTicks(p)
		if err != nil {
			return nil, err
		}
		out[i] = float64(t-before[i]) / clkTck / el * 100
	}
	return out, nil
}
