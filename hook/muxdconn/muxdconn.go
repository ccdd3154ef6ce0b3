// Package muxdconn is the small muxd client used on the container-creation path: by
// muxflow-hook's runtime wrapper (register, unregister) and its OCI hooks (start,
// unregister). It speaks the same /v1 API as muxd/client, with the same api types, but
// writes HTTP/1.1 by hand over the unix socket instead of linking net/http: every GPU
// container pays for three process starts of this code, and net/http's start-up alone
// costs more than the rest of a hook (measured in the package's benchmark and in the report
// of issue 5). Everything else — muxctl, muxmatch, tests — uses muxd/client.
package muxdconn

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/muxflow/muxflow/muxd/api"
)

// maxResponse bounds a response body; muxd's answers are a few KiB.
const maxResponse = 1 << 20

// ErrUnreachable wraps every failure to reach muxd at all (no socket, refused, timeout), so
// callers can apply the policy for "muxd is not running".
var ErrUnreachable = errors.New("muxd is not reachable")

// StatusError is muxd answering with a non-2xx status.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string { return fmt.Sprintf("muxd: %s (HTTP %d)", e.Message, e.Code) }

// Conn talks to the muxd listening on one unix socket. Each call is one connection.
type Conn struct {
	socket  string
	timeout time.Duration
}

// New returns a client for the socket; timeout bounds each call (0 means 5 seconds).
func New(socket string, timeout time.Duration) *Conn {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return &Conn{socket: socket, timeout: timeout}
}

// Register records a container at create time and returns it with its control paths.
func (c *Conn) Register(ctx context.Context, r api.RegisterRequest) (api.Container, error) {
	var ct api.Container
	return ct, c.do(ctx, "POST", "/containers", r, &ct)
}

// Start reports the container's host pid once its process exists.
func (c *Conn) Start(ctx context.Context, id string, pid int) (api.Container, error) {
	var ct api.Container
	return ct, c.do(ctx, "POST", "/containers/"+url.PathEscape(id)+"/start", api.StartRequest{PID: pid}, &ct)
}

// Unregister forgets a container; an unknown id is not an error.
func (c *Conn) Unregister(ctx context.Context, id string) error {
	err := c.do(ctx, "DELETE", "/containers/"+url.PathEscape(id), nil, nil)
	var se *StatusError
	if errors.As(err, &se) && se.Code == 404 {
		return nil
	}
	return err
}

func (c *Conn) do(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.socket)
	if err != nil {
		return fmt.Errorf("%w at %s: %v", ErrUnreachable, c.socket, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	var req bytes.Buffer
	fmt.Fprintf(&req, "%s %s%s HTTP/1.1\r\nHost: muxd\r\nUser-Agent: muxflow-hook\r\nConnection: close\r\n", method, api.Prefix, path)
	if in != nil {
		fmt.Fprintf(&req, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	req.WriteString("\r\n")
	req.Write(body)
	if _, err := conn.Write(req.Bytes()); err != nil {
		return fmt.Errorf("%w at %s: %v", ErrUnreachable, c.socket, err)
	}
	code, data, err := readResponse(bufio.NewReader(conn))
	if err != nil {
		// No usable answer (timeout, reset, garbage) is treated as no muxd at all, as
		// muxd/client does, so that the policy for a down muxd applies.
		return fmt.Errorf("%w at %s: reading the answer to %s %s: %v", ErrUnreachable, c.socket, method, path, err)
	}
	if code/100 != 2 {
		var e api.Error
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = fmt.Sprintf("status %d", code)
		}
		return &StatusError{Code: code, Message: e.Error}
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("decode muxd's answer to %s %s: %w", method, path, err)
		}
	}
	return nil
}

// readResponse reads one HTTP/1.1 response: status line, headers, and a body framed by
// Content-Length, chunked encoding, or the end of the connection.
func readResponse(r *bufio.Reader) (int, []byte, error) {
	line, err := readLine(r)
	if err != nil {
		return 0, nil, err
	}
	proto, rest, _ := strings.Cut(line, " ")
	codeStr, _, _ := strings.Cut(rest, " ")
	code, err := strconv.Atoi(codeStr)
	if !strings.HasPrefix(proto, "HTTP/1.") || err != nil || code < 100 || code > 999 {
		return 0, nil, fmt.Errorf("malformed status line %q", truncate(line))
	}
	length, chunked := -1, false
	for n := 0; ; n++ {
		h, err := readLine(r)
		if err != nil {
			return 0, nil, err
		}
		if h == "" {
			break
		}
		if n > 100 {
			return 0, nil, fmt.Errorf("too many headers")
		}
		k, v, ok := strings.Cut(h, ":")
		if !ok {
			return 0, nil, fmt.Errorf("malformed header %q", truncate(h))
		}
		v = strings.TrimSpace(v)
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "content-length":
			if length, err = strconv.Atoi(v); err != nil || length < 0 {
				return 0, nil, fmt.Errorf("bad Content-Length %q", truncate(v))
			}
		case "transfer-encoding":
			chunked = strings.EqualFold(v, "chunked")
		}
	}
	var body []byte
	switch {
	case code == 204 || code == 304 || code < 200:
	case chunked:
		body, err = readChunked(r)
	case length >= 0:
		if length > maxResponse {
			return 0, nil, fmt.Errorf("response of %d bytes is too large", length)
		}
		body = make([]byte, length)
		_, err = io.ReadFull(r, body)
	default:
		body, err = io.ReadAll(io.LimitReader(r, maxResponse+1))
		if err == nil && len(body) > maxResponse {
			err = fmt.Errorf("response is too large")
		}
	}
	if err != nil {
		return 0, nil, err
	}
	return code, body, nil
}

func readChunked(r *bufio.Reader) ([]byte, error) {
	var body []byte
	for {
		line, err := readLine(r)
		if err != nil {
			return nil, err
		}
		sizeStr, _, _ := strings.Cut(line, ";")
		size, err := strconv.ParseUint(strings.TrimSpace(sizeStr), 16, 32)
		if err != nil {
			return nil, fmt.Errorf("bad chunk size %q", truncate(line))
		}
		if size == 0 {
			for { // trailers, then the final empty line
				t, err := readLine(r)
				if err != nil || t == "" {
					return body, err
				}
			}
		}
		if len(body)+int(size) > maxResponse {
			return nil, fmt.Errorf("response is too large")
		}
		chunk := make([]byte, size+2)
		if _, err := io.ReadFull(r, chunk); err != nil {
			return nil, err
		}
		if !bytes.HasSuffix(chunk, []byte("\r\n")) {
			return nil, fmt.Errorf("chunk not terminated by CRLF")
		}
		body = append(body, chunk[:size]...)
	}
}

// readLine reads a CRLF- (or LF-) terminated line of at most 8 KiB.
func readLine(r *bufio.Reader) (string, error) {
	var b []byte
	for {
		frag, isPrefix, err := r.ReadLine()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
		b = append(b, frag...)
		if len(b) > 8<<10 {
			return "", fmt.Errorf("line longer than 8 KiB")
		}
		if !isPrefix {
			return string(b), nil
		}
	}
}

func truncate(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}
