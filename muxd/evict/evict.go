// Package evict removes offline work from a GPU at risk the way an operator would: SIGTERM
// (which libxcuda turns into a clean drain), a grace period from the policy, then SIGKILL.
// Containers are stopped through containerd's API (in the namespace they were created in:
// k8s.io for Kubernetes, moby for Docker); plain registered processes by pid. A GPU that
// evicted recently takes no new offline work until its back-off has passed.
package evict

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/muxflow/muxflow/muxd/procfs"
)

// Target is one piece of offline work to remove.
type Target struct {
	// ID is the container id (or a label for a plain process).
	ID string
	// Namespace is the containerd namespace; empty for a plain process.
	Namespace string
	// PID is the host pid of the container's init process or of the plain process.
	PID int
	// Pod is "namespace/name" when the container belongs to a Kubernetes pod.
	Pod string
}

// Stopper stops one target: SIGTERM, wait up to grace, then SIGKILL. It returns once the
// target is gone or SIGKILL was delivered.
type Stopper interface {
	Stop(ctx context.Context, t Target, grace time.Duration) error
}

// Processes stops targets by signalling their pid.
type Processes struct{}

// Stop signals the process and waits for it to exit.
func (Processes) Stop(ctx context.Context, t Target, grace time.Duration) error {
	if t.PID <= 0 {
		return fmt.Errorf("evict %s: no pid to signal", t.ID)
	}
	if err := syscall.Kill(t.PID, syscall.SIGTERM); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return fmt.Errorf("evict %s: SIGTERM pid %d: %w", t.ID, t.PID, err)
	}
	if waitGone(ctx, t.PID, grace) {
		return nil
	}
	if err := syscall.Kill(t.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("evict %s: SIGKILL pid %d: %w", t.ID, t.PID, err)
	}
	return nil
}

// waitGone polls until pid no longer exists (or is a zombie) or the grace period ends.
func waitGone(ctx context.Context, pid int, grace time.Duration) bool {
	deadline := time.Now().Add(grace)
	for {
		if !procfs.Alive(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Router sends containers to containerd and everything else to Processes.
type Router struct {
	Containers Stopper // nil: containers are stopped by pid too
	Processes  Stopper
}

// Stop picks the stopper for the target.
func (r Router) Stop(ctx context.Context, t Target, grace time.Duration) error {
	if t.Namespace != "" && r.Containers != nil {
		return r.Containers.Stop(ctx, t, grace)
	}
	return r.Processes.Stop(ctx, t, grace)
}

// Evictor runs evictions (one at a time per target) and keeps each GPU's back-off.
type Evictor struct {
	Stopper Stopper
	Log     *slog.Logger
	// OnEvicted is called after each eviction (metrics, events).
	OnEvicted func(t Target, gpu, reason string, err error)

	mu        sync.Mutex
	inFlight  map[string]bool
	lastEvict map[string]time.Time // per GPU uuid
	now       func() time.Time
}

// NewEvictor returns an Evictor over s.
func NewEvictor(s Stopper, log *slog.Logger) *Evictor {
	return &Evictor{Stopper: s, Log: log, inFlight: map[string]bool{}, lastEvict: map[string]time.Time{}, now: time.Now}
}

// Evict stops the targets on one GPU concurrently, each with the grace period, and
// records the GPU's eviction time. It returns when all are stopped.
func (e *Evictor) Evict(ctx context.Context, gpu, reason string, grace time.Duration, targets []Target) error {
	e.mu.Lock()
	e.lastEvict[gpu] = e.now()
	e.mu.Unlock()
	return e.stop(ctx, gpu, reason, grace, targets)
}

// EvictAlone stops one target for a fault of its own (a corrupt control block, its own
// context dying): the GPU it ran on keeps admitting offline work, no back-off, since
// nothing is wrong with the GPU or with anyone else on it.
func (e *Evictor) EvictAlone(ctx context.Context, gpu, reason string, grace time.Duration, t Target) error {
	return e.stop(ctx, gpu, reason, grace, []Target{t})
}

func (e *Evictor) stop(ctx context.Context, gpu, reason string, grace time.Duration, targets []Target) error {
	e.mu.Lock()
	var todo []Target
	for _, t := range targets {
		if !e.inFlight[t.ID] {
			e.inFlight[t.ID] = true
			todo = append(todo, t)
		}
	}
	e.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(todo))
	for i, t := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := e.Stopper.Stop(ctx, t, grace)
			e.mu.Lock()
			delete(e.inFlight, t.ID)
			e.mu.Unlock()
			if err != nil {
				e.Log.Error("eviction failed", "id", t.ID, "gpu", gpu, "reason", reason, "err", err)
			} else {
				e.Log.Warn("evicted offline work", "id", t.ID, "pid", t.PID, "namespace", t.Namespace, "gpu", gpu, "reason", reason, "took", time.Since(start).Round(time.Millisecond))
			}
			if e.OnEvicted != nil {
				e.OnEvicted(t, gpu, reason, err)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Admits reports whether a GPU may take offline work again: it has not evicted within
// backoff.
func (e *Evictor) Admits(gpu string, backoff time.Duration) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	t, ok := e.lastEvict[gpu]
	return !ok || e.now().Sub(t) >= backoff
}
