package evict

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/muxflow/muxflow/muxd/kubeapi"
)

// Kubernetes evicts a container's pod through the Eviction API, so that its controller
// reschedules it elsewhere (PodDisruptionBudgets are honoured by the API server). A
// target without a pod, or whose pod has not gone within the grace period, falls back
// to Fallback.
type Kubernetes struct {
	// Server is the API server's base URL (https://host:port).
	Server string
	// Token is the service account's bearer token.
	Token string
	// HTTP is the client used (with the cluster's CA); nil: http.DefaultClient.
	HTTP *http.Client
	// Fallback stops what the API could not.
	Fallback Stopper
}

// InCluster configures the client the way pods reach their API server.
func InCluster(fallback Stopper) (*Kubernetes, error) {
	c, err := kubeapi.Connect("", "", "")
	if errors.Is(err, kubeapi.ErrNotInCluster) {
		return nil, fmt.Errorf("evict.kubernetes is set but muxd does not run in a Kubernetes pod (KUBERNETES_SERVICE_HOST is empty)")
	}
	if err != nil {
		return nil, err
	}
	return &Kubernetes{Server: c.Server, Token: c.Token, HTTP: c.HTTP, Fallback: fallback}, nil
}

// Stop asks the API server to evict the target's pod and waits up to grace for its
// process to go; what is left is stopped by the fallback.
func (k *Kubernetes) Stop(ctx context.Context, t Target, grace time.Duration) error {
	ns, name, ok := strings.Cut(t.Pod, "/")
	if !ok || ns == "" || name == "" {
		return k.Fallback.Stop(ctx, t, grace)
	}
	if err := k.evict(ctx, ns, name, grace); err != nil {
		return fmt.Errorf("evict pod %s: %w", t.Pod, err)
	}
	if t.PID > 0 && waitGone(ctx, t.PID, grace) {
		return nil
	}
	return k.Fallback.Stop(ctx, t, time.Second)
}

func (k *Kubernetes) evict(ctx context.Context, ns, name string, grace time.Duration) error {
	api := kubeapi.Client{Server: k.Server, Token: k.Token, HTTP: k.HTTP}
	err := api.Do(ctx, http.MethodPost, kubeapi.PodPath(ns, name, "/eviction"), "application/json", map[string]any{
		"apiVersion":    "policy/v1",
		"kind":          "Eviction",
		"metadata":      map[string]string{"name": name, "namespace": ns},
		"deleteOptions": map[string]any{"gracePeriodSeconds": int64(grace / time.Second)},
	})
	var st *kubeapi.StatusError
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &st):
		return err
	case st.Code == http.StatusNotFound:
		return nil // gone already
	case st.Code == http.StatusTooManyRequests:
		return fmt.Errorf("a PodDisruptionBudget forbids it now (HTTP 429): %s", st.Message)
	}
	return fmt.Errorf("API server answered HTTP %d: %s", st.Code, st.Message)
}
