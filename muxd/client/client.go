// Package client is the Go client of muxd's API over its unix socket. muxctl, the runtime
// wrapper's slow path and muxmatch use it; it is also how the end-to-end tests drive a real muxd.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/muxflow/muxflow/muxd/api"
)

// Client talks to one muxd.
type Client struct {
	socket string
	http   *http.Client
}

// New returns a client for the muxd listening on the unix socket at path.
// timeout bounds each request; 0 means 5 seconds.
func New(socket string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConns:      2,
		DisableKeepAlives: false,
		// muxd closes a keep-alive connection idle for 30 s; dropping ours sooner
		// keeps a request from being sent on a connection muxd is closing.
		IdleConnTimeout: 20 * time.Second,
	}
	return &Client{socket: socket, http: &http.Client{Transport: tr, Timeout: timeout}}
}

// StatusError is returned when muxd answered with a non-2xx status.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string { return fmt.Sprintf("muxd: %s (HTTP %d)", e.Message, e.Code) }

// ErrUnreachable wraps every failure to reach muxd at all (no socket, refused, timeout),
// so callers can apply the policy for "muxd is not running".
var ErrUnreachable = errors.New("muxd is not reachable")

// IsNotFound reports whether err is muxd saying the object does not exist.
func IsNotFound(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == http.StatusNotFound
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
	}
	_, data, err := c.raw(ctx, method, path, body, in != nil)
	if err != nil {
		return err
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("decode response of %s %s: %w", method, path, err)
		}
	}
	return nil
}

// raw sends one request with an optional JSON body and returns a 2xx answer's status and
// body. Errors are a *StatusError (from muxd's JSON error or text/plain sentence) or wrap
// ErrUnreachable.
func (c *Client) raw(ctx context.Context, method, path string, body []byte, hasBody bool) (int, []byte, error) {
	var rd io.Reader
	if hasBody {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://muxd"+api.Prefix+path, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("build request: %w", err)
	}
	if hasBody {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%w at %s: %v", ErrUnreachable, c.socket, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("read response of %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e api.Error
		switch {
		case strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain"):
			e.Error = strings.TrimSpace(string(data))
		case json.Unmarshal(data, &e) != nil || e.Error == "":
			e.Error = http.StatusText(resp.StatusCode)
		}
		return 0, nil, &StatusError{Code: resp.StatusCode, Message: e.Error}
	}
	return resp.StatusCode, data, nil
}

func (c *Client) Node(ctx context.Context) (api.NodeInfo, error) {
	r, err := c.NodeReport(ctx)
	return r.Node, err
}

// NodeReport returns the node with its GPUs' workload profiles and co-location records.
func (c *Client) NodeReport(ctx context.Context) (api.NodeReport, error) {
	var r api.NodeReport
	return r, c.do(ctx, http.MethodGet, "/node", nil, &r)
}

// GPUs returns the GPU inventory.
func (c *Client) GPUs(ctx context.Context) ([]api.GPU, error) {
	var g []api.GPU
	return g, c.do(ctx, http.MethodGet, "/gpus", nil, &g)
}

// Containers lists registered containers.
func (c *Client) Containers(ctx context.Context) ([]api.Container, error) {
	var cs []api.Container
	return cs, c.do(ctx, http.MethodGet, "/containers", nil, &cs)
}

// Container returns one registered container.
func (c *Client) Container(ctx context.Context, id string) (api.Container, error) {
	var ct api.Container
	return ct, c.do(ctx, http.MethodGet, "/containers/"+url.PathEscape(id), nil, &ct)
}

// Register records a container at create time and returns it with its control paths.
func (c *Client) Register(ctx context.Context, r api.RegisterRequest) (api.Container, error) {
	var ct api.Container
	return ct, c.do(ctx, http.MethodPost, "/containers", r, &ct)
}

// Start reports the container's host pid once its process exists.
func (c *Client) Start(ctx context.Context, id string, pid int) (api.Container, error) {
	var ct api.Container
	return ct, c.do(ctx, http.MethodPost, "/containers/"+url.PathEscape(id)+"/start", api.StartRequest{PID: pid}, &ct)
}

// Unregister forgets a container; unregistering an unknown id is not an error.
func (c *Client) Unregister(ctx context.Context, id string) error {
	err := c.do(ctx, http.MethodDelete, "/containers/"+url.PathEscape(id), nil, nil)
	if IsNotFound(err) {
		return nil
	}
	return err
}

// Events decodes the GPU monitor's log of health transitions and faults into out
// (a *[]monitor.Event). It takes the destination so that this client, which
// muxflow-wrapper links, does not pull in the monitor and its metrics libraries.
func (c *Client) Events(ctx context.Context, out any) error {
	return c.do(ctx, http.MethodGet, "/events", nil, out)
}

// Policy returns the policy in force.
func (c *Client) Policy(ctx context.Context) (api.PolicyInfo, error) {
	var p api.PolicyInfo
	return p, c.do(ctx, http.MethodGet, "/policy", nil, &p)
}

// ReloadPolicy asks muxd to re-read its policy file.
func (c *Client) ReloadPolicy(ctx context.Context) (api.PolicyInfo, error) {
	var p api.PolicyInfo
	return p, c.do(ctx, http.MethodPost, "/policy/reload", nil, &p)
}

// CreateForRuntime sends a container's config.json as muxflow-runtime does on create
// (POST /v1/runtime/create). It returns the wired config.json for a GPU container that muxd
// registered, or nil when the container asks for no GPU and must run unchanged.
func (c *Client) CreateForRuntime(ctx context.Context, id, bundle, hook string, spec []byte) ([]byte, error) {
	q := url.Values{"id": {id}, "bundle": {bundle}, "hook": {hook}}
	code, data, err := c.raw(ctx, "POST", "/runtime/create?"+q.Encode(), spec, true)
	if err != nil || code == http.StatusNoContent {
		return nil, err
	}
	return data, nil
}
