package extender

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Kube is the little of the Kubernetes API the extender's bind verb uses: annotate a pod,
// then bind it. It speaks REST directly (a bearer token and the cluster's CA) rather than
// pulling client-go into muxmatch.
type Kube struct {
	// Server is the API server's URL, e.g. https://10.0.0.1:6443.
	Server string
	// Token is the bearer token (a service account's, with RBAC to patch pods and create
	// pods/binding).
	Token  string
	Client *http.Client
}

// InClusterPaths are where a pod finds its service account's token and the cluster CA.
const (
	inClusterToken = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	inClusterCA    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// NewKube builds a client from a server URL, a token file and a CA file; empty values
// fall back to the in-cluster service account (KUBERNETES_SERVICE_HOST/PORT and the
// mounted token and CA).
func NewKube(server, tokenFile, caFile string) (*Kube, error) {
	if server == "" {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return nil, fmt.Errorf("no Kubernetes API server: give --kube-server or run in a pod")
		}
		server = "https://" + strings.TrimSuffix(host+":"+port, ":")
		if strings.Contains(host, ":") {
			server = "https://[" + host + "]:" + port
		}
	}
	if tokenFile == "" {
		tokenFile = inClusterToken
	}
	if caFile == "" {
		caFile = inClusterCA
	}
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("Kubernetes API server %q is not an http(s) URL", server)
	}
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		return nil, fmt.Errorf("read the Kubernetes API token: %w", err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if u.Scheme == "https" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("read the Kubernetes API CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &Kube{Server: strings.TrimSuffix(server, "/"), Token: strings.TrimSpace(string(tok)),
		Client: &http.Client{Transport: tr, Timeout: 10 * time.Second}}, nil
}

func (k *Kube) do(ctx context.Context, method, path, ctype string, body any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, method, k.Server+path, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Accept", "application/json")
	if k.Token != "" {
		req.Header.Set("Authorization", "Bearer "+k.Token)
	}
	resp, err := k.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		var st struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(msg, &st) == nil && st.Message != "" {
			return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, st.Message)
		}
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	return nil
}

// Annotate merges annotations into a pod's metadata; uid guards against a pod of the
// same name created since the scheduler read it.
func (k *Kube) Annotate(ctx context.Context, ns, name, uid string, ann map[string]string) error {
	meta := map[string]any{"annotations": ann}
	if uid != "" {
		meta["uid"] = uid // a precondition: the patch fails on another pod of this name
	}
	return k.do(ctx, http.MethodPatch, "/api/v1/namespaces/"+url.PathEscape(ns)+"/pods/"+url.PathEscape(name),
		"application/merge-patch+json", map[string]any{"metadata": meta})
}

// Bind binds a pod to a node, as kube-scheduler's default binder does.
func (k *Kube) Bind(ctx context.Context, ns, name, uid, node string) error {
	b := map[string]any{
		"apiVersion": "v1", "kind": "Binding",
		"metadata": map[string]any{"name": name, "namespace": ns, "uid": uid},
		"target":   map[string]any{"apiVersion": "v1", "kind": "Node", "name": node},
	}
	return k.do(ctx, http.MethodPost, "/api/v1/namespaces/"+url.PathEscape(ns)+"/pods/"+url.PathEscape(name)+"/binding",
		"application/json", b)
}
