// Package simclient is how Go programs and tests drive gpusim: start a
// gpusimd on a private socket, read per-device and per-process figures,
// inject faults, and find the built fake driver and workload programs.
//
// A typical test:
//
//	d, err := simclient.Start(ctx, simclient.Options{GPUs: "h100"})
//	defer d.Stop()
//	cmd := exec.Command(simclient.Must(simclient.Paths()).Train, "--iters", "10")
//	cmd.Env = append(os.Environ(), d.Env()...)
//	...
//	stats, err := d.Stats(ctx)
package simclient

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/muxflow/muxflow/gpusim/sim"
	"github.com/muxflow/muxflow/gpusim/simd"
)

// Re-exported model types, so users need not import gpusim/sim.
type (
	DeviceStats  = sim.DeviceStats
	ProcessStats = sim.ProcessStats
	Fault        = sim.Fault
	XidEvent     = sim.XidEvent
	ServerInfo   = sim.ServerInfo
)

// Client talks to a running gpusimd over its socket (JSON lines).
type Client struct {
	Socket string
}

// New returns a client for the gpusimd serving socket.
func New(socket string) *Client { return &Client{Socket: socket} }

func (c *Client) do(ctx context.Context, q simd.Request) (*simd.Response, error) {
	var dl net.Dialer
	conn, err := dl.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		return nil, fmt.Errorf("reach gpusimd at %s: %w", c.Socket, err)
	}
	defer conn.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	if err := json.NewEncoder(conn).Encode(q); err != nil {
		return nil, fmt.Errorf("send %s to gpusimd: %w", q.Op, err)
	}
	var r simd.Response
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&r); err != nil {
		return nil, fmt.Errorf("read gpusimd's answer to %s: %w", q.Op, err)
	}
	if r.Error != "" {
		return &r, fmt.Errorf("gpusimd %s: %s", q.Op, r.Error)
	}
	return &r, nil
}

// Ping returns the number of simulated devices.
func (c *Client) Ping(ctx context.Context) (int, error) {
	r, err := c.do(ctx, simd.Request{Op: "ping"})
	if err != nil {
		return 0, err
	}
	return r.Count, nil
}

// Stats returns every device's figures (utilisation averaged over the
// daemon's window; cumulative busy and SM time; per-process figures).
func (c *Client) Stats(ctx context.Context) ([]DeviceStats, error) {
	r, err := c.do(ctx, simd.Request{Op: "stats"})
	if err != nil {
		return nil, err
	}
	return r.Devices, nil
}

// Process returns pid's figures on device dev, or false if it has none.
func (c *Client) Process(ctx context.Context, dev, pid int) (ProcessStats, bool, error) {
	st, err := c.Stats(ctx)
	if err != nil {
		return ProcessStats{}, false, err
	}
	if dev < 0 || dev >= len(st) {
		return ProcessStats{}, false, fmt.Errorf("device %d does not exist", dev)
	}
	for _, p := range st[dev].Processes {
		if p.PID == pid {
			return p, true, nil
		}
	}
	return ProcessStats{}, false, nil
}

// InjectFault records an Xid and fails contexts (see sim.Sim.InjectFault).
func (c *Client) InjectFault(ctx context.Context, f Fault) error {
	_, err := c.do(ctx, simd.Request{Op: "fault", Fault: &f})
	return err
}

// SetHung freezes or thaws a device.
func (c *Client) SetHung(ctx context.Context, dev int, hung bool) error {
	_, err := c.do(ctx, simd.Request{Op: "hang", Device: dev, Hung: hung})
	return err
}

// ResetDevice resets a device (nvidia-smi -r): contexts still on it fail,
// and it comes back thawed and not lost.
func (c *Client) ResetDevice(ctx context.Context, dev int) error {
	_, err := c.do(ctx, simd.Request{Op: "reset", Device: dev})
	return err
}

// SetPowerLimit sets a device's power limit in watts (0: default).
func (c *Client) SetPowerLimit(ctx context.Context, dev int, watts float64) error {
	_, err := c.do(ctx, simd.Request{Op: "power_limit", Device: dev, Watts: watts})
	return err
}

// Xids returns a device's Xid events with sequence numbers above after.
func (c *Client) Xids(ctx context.Context, dev int, after uint64) ([]XidEvent, error) {
	r, err := c.do(ctx, simd.Request{Op: "xids", Device: dev, After: after})
	if err != nil {
		return nil, err
	}
	return r.Xids, nil
}

// MPSServers lists the MPS servers gpusimd knows, with their clients.
func (c *Client) MPSServers(ctx context.Context) ([]ServerInfo, error) {
	r, err := c.do(ctx, simd.Request{Op: "mps_servers"})
	if err != nil {
		return nil, err
	}
	return r.Servers, nil
}

// SetServerLimits changes an MPS server's defaults for clients that join
// later (atp 0 and nil limits leave a setting alone).
func (c *Client) SetServerLimits(ctx context.Context, pid int, atp float64, limits map[int]uint64) error {
	_, err := c.do(ctx, simd.Request{Op: "mps_set", PID: pid, ATP: atp, MemLimits: limitKeys(limits)})
	return err
}

// TerminateClient fails one client of an MPS server (terminate_client).
func (c *Client) TerminateClient(ctx context.Context, serverPID, clientPID int) error {
	_, err := c.do(ctx, simd.Request{Op: "mps_terminate", PID: serverPID, Client: clientPID})
	return err
}

func limitKeys(m map[int]uint64) map[string]uint64 {
	if len(m) == 0 {
		return nil
	}
	out := map[string]uint64{}
	for k, v := range m {
		out[strconv.Itoa(k)] = v
	}
	return out
}

// RegisterServer announces an MPS server process; the registration lasts
// until the returned closer is closed or this process dies.
func (c *Client) RegisterServer(ctx context.Context, pid, uid int, atp float64, limits map[int]uint64) (io.Closer, error) {
	var dl net.Dialer
	conn, err := dl.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		return nil, fmt.Errorf("reach gpusimd at %s: %w", c.Socket, err)
	}
	q := simd.Request{Op: "mps_register", PID: pid, UID: uid, ATP: atp, MemLimits: limitKeys(limits)}
	if err := json.NewEncoder(conn).Encode(q); err != nil {
		conn.Close()
		return nil, fmt.Errorf("register MPS server: %w", err)
	}
	var r simd.Response
	if err := json.NewDecoder(bufio.NewReader(conn)).Decode(&r); err != nil {
		conn.Close()
		return nil, fmt.Errorf("register MPS server: %w", err)
	}
	if r.Error != "" {
		conn.Close()
		return nil, fmt.Errorf("register MPS server: %s", r.Error)
	}
	return conn, nil
}

// Build locates built artifacts: $MUXFLOW_BUILD, else <repo root>/build.
func Build() (string, error) {
	if b := os.Getenv("MUXFLOW_BUILD"); b != "" {
		return b, nil
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate the repository root; set MUXFLOW_BUILD")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "build"), nil
}

// Artifacts are the paths of gpusim's built programs.
type Artifacts struct {
	Gpusimd    string // build/bin/gpusimd
	LibDir     string // build/gpusim/lib (libcuda.so.1)
	Infer      string
	Train      string
	MPSControl string // fake nvidia-cuda-mps-control
}

// Paths finds the artifacts and fails with a clear message when they have
// not been built.
func Paths() (Artifacts, error) {
	b, err := Build()
	if err != nil {
		return Artifacts{}, err
	}
	a := Artifacts{
		Gpusimd:    filepath.Join(b, "bin", "gpusimd"),
		LibDir:     filepath.Join(b, "gpusim", "lib"),
		Infer:      filepath.Join(b, "gpusim", "bin", "infer"),
		Train:      filepath.Join(b, "gpusim", "bin", "train"),
		MPSControl: filepath.Join(b, "gpusim", "bin", "nvidia-cuda-mps-control"),
	}
	for _, p := range []string{a.Gpusimd, filepath.Join(a.LibDir, "libcuda.so.1"), a.Infer, a.Train, a.MPSControl} {
		if _, err := os.Stat(p); err != nil {
			return a, fmt.Errorf("gpusim artifact %s is missing: run `make build` first (or set MUXFLOW_BUILD)", p)
		}
	}
	return a, nil
}

// Must panics on error; for test setup one-liners.
func Must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Options configure Start.
type Options struct {
	GPUs      string        // gpusimd -gpus (default "h100")
	TimeSlice time.Duration // 0: gpusimd's default
	Window    time.Duration // utilisation window; 0: gpusimd's default
	Dir       string        // where the socket goes; default a new temp dir
	Stderr    io.Writer     // gpusimd's log; default discarded
	Args      []string      // extra gpusimd flags
}

// Daemon is a gpusimd started by Start.
type Daemon struct {
	*Client
	Dir       string // private directory (socket, MPS pipe and log dirs)
	Artifacts Artifacts
	cmd       *exec.Cmd
	done      chan struct{}
	ownDir    bool
	once      sync.Once
}

// Start runs build/bin/gpusimd on a private socket and waits until it
// answers.
func Start(ctx context.Context, o Options) (*Daemon, error) {
	a, err := Paths()
	if err != nil {
		return nil, err
	}
	if o.GPUs == "" {
		o.GPUs = "h100"
	}
	dir, own := o.Dir, false
	if dir == "" {
		// unix socket paths are short: keep it under /tmp
		if dir, err = os.MkdirTemp("/tmp", "gpusim-"); err != nil {
			return nil, fmt.Errorf("create gpusim directory: %w", err)
		}
		own = true
	}
	sock := filepath.Join(dir, "gpusimd.sock")
	args := []string{"-socket", sock, "-gpus", o.GPUs}
	if o.TimeSlice > 0 {
		args = append(args, "-timeslice", o.TimeSlice.String())
	}
	if o.Window > 0 {
		args = append(args, "-window", o.Window.String())
	}
	args = append(args, o.Args...)
	cmd := exec.Command(a.Gpusimd, args...)
	cmd.Stderr = o.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start gpusimd: %w", err)
	}
	d := &Daemon{Client: New(sock), Dir: dir, Artifacts: a, cmd: cmd, done: make(chan struct{}), ownDir: own}
	go func() { _ = cmd.Wait(); close(d.done) }()
	for {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := d.Ping(pctx)
		cancel()
		if err == nil {
			return d, nil
		}
		select {
		case <-d.done:
			d.Stop()
			return nil, fmt.Errorf("gpusimd exited during start-up: %s", cmd.ProcessState)
		case <-ctx.Done():
			d.Stop()
			return nil, fmt.Errorf("gpusimd did not answer: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// MPSPipeDir is the daemon's private CUDA_MPS_PIPE_DIRECTORY.
func (d *Daemon) MPSPipeDir() string { return filepath.Join(d.Dir, "mps-pipe") }

// MPSLogDir is the daemon's private CUDA_MPS_LOG_DIRECTORY.
func (d *Daemon) MPSLogDir() string { return filepath.Join(d.Dir, "mps-log") }

// Env is what a child process needs to use this simulator: the socket, the
// fake libcuda on the library path and a private MPS pipe directory (MPS is
// in effect only while a fake control daemon runs there).
func (d *Daemon) Env() []string {
	lp := d.Artifacts.LibDir
	if old := os.Getenv("LD_LIBRARY_PATH"); old != "" {
		lp += ":" + old
	}
	return []string{
		"GPUSIM_SOCKET=" + d.Socket,
		"LD_LIBRARY_PATH=" + lp,
		"CUDA_MPS_PIPE_DIRECTORY=" + d.MPSPipeDir(),
		"CUDA_MPS_LOG_DIRECTORY=" + d.MPSLogDir(),
	}
}

// StartMPS starts the fake MPS control daemon (-d) on the private pipe
// directory; StopMPS (or Stop) quits it.
func (d *Daemon) StartMPS(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, d.Artifacts.MPSControl, "-d")
	cmd.Env = append(os.Environ(), d.Env()...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("start fake MPS control daemon: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// MPSCommand sends command lines to the fake MPS control daemon, as
// `echo CMD | nvidia-cuda-mps-control` does, and returns its output.
func (d *Daemon) MPSCommand(ctx context.Context, lines ...string) (string, error) {
	cmd := exec.CommandContext(ctx, d.Artifacts.MPSControl)
	cmd.Env = append(os.Environ(), d.Env()...)
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("nvidia-cuda-mps-control %q: %w", lines, err)
	}
	return string(out), nil
}

// StopMPS quits the fake MPS control daemon if it runs.
func (d *Daemon) StopMPS() {
	if _, err := os.Stat(filepath.Join(d.MPSPipeDir(), "control")); err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = d.MPSCommand(ctx, "quit")
}

// Stop quits MPS, stops gpusimd and removes the private directory.
func (d *Daemon) Stop() {
	d.once.Do(func() {
		d.StopMPS()
		if d.cmd.Process != nil {
			_ = d.cmd.Process.Signal(os.Interrupt)
			select {
			case <-d.done:
			case <-time.After(5 * time.Second):
				_ = d.cmd.Process.Kill()
				<-d.done
			}
		}
		if d.ownDir {
			_ = os.RemoveAll(d.Dir)
		}
	})
}
