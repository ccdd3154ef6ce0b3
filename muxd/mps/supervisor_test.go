package mps

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func fakeControl(t *testing.T) Control {
	t.Helper()
	bin, err := filepath.Abs("testdata/fake-mps-control")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	return Control{Binary: bin, PipeDir: filepath.Join(dir, "pipe"), LogDir: filepath.Join(dir, "log"), Timeout: 500 * time.Millisecond}
}

func daemonPID(t *testing.T, c Control) int {
	data, _ := os.ReadFile(filepath.Join(c.PipeDir, "pid"))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid
}

func eventually(t *testing.T, what string, within time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSupervisorRestartsDeadAndHungDaemons(t *testing.T) {
	c := fakeControl(t)
	restarts := make(chan string, 10)
	s := &Supervisor{
		Control:    c,
		Defaults:   Defaults{ActiveThreadPercentage: 50, PinnedMemLimit: 2 << 30, Devices: 2},
		Period:     100 * time.Millisecond,
		ProbeEvery: 300 * time.Millisecond,
		Log:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnRestart:  func(reason string) { restarts <- reason },
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()

	eventually(t, "first start", 5*time.Second, s.Healthy)
	first := s.PID()
	cmds, _ := os.ReadFile(filepath.Join(c.PipeDir, "commands"))
	for _, want := range []string{"set_default_active_thread_percentage 50", "set_default_device_pinned_mem_limit 0 2048M", "set_default_device_pinned_mem_limit 1 2048M"} {
		if !strings.Contains(string(cmds), want) {
			t.Errorf("defaults not applied: no %q in\n%s", want, cmds)
		}
	}

	// kill -9: restarted within 2 s.
	syscall.Kill(daemonPID(t, c), syscall.SIGKILL)
	eventually(t, "restart after kill -9", 2*time.Second, func() bool { return s.Restarts() == 1 && s.Healthy() && s.PID() != first })
	<-restarts

	// A hung daemon (commands never answer): killed and replaced.
	os.WriteFile(filepath.Join(c.PipeDir, "hang"), nil, 0o644)
	eventually(t, "hang detected", 3*time.Second, func() bool { return !s.Healthy() })
	os.Remove(filepath.Join(c.PipeDir, "hang"))
	eventually(t, "restart after hang", 5*time.Second, func() bool { return s.Restarts() == 2 && s.Healthy() })

	// A restart asked for by the error handler.
	before := daemonPID(t, c)
	s.Restart("GPU faulted")
	eventually(t, "requested restart", 5*time.Second, func() bool { return s.Restarts() == 3 && s.Healthy() && daemonPID(t, c) != before })

	last := daemonPID(t, c)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if syscall.Kill(last, 0) == nil {
		t.Errorf("control daemon %d still running after the supervisor stopped", last)
	}
}

func TestSupervisorAdoptsRunningDaemon(t *testing.T) {
	c := fakeControl(t)
	os.MkdirAll(c.PipeDir, 0o755)
	// A daemon left by a previous muxd.
	other := &Supervisor{Control: c, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Period: 50 * time.Millisecond}
	octx, ocancel := context.WithCancel(context.Background())
	odone := make(chan error)
	go func() { odone <- other.Run(octx) }()
	eventually(t, "first daemon", 5*time.Second, other.Healthy)
	pid := daemonPID(t, c)

	s := &Supervisor{Control: c, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Period: 50 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	time.Sleep(300 * time.Millisecond)
	if got := daemonPID(t, c); got != pid {
		t.Errorf("a running daemon was replaced (pid %d -> %d) instead of adopted", pid, got)
	}
	cancel()
	<-done
	ocancel()
	<-odone
}

func TestControlCommands(t *testing.T) {
	c := fakeControl(t)
	ctx := context.Background()
	os.MkdirAll(c.PipeDir, 0o755)
	if _, err := c.ServerList(ctx); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Errorf("no daemon: %v", err)
	}
	if _, err := c.Command(ctx, "quit\nstart_server -uid 0"); err == nil {
		t.Error("a multi-line command was sent")
	}
	if err := c.SetDefaultActiveThreadPercentage(ctx, 0); err == nil {
		t.Error("0% accepted")
	}
	if err := c.SetDefaultActiveThreadPercentage(ctx, 101); err == nil {
		t.Error("101% accepted")
	}
	got, err := parsePIDs("12\n34\n")
	if err != nil || !cmp.Equal(got, []int{12, 34}) {
		t.Errorf("parsePIDs: %v %v", got, err)
	}
	if _, err := parsePIDs("Server 12"); err == nil {
		t.Error("garbage accepted as pids")
	}
}

func TestSupervisorKeepOnExit(t *testing.T) {
	c := fakeControl(t)
	s := &Supervisor{Control: c, KeepOnExit: true, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Period: 50 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	eventually(t, "start", 5*time.Second, s.Healthy)
	pid := daemonPID(t, c)
	cancel()
	<-done
	defer syscall.Kill(pid, syscall.SIGKILL)
	if syscall.Kill(pid, 0) != nil {
		t.Fatal("the control daemon was stopped with the supervisor although KeepOnExit is set")
	}
	// The next supervisor adopts it.
	s2 := &Supervisor{Control: c, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Period: 50 * time.Millisecond}
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan error)
	go func() { done2 <- s2.Run(ctx2) }()
	eventually(t, "adoption", 5*time.Second, s2.Healthy)
	if daemonPID(t, c) != pid {
		t.Error("the next supervisor replaced the daemon instead of adopting it")
	}
	cancel2()
	<-done2
}

// While the daemon's process looks well, the supervisor sends no command between
// ProbeEvery's probes: it only reads /proc.
func TestSupervisorProbesRarelyWhileTheProcessLooksWell(t *testing.T) {
	c := fakeControl(t)
	s := &Supervisor{Control: c, Period: 20 * time.Millisecond, ProbeEvery: time.Hour, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, "first start", 5*time.Second, s.Healthy)
	count := func() int {
		data, _ := os.ReadFile(filepath.Join(c.PipeDir, "commands"))
		return strings.Count(string(data), "get_server_list")
	}
	before := count()
	time.Sleep(500 * time.Millisecond)
	if n := count() - before; n != 0 {
		t.Errorf("%d probes in 500 ms (25 periods) with ProbeEvery 1h; want none", n)
	}
	// A stopped daemon is a suspicion: it is probed at once (the fake still answers).
	pid := s.PID()
	syscall.Kill(pid, syscall.SIGSTOP)
	defer syscall.Kill(pid, syscall.SIGCONT)
	eventually(t, "a probe of the stopped daemon", 2*time.Second, func() bool { return count() > before })
}

func TestProcessLooksAlive(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if !processLooksAlive(pid) {
		t.Errorf("a sleeping process does not look alive")
	}
	syscall.Kill(pid, syscall.SIGSTOP)
	eventually(t, "stopped state", 2*time.Second, func() bool { return !processLooksAlive(pid) })
	syscall.Kill(pid, syscall.SIGCONT)
	eventually(t, "running again", 2*time.Second, func() bool { return processLooksAlive(pid) })
	cmd.Process.Kill()
	eventually(t, "zombie", 2*time.Second, func() bool { return !processLooksAlive(pid) })
	cmd.Wait()
	if processLooksAlive(pid) {
		t.Errorf("a reaped process looks alive")
	}
}
