package evict

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
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

// In-cluster service account files, mounted into muxd's pod by Kubernetes.
const (
	saToken = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	saCA    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// InCluster configures the client the way pods reach their API server.
func InCluster(fallback Stopper) (*Kubernetes, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, fmt.Errorf("evict.kubernetes is set but muxd does not run in a Kubernetes pod (KUBERNETES_SERVICE_HOST is empty)")
	}
	token, err := os.ReadFile(saToken)
	if err != nil {
		return nil, fmt.Errorf("read service account token: %w", err)
	}
	ca, err := os.ReadFile(saCA)
	if err != nil {
		return nil, fmt.Errorf("read cluster CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("cluster CA %s holds no certificate", saCA)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	return &Kubernetes{Server: "https://" + net.JoinHostPort(host, port), Token: strings.TrimSpace(string(token)), HTTP: hc, Fallback: fallback}, nil
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
	secs := int64(grace / time.Second)
	body, _ := json.Marshal(map[string]any{
		"apiVersion":    "policy/v1",
		"kind":          "Eviction",
		"metadata":      map[string]string{"name": name, "namespace": ns},
		"deleteOptions": map[string]any{"gracePeriodSeconds": secs},
	})
	u := fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s/eviction", strings.TrimSuffix(k.Server, "/"), url.PathEscape(ns), url.PathEscape(name))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+k.Token)
	hc := k.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch {
	case resp.StatusCode/100 == 2, resp.StatusCode == http.StatusNotFound:
		return nil
	case resp.StatusCode == http.StatusTooManyRequests:
		return fmt.Errorf("a PodDisruptionBudget forbids it now (HTTP 429): %s", bytes.TrimSpace(msg))
	}
	return fmt.Errorf("API server answered HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
}
