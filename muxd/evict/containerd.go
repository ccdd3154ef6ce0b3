package evict

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
)

// Containerd stops containers through containerd's API, so that containerd (and the
// kubelet or dockerd above it) see an ordinary task exit.
type Containerd struct {
	// Address is containerd's socket.
	Address string
}

// Stop kills the container's task with SIGTERM, waits up to grace for it to exit, then
// kills every process of the task with SIGKILL.
func (c Containerd) Stop(ctx context.Context, t Target, grace time.Duration) error {
	cl, err := containerd.New(c.Address, containerd.WithTimeout(5*time.Second))
	if err != nil {
		return fmt.Errorf("evict %s: connect to containerd at %s: %w", t.ID, c.Address, err)
	}
	defer cl.Close()
	ctx = namespaces.WithNamespace(ctx, t.Namespace)
	ctr, err := cl.LoadContainer(ctx, t.ID)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("evict %s: load container in namespace %s: %w", t.ID, t.Namespace, err)
	}
	task, err := ctr.Task(ctx, nil)
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("evict %s: load task: %w", t.ID, err)
	}
	exited, err := task.Wait(ctx)
	if err != nil {
		return fmt.Errorf("evict %s: wait for task: %w", t.ID, err)
	}
	if err := task.Kill(ctx, syscall.SIGTERM); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("evict %s: SIGTERM: %w", t.ID, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
	}
	if err := task.Kill(ctx, syscall.SIGKILL, containerd.WithKillAll); err != nil && !errdefs.IsNotFound(err) && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("evict %s: SIGKILL: %w", t.ID, err)
	}
	select {
	case <-exited:
	case <-time.After(2 * time.Second):
		return fmt.Errorf("evict %s: task still running 2s after SIGKILL", t.ID)
	}
	return nil
}
