// Package kubeapi is the little of the Kubernetes API muxflow speaks — muxd evicts pods,
// the scheduler extender annotates and binds them — over plain REST with a bearer token
// and the cluster's CA, so that neither muxd nor muxmatch pulls in client-go. It owns how
// a client finds its API server (flags, else the pod's service account) and how an
// answer that is not 2xx becomes an error.
package kubeapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Where a pod finds its service account's token and the cluster's CA.
const (
	inClusterToken = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	inClusterCA    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// ErrNotInCluster: no API server was given and the process does not run in a pod.
var ErrNotInCluster = errors.New("not running in a Kubernetes pod (KUBERNETES_SERVICE_HOST is empty)")

// Client calls one API server.
type Client struct {
	// Server is the API server's base URL, e.g. https://10.0.0.1:6443.
	Server string
	// Token is the bearer token ("" sends none).
	Token string
	// HTTP is the client used (with the cluster's CA); nil: http.DefaultClient.
	HTTP *http.Client
}

// Connect builds a client from a server URL, a token file and a CA file; empty values
// fall back to the pod's service account (KUBERNETES_SERVICE_HOST/PORT and the mounted
// token and CA). An http:// server needs no CA.
func Connect(server, tokenFile, caFile string) (*Client, error) {
	if server == "" {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return nil, ErrNotInCluster
		}
		server = "https://" + net.JoinHostPort(host, port)
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
	return &Client{Server: strings.TrimSuffix(server, "/"), Token: strings.TrimSpace(string(tok)),
		HTTP: &http.Client{Transport: tr, Timeout: 10 * time.Second}}, nil
}

// StatusError is an answer outside 2xx.
type StatusError struct {
	Method, Path string
	Code         int
	Status       string // e.g. "404 Not Found"
	// Message is the API's Status message, else the body (trimmed, at most 4 KiB).
	Message string
}

func (e *StatusError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("%s %s: %s", e.Method, e.Path, e.Status)
	}
	return fmt.Sprintf("%s %s: %s: %s", e.Method, e.Path, e.Status, e.Message)
}

// Do sends body as JSON with content type ctype to Server+path; an answer outside 2xx is
// a *StatusError.
func (c *Client) Do(ctx context.Context, method, path, ctype string, body any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return c.do(ctx, method, path, ctype, bytes.NewReader(data), nil)
}

// Get reads Server+path into out (JSON, at most 1 MiB); an answer outside 2xx is a
// *StatusError.
func (c *Client) Get(ctx context.Context, path string, out any) error {
	return c.do(ctx, http.MethodGet, path, "", nil, out)
}

func (c *Client) do(ctx context.Context, method, path, ctype string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.Server, "/")+path, body)
	if err != nil {
		return err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("Accept", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 && out != nil {
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out); err != nil {
			return fmt.Errorf("%s %s: decode the answer: %w", method, path, err)
		}
		return nil
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	e := &StatusError{Method: method, Path: path, Code: resp.StatusCode, Status: resp.Status, Message: string(bytes.TrimSpace(msg))}
	var st struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(msg, &st) == nil {
		e.Message = st.Message
	}
	return e
}

// PodPath is the API path of a pod, with what follows it (e.g. "/binding").
func PodPath(ns, name, sub string) string {
	return "/api/v1/namespaces/" + url.PathEscape(ns) + "/pods/" + url.PathEscape(name) + sub
}
