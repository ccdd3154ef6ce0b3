package mps

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/muxflow/muxflow/muxd/procfs"
)

// Defaults are applied to the control daemon every time it (re)starts.
type Defaults struct {
	// ActiveThreadPercentage for new servers; 0 or 100 leaves the tool's default.
	ActiveThreadPercentage float64
	// PinnedMemLimit per device for new clients, bytes; 0 leaves none.
	PinnedMemLimit uint64
	// Devices is how many devices PinnedMemLimit applies to.
	Devices int
}

// Supervisor keeps one control daemon alive: it starts it in the foreground (-f) as its
// own child, so a death is seen at once; every period it looks at the daemon's process
// (/proc: gone, stopped or a zombie is a suspicion), and it probes it with a command (an
// exec of the control tool) every ProbeEvery and at once on a suspicion, so a hang is
// seen within ProbeEvery and a period; either way it kills what is left and starts a
// new one. An adopted daemon's process is found through the pid file it keeps in the
// pipe directory; without one, it is probed every period.
type Supervisor struct {
	Control  Control
	Defaults Defaults
	// Period between looks at the daemon's process; 0 means a second (a daemon muxd
	// started is its child: its exit is seen at once, not at the next look).
	Period time.Duration
	// ProbeEvery is how often a command is sent when the process looks well; 0 means
	// 10 s. The exec of the control tool is what a look at /proc saves: it cost more
	// than the rest of muxd's supervision together.
	ProbeEvery time.Duration
	Log        *slog.Logger
	// OnRestart is called after each restart with the reason (for the error handler:
	// clients of the old servers have lost their GPU context).
	OnRestart func(reason string)
	// KeepOnExit leaves the control daemon running when Run returns, so that a restart
	// or upgrade of muxd does not take the MPS servers (and every GPU client) down; the
	// next muxd adopts it. muxd's shutdown then decides whether to quit it (only when no
	// GPU work uses it; muxd/daemon) and logs that decision.
	KeepOnExit bool

	restarts atomic.Int64
	healthy  atomic.Bool
	restart  chan string
	once     sync.Once
	mu       sync.Mutex
	pid      int
}

func (s *Supervisor) requests() chan string {
	s.once.Do(func() { s.restart = make(chan string, 1) })
	return s.restart
}

// Restart asks for the control daemon, and with it every MPS server, to be stopped and
// started again (the error handler does this for a faulted GPU once its offline clients
// are gone). It returns at once; the restart happens in Run.
func (s *Supervisor) Restart(reason string) {
	select {
	case s.requests() <- reason:
	default: // a restart is already pending
	}
}

// Restarts counts restarts since the supervisor began (the first start is not one).
func (s *Supervisor) Restarts() int64 { return s.restarts.Load() }

// Healthy reports whether the daemon answered its last probe.
func (s *Supervisor) Healthy() bool { return s.healthy.Load() }

// PID is the control daemon's pid (0 when none is running or it was adopted).
func (s *Supervisor) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pid
}

// Run supervises until ctx is done, then stops the daemon it started (quit, then kill).
func (s *Supervisor) Run(ctx context.Context) error {
	period := s.Period
	if period <= 0 {
		period = time.Second
	}
	if err := os.MkdirAll(s.Control.PipeDir, 0o755); err != nil {
		return fmt.Errorf("create MPS pipe directory: %w", err)
	}
	if err := os.MkdirAll(s.Control.LogDir, 0o755); err != nil {
		return fmt.Errorf("create MPS log directory: %w", err)
	}
	backoff := 100 * time.Millisecond
	first := true
	for ctx.Err() == nil {
		// A daemon left by a previous muxd is adopted rather than replaced: its servers
		// may have clients that must not be disturbed.
		if _, err := s.Control.ServerList(ctx); err == nil && first {
			s.Log.Info("adopting the MPS control daemon already running", "pipe_dir", s.Control.PipeDir)
			s.applyDefaults(ctx)
			s.healthy.Store(true)
			reason := s.watch(ctx, nil, 0, period)
			if ctx.Err() != nil {
				return nil
			}
			s.Log.Warn("MPS control daemon lost", "reason", reason)
			first = false
			continue
		}
		cmd := exec.Command(s.Control.Binary, "-f")
		cmd.Env = s.Control.env()
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			s.healthy.Store(false)
			s.Log.Error("cannot start the MPS control daemon", "binary", s.Control.Binary, "err", err)
			if !sleep(ctx, backoff) {
				return nil
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		s.mu.Lock()
		s.pid = cmd.Process.Pid
		s.mu.Unlock()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		if !s.waitAnswer(ctx, exited) {
			s.stop(cmd, exited)
			if ctx.Err() != nil {
				return nil
			}
			if !sleep(ctx, backoff) {
				return nil
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		if !first {
			s.restarts.Add(1)
		}
		s.Log.Info("MPS control daemon running", "pid", cmd.Process.Pid, "pipe_dir", s.Control.PipeDir, "restarts", s.restarts.Load())
		s.applyDefaults(ctx)
		s.healthy.Store(true)
		if !first && s.OnRestart != nil {
			s.OnRestart("control daemon restarted")
		}
		first = false
		backoff = 100 * time.Millisecond
		reason := s.watch(ctx, exited, cmd.Process.Pid, period)
		if ctx.Err() != nil {
			if s.KeepOnExit {
				s.Log.Debug("supervisor done; the MPS control daemon is left to muxd's shutdown rule", "pid", cmd.Process.Pid)
			} else {
				s.stop(cmd, exited)
			}
			return nil
		}
		s.stop(cmd, exited)
		s.Log.Warn("MPS control daemon lost, restarting", "reason", reason)
	}
	return nil
}

// waitAnswer waits up to 5 s for a freshly started daemon to answer commands.
func (s *Supervisor) waitAnswer(ctx context.Context, exited chan error) bool {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			exited <- err // leave it for stop
			s.Log.Error("MPS control daemon exited at start", "err", err)
			return false
		default:
		}
		if _, err := s.Control.ServerList(ctx); err == nil {
			return true
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return false
		}
	}
	s.Log.Error("MPS control daemon did not answer within 5s of starting")
	return false
}

// watch returns why the daemon is considered lost. pid is the daemon's when muxd started
// it (exited then reports its end); 0 for an adopted one, whose pid file is read.
func (s *Supervisor) watch(ctx context.Context, exited chan error, pid int, period time.Duration) string {
	probeEvery := s.ProbeEvery
	if probeEvery <= 0 {
		probeEvery = 10 * time.Second
	}
	t := time.NewTicker(period)
	defer t.Stop()
	failures := 0
	lastProbe := time.Now()
	for {
		select {
		case <-ctx.Done():
			return "muxd stopping"
		case reason := <-s.requests():
			s.healthy.Store(false)
			if exited == nil {
				// An adopted daemon is not our child: ask it to quit; the probes
				// will see it gone.
				qctx, cancel := context.WithTimeout(ctx, time.Second)
				_ = s.Control.Quit(qctx)
				cancel()
			}
			return "restart requested: " + reason
		case err := <-exited:
			exited <- err
			s.healthy.Store(false)
			return fmt.Sprintf("exited: %v", err)
		case now := <-t.C:
			p := pid
			if p == 0 {
				p = s.Control.pidFromFile()
			}
			suspect := failures > 0 || p == 0 || !processLooksAlive(p)
			if !suspect && now.Sub(lastProbe) < probeEvery {
				continue
			}
			lastProbe = now
			if _, err := s.Control.ServerList(ctx); err != nil {
				if ctx.Err() != nil {
					return "muxd stopping"
				}
				failures++
				if failures >= 2 {
					s.healthy.Store(false)
					return fmt.Sprintf("not answering: %v", err)
				}
				continue
			}
			failures = 0
			s.healthy.Store(true)
		}
	}
}

// processLooksAlive reads the state of pid in /proc: false when it is gone, a zombie,
// dead, or stopped (by a signal or a tracer) — each a reason to probe at once.
func processLooksAlive(pid int) bool {
	st, err := procfs.Read(pid)
	return err == nil && st.State != 'T' && st.State != 't'
}

func (s *Supervisor) applyDefaults(ctx context.Context) {
	d := s.Defaults
	if d.ActiveThreadPercentage > 0 && d.ActiveThreadPercentage < 100 {
		if err := s.Control.SetDefaultActiveThreadPercentage(ctx, d.ActiveThreadPercentage); err != nil {
			s.Log.Error("cannot set the MPS default active thread percentage", "err", err)
		}
	}
	if d.PinnedMemLimit > 0 {
		for dev := range d.Devices {
			if err := s.Control.SetDefaultPinnedMemLimit(ctx, dev, d.PinnedMemLimit); err != nil {
				s.Log.Error("cannot set the MPS default pinned memory limit", "device", dev, "err", err)
			}
		}
	}
}

// stop ends a daemon muxd started: quit politely, then kill its process group.
func (s *Supervisor) stop(cmd *exec.Cmd, exited chan error) {
	defer func() {
		s.mu.Lock()
		s.pid = 0
		s.mu.Unlock()
	}()
	select {
	case <-exited:
		return
	default:
	}
	qctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = s.Control.Quit(qctx)
	cancel()
	select {
	case <-exited:
		return
	case <-time.After(time.Second):
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-exited:
	case <-time.After(2 * time.Second):
		s.Log.Error("MPS control daemon did not die after SIGKILL", "pid", cmd.Process.Pid)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
