// Package mpscontrol is gpusim's fake nvidia-cuda-mps-control: the control
// daemon (-d / -f) listening in CUDA_MPS_PIPE_DIRECTORY, the command mode
// that reads commands on stdin (get_server_list, set_default_active_thread_percentage,
// quit, ...) and prints what the real tool prints, and the per-user MPS
// server processes it spawns, which register with gpusimd. muxd's MPS code
// therefore runs unchanged against real and simulated GPUs.
package mpscontrol

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/muxflow/muxflow/gpusim/simclient"
	"github.com/muxflow/muxflow/gpusim/simd"
)

const (
	envDaemonChild = "GPUSIM_MPS_DAEMON_CHILD"
	envServer      = "GPUSIM_MPS_SERVER"
	version        = "gpusim fake nvidia-cuda-mps-control (MPS protocol v2)"
)

func pipeDir() string {
	if d := os.Getenv("CUDA_MPS_PIPE_DIRECTORY"); d != "" {
		return d
	}
	return "/tmp/nvidia-mps"
}

func logDir() string {
	if d := os.Getenv("CUDA_MPS_LOG_DIRECTORY"); d != "" {
		return d
	}
	return "/var/log/nvidia-mps"
}

func gpusimSocket() string {
	if s := os.Getenv("GPUSIM_SOCKET"); s != "" {
		return s
	}
	return simd.DefaultSocket
}

// Run is the tool's main.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if os.Getenv(envServer) != "" {
		return runServer(ctx)
	}
	if len(args) == 0 {
		return commandMode(stdin, stdout)
	}
	switch args[0] {
	case "-d":
		if os.Getenv(envDaemonChild) != "" {
			return runDaemon(ctx)
		}
		return daemonize(args)
	case "-f":
		return runDaemon(ctx)
	case "-v":
		fmt.Fprintln(stdout, version)
		return nil
	case "-h", "--help":
		fmt.Fprintln(stdout, "usage: nvidia-cuda-mps-control [-d | -f | -v]")
		return nil
	}
	return fmt.Errorf("unknown option %q (usage: nvidia-cuda-mps-control [-d | -f | -v])", args[0])
}

// daemonize starts the daemon in the background and returns once it listens.
func daemonize(args []string) error {
	ctl := filepath.Join(pipeDir(), "control")
	if c, err := net.Dial("unix", ctl); err == nil {
		c.Close()
		return fmt.Errorf("An instance of this daemon is already running")
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	if err := os.MkdirAll(logDir(), 0o755); err != nil {
		return fmt.Errorf("create MPS log directory: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(logDir(), "control.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open MPS control log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), envDaemonChild+"=1")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start MPS control daemon: %w", err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Release()
	for i := 0; i < 250; i++ {
		if c, err := net.Dial("unix", ctl); err == nil {
			c.Close()
			return nil
		}
		if syscall.Kill(pid, 0) != nil {
			return fmt.Errorf("MPS control daemon exited during start-up; see %s", filepath.Join(logDir(), "control.log"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("MPS control daemon did not come up within 5s")
}

// commandMode sends each stdin line to the daemon and prints the answers.
func commandMode(stdin io.Reader, stdout io.Writer) error {
	ctl := filepath.Join(pipeDir(), "control")
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		c, err := net.Dial("unix", ctl)
		if err != nil {
			return fmt.Errorf("Cannot find MPS control daemon process")
		}
		fmt.Fprintln(c, line)
		out, _ := io.ReadAll(c)
		c.Close()
		_, _ = stdout.Write(out)
	}
	return nil
}

type server struct {
	pid  int
	uid  int
	cmd  *exec.Cmd
	done chan struct{}
}

type daemon struct {
	mu         sync.Mutex
	log        *slog.Logger
	sim        *simclient.Client
	defaultATP float64
	defaultMem map[int]uint64
	servers    map[int]*server // by pid
	quit       chan struct{}
	quitOnce   sync.Once
}

func runDaemon(ctx context.Context) error {
	dir := pipeDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create MPS pipe directory: %w", err)
	}
	if err := os.MkdirAll(logDir(), 0o755); err != nil {
		return fmt.Errorf("create MPS log directory: %w", err)
	}
	ctl := filepath.Join(dir, "control")
	if c, err := net.Dial("unix", ctl); err == nil {
		c.Close()
		return fmt.Errorf("An instance of this daemon is already running")
	}
	_ = os.Remove(ctl)
	ln, err := net.Listen("unix", ctl)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", ctl, err)
	}
	// The real daemon leaves its socket file behind when it quits (seen on an
	// H200, driver 580), so clients must tell a live daemon by connecting.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = os.Chmod(ctl, 0o666)
	pidFile := filepath.Join(dir, "nvidia-cuda-mps-control.pid")
	_ = os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
	logf, err := os.OpenFile(filepath.Join(logDir(), "control.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open MPS control log: %w", err)
	}
	defer logf.Close()
	d := &daemon{log: slog.New(slog.NewTextHandler(logf, nil)), sim: simclient.New(gpusimSocket()),
		defaultATP: 100, defaultMem: map[int]uint64{}, servers: map[int]*server{}, quit: make(chan struct{})}
	d.log.Info("Starting control daemon", "pid", os.Getpid())
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		select {
		case <-ctx.Done():
		case <-d.quit:
		}
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			break
		}
		go d.handle(c)
	}
	d.mu.Lock()
	var all []*server
	for _, s := range d.servers {
		all = append(all, s)
	}
	d.mu.Unlock()
	for _, s := range all {
		d.stopServer(s)
	}
	_ = os.Remove(ctl)
	_ = os.Remove(pidFile)
	d.log.Info("Control daemon exited")
	return nil
}

func (d *daemon) handle(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && line == "" {
		return
	}
	peer, known := simd.PeerOf(c)
	out := d.command(strings.Fields(line), peer, known)
	_, _ = io.WriteString(c, out)
}

func pct(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + "\n" }

// parseMem reads a pinned memory limit as the real tool accepts it
// ("2G", "512M", "1024"); plain numbers are MB.
func parseMem(s string) (uint64, error) {
	s = strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(s), "B"), "I")
	mul := float64(1 << 20)
	switch {
	case strings.HasSuffix(s, "K"):
		mul, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mul, s = 1<<20, s[:len(s)-1]
	case strings.HasSuffix(s, "G"):
		mul, s = 1<<30, s[:len(s)-1]
	case strings.HasSuffix(s, "T"):
		mul, s = 1<<40, s[:len(s)-1]
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("invalid memory limit %q", s)
	}
	return uint64(v * mul), nil
}

func fmtMem(b uint64) string {
	if b%(1<<30) == 0 && b > 0 {
		return fmt.Sprintf("%dG\n", b>>30)
	}
	return fmt.Sprintf("%dM\n", b>>20)
}

func parseATP(s string) (float64, bool) {
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil && v > 0 && v <= 100
}

// command runs one command line and returns what the tool prints; peer is the kernel's
// word on who sent it (SO_PEERCRED), when known.
func (d *daemon) command(f []string, peer simd.Peer, peerKnown bool) string {
	if len(f) == 0 {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d.log.Info("Command", "line", strings.Join(f, " "))
	switch f[0] {
	case "get_server_list":
		d.mu.Lock()
		defer d.mu.Unlock()
		var pids []int
		for p := range d.servers {
			pids = append(pids, p)
		}
		sort.Ints(pids)
		var b strings.Builder
		for _, p := range pids {
			fmt.Fprintf(&b, "%d\n", p)
		}
		return b.String()
	case "get_client_list", "get_device_client_list", "get_server_status":
		if len(f) < 2 && f[0] != "get_device_client_list" {
			return "Invalid number of arguments\n"
		}
		infos, err := d.sim.MPSServers(ctx)
		if err != nil {
			return fmt.Sprintf("Error: %v\n", err)
		}
		var b strings.Builder
		for _, si := range infos {
			if len(f) >= 2 && strconv.Itoa(si.PID) != f[1] {
				continue
			}
			switch f[0] {
			case "get_server_status":
				if si.Faulted {
					b.WriteString("FAULT\n")
				} else {
					b.WriteString("ACTIVE\n")
				}
			default:
				for _, c := range si.Clients {
					fmt.Fprintf(&b, "%d\n", c)
				}
			}
		}
		if b.Len() == 0 && f[0] == "get_server_status" {
			return "Server not found\n"
		}
		return b.String()
	case "start_server":
		if len(f) != 3 || f[1] != "-uid" {
			return "Invalid arguments: start_server -uid <uid>\n"
		}
		uid, err := strconv.Atoi(f[2])
		if err != nil || uid < 0 {
			return "Invalid user id\n"
		}
		if _, err := d.serverFor(uid); err != nil {
			return fmt.Sprintf("Error: %v\n", err)
		}
		return ""
	case "set_default_active_thread_percentage":
		if len(f) != 2 {
			return "Invalid number of arguments\n"
		}
		// The real tool answers an out-of-range value with the
		// percentage it keeps, not an error (checked on an H200, driver 580).
		v, ok := parseATP(f[1])
		d.mu.Lock()
		defer d.mu.Unlock()
		if ok {
			d.defaultATP = v
		}
		return pct(d.defaultATP)
	case "get_default_active_thread_percentage":
		d.mu.Lock()
		defer d.mu.Unlock()
		return pct(d.defaultATP)
	case "set_active_thread_percentage":
		if len(f) != 3 {
			return "Invalid number of arguments\n"
		}
		pid, err := strconv.Atoi(f[1])
		v, ok := parseATP(f[2])
		if err != nil || !ok {
			return "Invalid arguments\n"
		}
		if err := d.sim.SetServerLimits(ctx, pid, v, nil); err != nil {
			return fmt.Sprintf("Error: %v\n", err)
		}
		return pct(v)
	case "get_active_thread_percentage":
		if len(f) != 2 {
			return "Invalid number of arguments\n"
		}
		infos, err := d.sim.MPSServers(ctx)
		if err != nil {
			return fmt.Sprintf("Error: %v\n", err)
		}
		for _, si := range infos {
			if strconv.Itoa(si.PID) == f[1] {
				return pct(si.ATP)
			}
		}
		return "Server not found\n"
	case "set_default_device_pinned_mem_limit", "set_device_pinned_mem_limit":
		args := f[1:]
		pid := 0
		if f[0] == "set_device_pinned_mem_limit" {
			if len(args) != 3 {
				return "Invalid number of arguments\n"
			}
			p, err := strconv.Atoi(args[0])
			if err != nil {
				return "Invalid server pid\n"
			}
			pid, args = p, args[1:]
		}
		if len(args) != 2 {
			return "Invalid number of arguments\n"
		}
		dev, err := strconv.Atoi(args[0])
		if err != nil || dev < 0 {
			return "Invalid device\n"
		}
		v, err := parseMem(args[1])
		if err != nil {
			return fmt.Sprintf("%v\n", err)
		}
		if pid != 0 {
			if err := d.sim.SetServerLimits(ctx, pid, 0, map[int]uint64{dev: v}); err != nil {
				return fmt.Sprintf("Error: %v\n", err)
			}
			return ""
		}
		d.mu.Lock()
		d.defaultMem[dev] = v
		d.mu.Unlock()
		return ""
	case "get_default_device_pinned_mem_limit":
		if len(f) != 2 {
			return "Invalid number of arguments\n"
		}
		dev, err := strconv.Atoi(f[1])
		if err != nil {
			return "Invalid device\n"
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		return fmtMem(d.defaultMem[dev])
	case "terminate_client":
		if len(f) != 3 {
			return "Invalid number of arguments\n"
		}
		sp, e1 := strconv.Atoi(f[1])
		cp, e2 := strconv.Atoi(f[2])
		if e1 != nil || e2 != nil {
			return "Invalid arguments\n"
		}
		if err := d.sim.TerminateClient(ctx, sp, cp); err != nil {
			return fmt.Sprintf("Error: %v\n", err)
		}
		return ""
	case "quit":
		d.quitOnce.Do(func() { close(d.quit) })
		return ""
	case "gpusim_client_connect":
		// not a real command: the fake libcuda asks for a server here
		if len(f) != 3 {
			return "err bad request\n"
		}
		// The client's user picks its server. Like the real daemon, believe the kernel
		// (the peer credential, in our user namespace) over what the client says: a
		// process in a user namespace calls itself root. Its pid likewise: the host pid,
		// not the one it has inside its container; the claimed ones are fallbacks.
		uid, err := strconv.Atoi(f[1])
		if err != nil || uid < 0 {
			return "err bad uid\n"
		}
		client := f[2]
		if peerKnown {
			uid = peer.UID
			if peer.PID > 0 {
				client = strconv.Itoa(peer.PID)
			}
		}
		s, err := d.serverFor(uid)
		if err != nil {
			return fmt.Sprintf("err %v\n", err)
		}
		d.log.Info("New client connected", "client", client, "uid", uid, "server", s.pid)
		return fmt.Sprintf("ok %d\n", s.pid)
	}
	return fmt.Sprintf("Unknown command %q\n", f[0])
}

// serverFor returns the running server for uid, starting one if needed.
func (d *daemon) serverFor(uid int) (*server, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.servers {
		if s.uid == uid {
			return s, nil
		}
	}
	if len(d.servers) > 0 {
		return nil, errors.New("a server for another user is running")
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(logDir(), "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open MPS server log: %w", err)
	}
	defer logf.Close()
	var mem []string
	for dev, v := range d.defaultMem {
		mem = append(mem, fmt.Sprintf("%d=%d", dev, v))
	}
	cmd := exec.Command(self)
	cmd.Args[0] = "nvidia-cuda-mps-server"
	cmd.Env = append(os.Environ(), envServer+"=1",
		"GPUSIM_MPS_ATP="+strconv.FormatFloat(d.defaultATP, 'f', -1, 64),
		"GPUSIM_MPS_MEM="+strings.Join(mem, ","), "GPUSIM_MPS_UID="+strconv.Itoa(uid))
	cmd.Stdout, cmd.Stderr = logf, logf
	ready, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("create server pipe: %w", err)
	}
	cmd.ExtraFiles = []*os.File{w}
	if err := cmd.Start(); err != nil {
		ready.Close()
		w.Close()
		return nil, fmt.Errorf("start MPS server: %w", err)
	}
	w.Close()
	// the server writes one line once gpusimd has registered it
	_ = ready.SetReadDeadline(time.Now().Add(10 * time.Second))
	msg, _ := bufio.NewReader(ready).ReadString('\n')
	ready.Close()
	if strings.TrimSpace(msg) != "ready" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("MPS server failed to start: %s", strings.TrimSpace(msg))
	}
	s := &server{pid: cmd.Process.Pid, uid: uid, cmd: cmd, done: make(chan struct{})}
	d.servers[s.pid] = s
	d.log.Info("Starting new server", "pid", s.pid, "uid", uid)
	go func() {
		_ = cmd.Wait()
		close(s.done)
		d.mu.Lock()
		delete(d.servers, s.pid)
		d.mu.Unlock()
		d.log.Info("Server exited", "pid", s.pid)
	}()
	return s, nil
}

func (d *daemon) stopServer(s *server) {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// runServer is the MPS server process: it registers with gpusimd and lives
// until signalled; its death fails its clients, as a real server's would.
func runServer(ctx context.Context) error {
	ready := os.NewFile(3, "ready")
	atp, err := strconv.ParseFloat(os.Getenv("GPUSIM_MPS_ATP"), 64)
	if err != nil {
		atp = 100
	}
	uid, _ := strconv.Atoi(os.Getenv("GPUSIM_MPS_UID"))
	mem := map[int]uint64{}
	for _, kv := range strings.Split(os.Getenv("GPUSIM_MPS_MEM"), ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		dev, e1 := strconv.Atoi(k)
		b, e2 := strconv.ParseUint(v, 10, 64)
		if e1 == nil && e2 == nil {
			mem[dev] = b
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	reg, err := simclient.New(gpusimSocket()).RegisterServer(rctx, os.Getpid(), uid, atp, mem)
	cancel()
	if err != nil {
		if ready != nil {
			fmt.Fprintf(ready, "%v\n", err)
		}
		return err
	}
	defer reg.Close()
	if ready != nil {
		fmt.Fprintln(ready, "ready")
		ready.Close()
	}
	fmt.Fprintf(os.Stderr, "[%s] Server %d started (uid %d, active thread percentage %.1f)\n",
		time.Now().Format(time.RFC3339), os.Getpid(), uid, atp)
	sig, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	<-sig.Done()
	return nil
}
