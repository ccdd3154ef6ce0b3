package evict

import (
	"context"
	"io"
	"log/slog"
	"os/exec"
	"testing"
	"time"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// spawn starts a shell that reacts to SIGTERM as script says and returns it with a
// channel closed when it has been reaped.
func spawn(t *testing.T, script string) (*exec.Cmd, chan struct{}) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	time.Sleep(100 * time.Millisecond) // let the shell install its trap
	return cmd, done
}

func TestProcessesGracefulAndForced(t *testing.T) {
	tests := []struct {
		name     string
		script   string
		grace    time.Duration
		minTaken time.Duration
		maxTaken time.Duration
	}{
		// Exits on SIGTERM (what libxcuda's drain ends in): no need to wait for the grace.
		{"honours SIGTERM", "trap 'exit 0' TERM; while :; do sleep 0.05; done", 5 * time.Second, 0, 3 * time.Second},
		// Ignores SIGTERM: killed once the grace period is over.
		{"ignores SIGTERM", "trap '' TERM; while :; do sleep 0.05; done", 500 * time.Millisecond, 500 * time.Millisecond, 4 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd, done := spawn(t, tc.script)
			start := time.Now()
			if err := (Processes{}).Stop(context.Background(), Target{ID: "p", PID: cmd.Process.Pid}, tc.grace); err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(3 * time.Second):
				t.Fatal("process still running after Stop")
			}
			if took := time.Since(start); took < tc.minTaken || took > tc.maxTaken {
				t.Errorf("Stop took %v, want between %v and %v", took, tc.minTaken, tc.maxTaken)
			}
		})
	}
	if err := (Processes{}).Stop(context.Background(), Target{ID: "gone", PID: 1 << 22}, time.Second); err != nil {
		t.Errorf("a process that is already gone: %v", err)
	}
	if err := (Processes{}).Stop(context.Background(), Target{ID: "nopid"}, time.Second); err == nil {
		t.Error("a target without pid was accepted")
	}
}

func TestEvictorBackoffAndDedup(t *testing.T) {
	cmd, done := spawn(t, "trap 'exit 0' TERM; while :; do sleep 0.05; done")
	var evicted []string
	e := NewEvictor(Processes{}, quiet)
	e.OnEvicted = func(tg Target, gpu, reason string, err error) { evicted = append(evicted, tg.ID+"@"+gpu) }
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e.now = func() time.Time { return now }
	if !e.Admits("GPU-a", time.Minute) {
		t.Fatal("a GPU that never evicted refuses offline work")
	}
	tg := Target{ID: "job", PID: cmd.Process.Pid}
	if err := e.Evict(context.Background(), "GPU-a", "unhealthy", time.Second, []Target{tg, tg}); err != nil {
		t.Fatal(err)
	}
	<-done
	if len(evicted) != 1 {
		t.Errorf("the same target was evicted %d times", len(evicted))
	}
	if e.Admits("GPU-a", time.Minute) {
		t.Error("GPU admits offline work right after an eviction")
	}
	if !e.Admits("GPU-b", time.Minute) {
		t.Error("back-off leaked to another GPU")
	}
	now = now.Add(time.Minute)
	if !e.Admits("GPU-a", time.Minute) {
		t.Error("GPU still refuses after its back-off")
	}
}

func TestRouter(t *testing.T) {
	var got []string
	rec := func(name string) Stopper {
		return stopFunc(func(tg Target) { got = append(got, name+":"+tg.ID) })
	}
	r := Router{Containers: rec("containerd"), Processes: rec("pid")}
	r.Stop(context.Background(), Target{ID: "a", Namespace: "k8s.io"}, 0)
	r.Stop(context.Background(), Target{ID: "b", PID: 7}, 0)
	if len(got) != 2 || got[0] != "containerd:a" || got[1] != "pid:b" {
		t.Errorf("routing: %v", got)
	}
}

type stopFunc func(Target)

func (f stopFunc) Stop(_ context.Context, t Target, _ time.Duration) error { f(t); return nil }
