package muxdconn

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/client"
)

// serve runs h on a unix socket, like muxd, and returns the socket path.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mdc")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close(); os.RemoveAll(dir) })
	return sock
}

func fakeMuxd(t *testing.T, chunked bool) (string, *[]string) {
	var seen []string
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		b, _ := json.Marshal(v)
		if chunked { // several writes with flushes force chunked transfer encoding
			for len(b) > 0 {
				n := min(7, len(b))
				w.Write(b[:n])
				w.(http.Flusher).Flush()
				b = b[n:]
			}
			return
		}
		w.Write(b)
	}
	mux.HandleFunc("POST /v1/containers", func(w http.ResponseWriter, r *http.Request) {
		var req api.RegisterRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Validate() != nil {
			reply(w, 400, api.Error{Error: "bad registration"})
			return
		}
		seen = append(seen, "register "+req.ID)
		reply(w, 201, api.Container{RegisterRequest: req, State: api.StateCreated, Control: api.ControlPaths{Dir: "/run/muxflow/c/" + req.ID}})
	})
	mux.HandleFunc("POST /v1/containers/{id}/start", func(w http.ResponseWriter, r *http.Request) {
		var req api.StartRequest
		json.NewDecoder(r.Body).Decode(&req)
		seen = append(seen, "start "+r.PathValue("id"))
		reply(w, 200, api.Container{RegisterRequest: api.RegisterRequest{ID: r.PathValue("id")}, PID: req.PID, State: api.StateRunning})
	})
	mux.HandleFunc("DELETE /v1/containers/{id}", func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, "delete "+r.PathValue("id"))
		if r.PathValue("id") == "unknown" {
			reply(w, 404, api.Error{Error: "no container unknown"})
			return
		}
		if r.PathValue("id") == "broken" {
			reply(w, 500, api.Error{Error: "disk full"})
			return
		}
		w.WriteHeader(204)
	})
	return serve(t, mux), &seen
}

func TestCalls(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		sock, seen := fakeMuxd(t, chunked)
		c := New(sock, time.Second)
		ctx := context.Background()
		req := api.RegisterRequest{ID: "c1", Class: api.Offline, GPUs: []string{"0"}, Limits: api.Limits{SMPercent: 30}}
		got, err := c.Register(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(req, got.RegisterRequest); diff != "" || got.Control.Dir != "/run/muxflow/c/c1" {
			t.Errorf("chunked=%v: register answer %+v (-want +got):\n%s", chunked, got, diff)
		}
		if ct, err := c.Start(ctx, "c1", 4242); err != nil || ct.PID != 4242 || ct.State != api.StateRunning {
			t.Errorf("start: %+v %v", ct, err)
		}
		if err := c.Unregister(ctx, "c1"); err != nil {
			t.Error(err)
		}
		if err := c.Unregister(ctx, "unknown"); err != nil {
			t.Errorf("unknown id: %v", err)
		}
		var se *StatusError
		if err := c.Unregister(ctx, "broken"); !errors.As(err, &se) || se.Code != 500 || se.Message != "disk full" {
			t.Errorf("broken: %v", err)
		}
		if _, err := c.Register(ctx, api.RegisterRequest{ID: "../x"}); !errors.As(err, &se) || se.Code != 400 {
			t.Errorf("bad registration: %v", err)
		}
		want := []string{"register c1", "start c1", "delete c1", "delete unknown", "delete broken"}
		if diff := cmp.Diff(want, *seen); diff != "" {
			t.Errorf("requests (-want +got):\n%s", diff)
		}
	}
}

// TestAgreesWithMuxdClient sends the same calls through muxd/client and this package to
// the same server and compares the answers.
func TestAgreesWithMuxdClient(t *testing.T) {
	sock, _ := fakeMuxd(t, false)
	ctx := context.Background()
	req := api.RegisterRequest{ID: "same", Class: api.Online, GPUs: []string{"all"}}
	a, err1 := New(sock, time.Second).Register(ctx, req)
	b, err2 := client.New(sock, time.Second).Register(ctx, req)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if diff := cmp.Diff(b, a); diff != "" {
		t.Errorf("(-muxd/client +muxdconn):\n%s", diff)
	}
}

// rawServer answers every connection with fixed bytes (or nothing, when hang).
func rawServer(t *testing.T, answer string, hang bool) string {
	t.Helper()
	dir, _ := os.MkdirTemp("", "mdc")
	sock := filepath.Join(dir, "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); os.RemoveAll(dir) })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				for { // read the request head
					line, err := r.ReadString('\n')
					if err != nil || line == "\r\n" {
						break
					}
				}
				if hang {
					time.Sleep(2 * time.Second)
					return
				}
				conn.Write([]byte(answer))
			}()
		}
	}()
	return sock
}

func TestUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name string
		sock func(t *testing.T) string
	}{
		{"no socket", func(t *testing.T) string { return filepath.Join(t.TempDir(), "none") }},
		{"hangs", func(t *testing.T) string { return rawServer(t, "", true) }},
		{"closes", func(t *testing.T) string { return rawServer(t, "", false) }},
		{"garbage", func(t *testing.T) string { return rawServer(t, "SSH-2.0-OpenSSH\r\n\r\n", false) }},
		{"huge body", func(t *testing.T) string {
			return rawServer(t, "HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n{}", false)
		}},
		{"bad chunk", func(t *testing.T) string {
			return rawServer(t, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", false)
		}},
		{"endless header", func(t *testing.T) string {
			return rawServer(t, "HTTP/1.1 200 OK\r\nX: "+strings.Repeat("a", 10000)+"\r\n\r\n", false)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := New(tc.sock(t), 300*time.Millisecond).Unregister(context.Background(), "c1")
			if !errors.Is(err, ErrUnreachable) {
				t.Errorf("err = %v, want ErrUnreachable", err)
			}
		})
	}
}

func TestBodyUntilClose(t *testing.T) {
	sock := rawServer(t, "HTTP/1.0 200 OK\r\n\r\n{\"id\":\"c1\",\"pid\":7,\"state\":\"running\"}", false)
	ct, err := New(sock, time.Second).Start(context.Background(), "c1", 7)
	if err != nil || ct.PID != 7 {
		t.Errorf("%+v %v", ct, err)
	}
}
