package simd

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/muxflow/muxflow/gpusim/sim"
)

// TestWireLayoutMatchesHeader compiles gsproto.h and checks every message
// size against the Go side's expectations.
func TestWireLayoutMatchesHeader(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatal("gcc is needed to check gsproto.h (tests/deps.sh installs it)")
	}
	_, file, _, _ := runtime.Caller(0)
	inc := filepath.Join(filepath.Dir(file), "..", "driver")
	dir := t.TempDir()
	src := `#include <stdio.h>
#include <stddef.h>
#include "gsproto.h"
#define S(op, t) printf("%d %zu\n", op, sizeof(struct t) - sizeof(struct gs_hdr));
int main(void) {
S(GS_HELLO, gs_hello) S(GS_DEV_INFO, gs_dev_info) S(GS_CTX_CREATE, gs_ctx_create)
S(GS_CTX_DESTROY, gs_u32x2) S(GS_STREAM_CREATE, gs_u32x2) S(GS_STREAM_DESTROY, gs_u32x2)
S(GS_MODULE_LOAD, gs_module_load) S(GS_MODULE_UNLOAD, gs_u32x2) S(GS_FUNC_GET, gs_func_get)
S(GS_LAUNCH, gs_launch) S(GS_COPY, gs_copy) S(GS_EVENT_CREATE, gs_u32x2) S(GS_EVENT_DESTROY, gs_u32x2)
S(GS_EVENT_RECORD, gs_u32x2) S(GS_STREAM_WAIT_EVENT, gs_u32x2) S(GS_SYNC, gs_u32x2) S(GS_QUERY, gs_u32x2)
S(GS_EVENT_ELAPSED, gs_u32x2) S(GS_MEM_ALLOC, gs_mem_alloc) S(GS_MEM_FREE, gs_mem_free) S(GS_MEM_INFO, gs_u32x2)
S(GS_GREEN_CTX_CREATE, gs_green_ctx_create)
printf("hdr %zu reply %zu devinfo %zu ctxreply %zu\n", sizeof(struct gs_hdr), sizeof(struct gs_reply),
       sizeof(struct gs_dev_info_reply) - sizeof(struct gs_reply),
       sizeof(struct gs_ctx_create_reply) - sizeof(struct gs_reply));
printf("ctx_atp %zu ctx_lim %zu ctx_prio %zu\n", offsetof(struct gs_ctx_create, atp) - sizeof(struct gs_hdr),
       offsetof(struct gs_ctx_create, mem_limit) - sizeof(struct gs_hdr),
       offsetof(struct gs_ctx_create, priority) - sizeof(struct gs_hdr));
printf("event_done %d %zu gen %zu at %zu\n", GS_EVENT_DONE, sizeof(struct gs_event_done),
       offsetof(struct gs_event_done, gen), offsetof(struct gs_event_done, at_ns));
return 0; }`
	if err := os.WriteFile(filepath.Join(dir, "p.c"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "p")
	if out, err := exec.Command(gcc, "-std=c11", "-I", inc, "-o", bin, filepath.Join(dir, "p.c")).CombinedOutput(); err != nil {
		t.Fatalf("compile: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint16]int{}
	var tail []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var op uint16
		var n int
		if _, err := fmt.Sscanf(l, "%d %d", &op, &n); err == nil {
			got[op] = n
		} else {
			tail = append(tail, l)
		}
	}
	if diff := cmp.Diff(payloadSize, got); diff != "" {
		t.Errorf("payload sizes (-go +C):\n%s", diff)
	}
	want := []string{fmt.Sprintf("hdr %d reply %d devinfo 208 ctxreply 24", hdrSize, replySize), "ctx_atp 16 ctx_lim 24 ctx_prio 32",
		fmt.Sprintf("event_done %d %d gen 24 at 32", opEventDone, eventDoneSize)}
	if diff := cmp.Diff(want, tail); diff != "" {
		t.Errorf("layout (-go +C):\n%s", diff)
	}
}

func serve(t *testing.T) string {
	t.Helper()
	p, _ := sim.LookupProfile("h100")
	s, err := sim.New(sim.Config{Devices: []sim.Profile{p}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	sock := filepath.Join(t.TempDir(), "s.sock")
	sv, err := Listen(sock, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = sv.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return sock
}

func TestListenRefusesASecondDaemon(t *testing.T) {
	sock := serve(t)
	p, _ := sim.LookupProfile("t4")
	s, _ := sim.New(sim.Config{Devices: []sim.Profile{p}})
	defer s.Close()
	if _, err := Listen(sock, s, nil); err == nil {
		t.Error("a second daemon took over a live socket")
	}
}

func TestMalformedDriverTrafficClosesOnlyThatConnection(t *testing.T) {
	sock := serve(t)
	le := binary.LittleEndian
	tests := []struct {
		name string
		msg  []byte
	}{
		{"wrong magic", []byte("NOTMAGIC")},
		{"op before hello", append([]byte(magic), hdr(opLaunch, 48)...)},
		{"unknown op", append([]byte(magic), hdr(999, 24)...)},
		{"short payload", append([]byte(magic), hdr(opHello, 20)...)},
		{"huge length", append([]byte(magic), hdr(opHello, maxMsg+1)...)},
	}
	for _, tc := range tests {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(tc.msg)
		c.Write(make([]byte, 64))
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		// closed: EOF or reset, anything but a read timeout
		if _, err := io.ReadAll(c); err != nil && os.IsTimeout(err) {
			t.Errorf("%s: connection not closed: %v", tc.name, err)
		}
		c.Close()
	}
	// the daemon still serves a well-formed client
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := append([]byte(magic), hdr(opHello, 32)...)
	le.PutUint64(m[len(magic)+8:], 7) // request id
	body := make([]byte, 16)
	le.PutUint32(body[0:], 42)
	le.PutUint32(body[8:], protoVersion)
	c.Write(append(m, body...))
	rep := make([]byte, 32)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, rep); err != nil {
		t.Fatal(err)
	}
	if le.Uint16(rep[4:]) != opReply || le.Uint64(rep[8:]) != 7 || le.Uint32(rep[16:]) != 0 || le.Uint32(rep[24:]) != 1 {
		t.Errorf("hello reply %x", rep)
	}
}

func hdr(op uint16, n uint32) []byte {
	b := make([]byte, hdrSize)
	binary.LittleEndian.PutUint32(b[0:], n)
	binary.LittleEndian.PutUint16(b[4:], op)
	return b
}

func TestJSONRequests(t *testing.T) {
	sock := serve(t)
	tests := []struct {
		req     string
		wantErr string
	}{
		{`{"op":"ping"}`, ""},
		{`{"op":"nope"}`, `unknown op "nope"`},
		{`{"op":`, "bad request"},
		{`{"op":"fault"}`, "fault request needs a fault"},
		{`{"op":"fault","fault":{"device":3,"xid":13}}`, "does not exist"},
		{`{"op":"hang","device":-1,"hung":true}`, "does not exist"},
		{`{"op":"power_limit","device":0,"watts":5000}`, "out of range"},
		{`{"op":"mps_register","pid":10,"atp":500}`, "out of range"},
		{`{"op":"mps_register","pid":10,"atp":50,"mem_limits":{"x":1}}`, "not a device index"},
		{`{"op":"mps_set","pid":12345,"atp":50}`, "no MPS server"},
		{`{"op":"mps_terminate","pid":12345,"client":1}`, "no MPS server"},
	}
	for _, tc := range tests {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(c, tc.req)
		var r Response
		if err := json.NewDecoder(bufio.NewReader(c)).Decode(&r); err != nil {
			t.Fatalf("%s: %v", tc.req, err)
		}
		c.Close()
		if tc.wantErr == "" && r.Error != "" || !strings.Contains(r.Error, tc.wantErr) {
			t.Errorf("%s: error %q, want %q", tc.req, r.Error, tc.wantErr)
		}
	}
}

func TestParseGPUs(t *testing.T) {
	tests := []struct {
		spec string
		want []string
		ok   bool
	}{
		{"h100", []string{"NVIDIA H100 80GB HBM3"}, true},
		{"t4,a100", []string{"Tesla T4", "NVIDIA A100-SXM4-80GB"}, true},
		{"h200x2", []string{"NVIDIA H200", "NVIDIA H200"}, true},
		{"h200x0", nil, false},
		{"v100", nil, false},
		{"", nil, false},
	}
	for _, tc := range tests {
		got, err := ParseGPUs(tc.spec)
		if (err == nil) != tc.ok {
			t.Errorf("%q: err %v", tc.spec, err)
			continue
		}
		var names []string
		for _, p := range got {
			names = append(names, p.Name)
		}
		if diff := cmp.Diff(tc.want, names); diff != "" {
			t.Errorf("%q (-want +got):\n%s", tc.spec, diff)
		}
	}
}

// TestPeerCredentialIsTheIdentity: gpusimd files a process under the pid and uid the
// kernel gives for its connection (SO_PEERCRED), not under what it says about itself —
// inside a container getpid() is the container's pid, not the host's.
func TestPeerCredentialIsTheIdentity(t *testing.T) {
	sock := serve(t)
	le := binary.LittleEndian
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer, ok := PeerOf(c)
	if !ok || peer.PID != os.Getpid() || peer.UID != os.Getuid() {
		t.Fatalf("PeerOf(own connection) = %+v %v, want pid %d uid %d", peer, ok, os.Getpid(), os.Getuid())
	}

	// A driver connection that claims pid 1 and uid 4242 (a process in its own pid and
	// user namespaces would), then allocates memory so that it shows in the stats.
	m := append([]byte(magic), hdr(opHello, 32)...)
	le.PutUint64(m[len(magic)+8:], 1)
	body := make([]byte, 16)
	le.PutUint32(body[0:], 1)
	le.PutUint32(body[4:], 4242)
	le.PutUint32(body[8:], protoVersion)
	c.Write(append(m, body...))
	ctx := make([]byte, payloadSize[opCtxCreate])
	le.PutUint32(ctx[0:], 5) // context id 5 on device 0, default stream 1, no MPS
	le.PutUint32(ctx[8:], 1)
	le.PutUint64(ctx[16:], math.Float64bits(100))
	mh := hdr(opCtxCreate, uint32(hdrSize+len(ctx)))
	le.PutUint64(mh[8:], 2)
	c.Write(append(mh, ctx...))
	alloc := make([]byte, payloadSize[opMemAlloc])
	le.PutUint32(alloc[0:], 5)
	le.PutUint64(alloc[8:], 1<<30)
	ah := hdr(opMemAlloc, uint32(hdrSize+len(alloc)))
	le.PutUint64(ah[8:], 3)
	c.Write(append(ah, alloc...))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for want := uint64(1); want <= 3; want++ {
		h := make([]byte, replySize)
		if _, err := io.ReadFull(c, h); err != nil {
			t.Fatal(err)
		}
		if id, res := le.Uint64(h[8:]), int32(le.Uint32(h[16:])); id != want || res != 0 {
			t.Fatalf("reply %d: id %d result %d", want, id, res)
		}
		if _, err := io.ReadFull(c, make([]byte, le.Uint32(h[0:])-replySize)); err != nil {
			t.Fatal(err)
		}
	}
	st := jsonCall(t, sock, `{"op":"stats"}`)
	var pids []int
	for _, p := range st.Devices[0].Processes {
		pids = append(pids, p.PID)
	}
	if diff := cmp.Diff([]int{os.Getpid()}, pids); diff != "" {
		t.Errorf("processes in the stats (-want +got):\n%s", diff)
	}
	// The packed answer carries the same devices (what a sampler asks for).
	packed := jsonCall(t, sock, `{"op":"stats","packed":true}`)
	devs, err := sim.DecodeStats(packed.Packed)
	if err != nil || packed.Devices != nil {
		t.Fatalf("packed stats: %v (devices also in JSON: %d)", err, len(packed.Devices))
	}
	if len(devs) != len(st.Devices) || devs[0].UUID != st.Devices[0].UUID || len(devs[0].Processes) != 1 ||
		devs[0].Processes[0].PID != os.Getpid() || devs[0].MemTotal != st.Devices[0].MemTotal {
		t.Errorf("packed stats %+v, JSON %+v", devs, st.Devices)
	}

	// An MPS server registers itself: under its connection's pid, whatever it claims.
	reg, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	fmt.Fprintln(reg, `{"op":"mps_register","pid":10,"uid":0,"atp":50}`)
	var r Response
	if err := json.NewDecoder(bufio.NewReader(reg)).Decode(&r); err != nil || r.Error != "" {
		t.Fatalf("register: %v %q", err, r.Error)
	}
	if s := jsonCall(t, sock, `{"op":"mps_servers"}`).Servers; len(s) != 1 || s[0].PID != os.Getpid() {
		t.Errorf("servers %+v, want one with pid %d", s, os.Getpid())
	}
}

func jsonCall(t *testing.T, sock, req string) Response {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintln(c, req)
	var r Response
	if err := json.NewDecoder(bufio.NewReader(c)).Decode(&r); err != nil || r.Error != "" {
		t.Fatalf("%s: %v %q", req, err, r.Error)
	}
	return r
}

func TestIdentity(t *testing.T) {
	tests := []struct {
		name     string
		peer     Peer
		known    bool
		pid, uid int
	}{
		{"kernel's word wins", Peer{PID: 4711, UID: 1000}, true, 4711, 1000},
		{"peer in a pid namespace we cannot see", Peer{PID: 0, UID: 1000}, true, 7, 1000},
		{"no peer credential", Peer{}, false, 7, 3},
	}
	for _, tc := range tests {
		pid, uid := identity(tc.peer, tc.known, 7, 3)
		if pid != tc.pid || uid != tc.uid {
			t.Errorf("%s: identity = %d, %d, want %d, %d", tc.name, pid, uid, tc.pid, tc.uid)
		}
	}
}

// driverConn opens a driver connection that says hello and creates context 5 on device 0
// (default stream 1), reading neither reply.
func driverConn(t *testing.T, sock string) net.Conn {
	t.Helper()
	le := binary.LittleEndian
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	m := append([]byte(magic), hdr(opHello, 32)...)
	le.PutUint64(m[len(magic)+8:], 1)
	body := make([]byte, 16)
	le.PutUint32(body[8:], protoVersion)
	ctx := make([]byte, payloadSize[opCtxCreate])
	le.PutUint32(ctx[0:], 5)
	le.PutUint32(ctx[8:], 1)
	mh := hdr(opCtxCreate, uint32(hdrSize+len(ctx)))
	le.PutUint64(mh[8:], 2)
	if _, err := c.Write(append(append(append(m, body...), mh...), ctx...)); err != nil {
		t.Fatal(err)
	}
	return c
}

// ids is a gs_u32x2 message.
func ids(op uint16, id uint64, a, b uint32) []byte {
	m := hdr(op, hdrSize+8)
	binary.LittleEndian.PutUint64(m[8:], id)
	return binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(m, a), b)
}

// A process that records events and never reads its socket (event completions pile up
// for it) stalls no one: another process's syncs are answered, and the slow one's
// connection stays open, its completions beyond the queue dropped, its replies kept.
func TestSlowReaderStallsNoOne(t *testing.T) {
	sock := serve(t)
	slow := driverConn(t, sock)
	var burst []byte
	burst = append(burst, ids(opEventCreate, 0, 5, 10)...)
	for range 20000 {
		burst = append(burst, ids(opEventRecord, 0, 10, 1)...)
	}
	go slow.Write(burst) // may block once gpusimd stops reading it: it is not read either
	busy := driverConn(t, sock)
	le := binary.LittleEndian
	_ = busy.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(busy, make([]byte, replySize+8+replySize+24)); err != nil { // hello, ctx create
		t.Fatal(err)
	}
	for i := range 50 {
		id := uint64(100 + i)
		if _, err := busy.Write(ids(opSync, id, 1, 1)); err != nil {
			t.Fatal(err)
		}
		rep := make([]byte, replySize)
		if _, err := io.ReadFull(busy, rep); err != nil {
			t.Fatalf("sync %d of a busy process while another does not read: %v", i, err)
		}
		if le.Uint16(rep[4:]) != opReply || le.Uint64(rep[8:]) != id {
			t.Fatalf("sync %d: reply %x", i, rep)
		}
	}
	time.Sleep(3 * time.Second) // longer than any write deadline would be
	if _, err := slow.Write(ids(opQuery, 77, 1, 1)); err != nil {
		t.Fatal(err)
	}
	_ = slow.SetReadDeadline(time.Now().Add(20 * time.Second))
	events := 0
	for {
		h := make([]byte, hdrSize)
		if _, err := io.ReadFull(slow, h); err != nil {
			t.Fatalf("the slow reader's connection after %d completions: %v", events, err)
		}
		if _, err := io.ReadFull(slow, make([]byte, le.Uint32(h[0:])-hdrSize)); err != nil {
			t.Fatal(err)
		}
		switch op := le.Uint16(h[4:]); {
		case op == opEventDone:
			events++
		case op == opReply && le.Uint64(h[8:]) == 77:
			if events == 0 || events >= 20000 {
				t.Errorf("%d event completions reached the slow reader: want some, and the excess dropped", events)
			}
			return
		}
	}
}

// A green context is created over the wire as a child of the process's own
// context; the reply carries the SM cap in effect.
func TestGreenContextCreate(t *testing.T) {
	sock := serve(t)
	c := driverConn(t, sock) // context 5, default stream 1
	le := binary.LittleEndian
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, replySize+8+replySize+24)); err != nil { // hello, ctx create
		t.Fatal(err)
	}
	other := driverConn(t, sock) // another process's context 5 is no parent of this one's
	_ = other.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(other, make([]byte, replySize+8+replySize+24)); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name                    string
		conn                    net.Conn
		ctx, parent, stream, sm uint32
		want                    sim.Result
		wantCap                 uint32
	}{
		{"16 SMs of the primary context", c, 6, 5, 2, 16, sim.Success, 16},
		{"a parent the process does not have", c, 7, 9, 3, 16, sim.ErrInvalidContext, 0},
		{"no SMs", c, 8, 5, 4, 0, sim.ErrInvalidValue, 0},
		{"more SMs than the device has", c, 8, 5, 4, 1000, sim.ErrInvalidValue, 0},
		{"a green context of a green context", c, 8, 6, 4, 8, sim.ErrInvalidContext, 0},
		{"another process's context id", other, 8, 6, 4, 8, sim.ErrInvalidContext, 0},
	} {
		id := uint64(10 + i)
		m := hdr(opGreenCtxCreate, hdrSize+16)
		le.PutUint64(m[8:], id)
		for _, v := range []uint32{tc.ctx, tc.parent, tc.stream, tc.sm} {
			m = le.AppendUint32(m, v)
		}
		if _, err := tc.conn.Write(m); err != nil {
			t.Fatal(err)
		}
		rep := make([]byte, replySize+24)
		if _, err := io.ReadFull(tc.conn, rep); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		res, smCap := sim.Result(int32(le.Uint32(rep[16:]))), le.Uint32(rep[replySize+8:])
		if le.Uint64(rep[8:]) != id || res != tc.want || smCap != tc.wantCap {
			t.Errorf("%s: reply id %d result %v sm_cap %d, want %d %v %d", tc.name, le.Uint64(rep[8:]), res, smCap, id, tc.want, tc.wantCap)
		}
	}
}
