// Package client is the Go client of muxd's API over its unix socket. muxctl, the OCI hook
// and muxmatch use it; it is also how the end-to-end tests drive a real muxd.
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
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://muxd"+api.Prefix+path, body)
	if err != nil {
		return fmt.Errorf("build request: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w at %s: %v", ErrUnreachable, c.socket, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("read response of %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e api.Error
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = http.StatusText(resp.StatusCode)
		}
		return &StatusError{Code: resp.StatusCode, Message: e.Error}
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("decode response of %s %s: %w", method, path, err)
		}
	}
	return nil
}

// Node returns the node's description.
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
// (a *[]monitor.Event). It takes the destination so that this client, which the OCI
// hook links, does not pull in the monitor and its metrics libraries.
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
