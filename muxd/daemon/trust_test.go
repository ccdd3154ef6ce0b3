package daemon

// Issue 15's probes on the API and the registry, each a test: register/unregister racing
// on one id, orphan control directories after kill -9, idle keep-alive connections, and the
// guarantees that held and must keep holding (huge bodies, 1,000 concurrent registrations).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/client"
	"github.com/muxflow/muxflow/tests/testenv"
)

// checkConsistent fails unless the registry (as the API reports it and as stored on disk)
// and the control directories name exactly the same containers, each with its files.
func checkConsistent(t *testing.T, c *client.Client, dir, when string) {
	t.Helper()
	list, err := c.Containers(context.Background())
	if err != nil {
		t.Fatalf("%s: list: %v", when, err)
	}
	var registered []string
	for _, ct := range list {
		registered = append(registered, ct.ID)
		for _, f := range []string{ct.Control.Limits, ct.Control.Usage} {
			if _, err := os.Stat(f); err != nil {
				t.Errorf("%s: container %s is registered but its control file is missing: %v", when, ct.ID, err)
			}
		}
	}
	var stored []string
	files, _ := os.ReadDir(filepath.Join(dir, "state", "containers"))
	for _, f := range files {
		if id, ok := strings.CutSuffix(f.Name(), ".json"); ok {
			stored = append(stored, id)
		}
	}
	var controls []string
	ents, _ := os.ReadDir(filepath.Join(dir, "run", "c"))
	for _, e := range ents {
		controls = append(controls, e.Name())
	}
	sort.Strings(registered)
	sort.Strings(stored)
	sort.Strings(controls)
	if diff := cmp.Diff(registered, stored); diff != "" {
		t.Errorf("%s: registry in memory and on disk differ (-API +disk):\n%s", when, diff)
	}
	if diff := cmp.Diff(registered, controls); diff != "" {
		t.Errorf("%s: registered containers and control directories differ (-registered +directories):\n%s", when, diff)
	}
}

// Register and unregister racing on the same ids: no request may fail with a 500 (the old
// code lost a control directory under a registration in progress: "rename .../.usage.tmp:
// no such file"), and after every round the registry and the control directories agree.
func TestRegisterUnregisterRaceOnOneID(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, dir)
	defer n.stop()
	pid := containerProcess(t)
	ctx := context.Background()
	const rounds, workers, ops = 12, 16, 40
	ids := []string{"race-a", "race-b", "race-c"}
	var total, fails atomic.Int64
	var mu sync.Mutex
	var errs []string
	record := func(op string, err error) {
		total.Add(1)
		var se *client.StatusError
		if err == nil || (errors.As(err, &se) && se.Code == http.StatusNotFound) {
			return
		}
		fails.Add(1)
		mu.Lock()
		if len(errs) < 10 {
			errs = append(errs, op+": "+err.Error())
		}
		mu.Unlock()
	}
	for round := range rounds {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(round), uint64(w)))
				for range ops {
					id := ids[rng.IntN(len(ids))]
					switch k := rng.IntN(10); {
					case k < 4:
						_, err := n.client.Register(ctx, api.RegisterRequest{ID: id, Class: api.Offline, GPUs: []string{"0"}})
						record("register "+id, err)
					case k < 8:
						record("unregister "+id, n.client.Unregister(ctx, id))
					case k < 9:
						_, err := n.client.Start(ctx, id, pid)
						record("start "+id, err)
					default:
						_, err := n.client.Containers(ctx)
						record("list", err)
					}
				}
			}()
		}
		wg.Wait()
		checkConsistent(t, n.client, dir, fmt.Sprintf("after round %d", round))
	}
	if fails.Load() > 0 {
		t.Errorf("%d of %d racing requests failed (want 0); first ones:\n%s", fails.Load(), total.Load(), strings.Join(errs, "\n"))
	}
	if h := n.d.ids.held(); h != 0 {
		t.Errorf("%d id locks left held after the race", h)
	}
	t.Logf("%d racing requests on %d ids, %d failed", total.Load(), len(ids), fails.Load())
}

// On start, muxd removes control directories no registered container owns (a kill -9
// between a registry change and its control-block change leaves them), without following
// links planted among them, and keeps the registered containers' directories.
func TestStartRemovesOrphanControlDirectories(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, dir)
	ctx := context.Background()
	kept, err := n.client.Register(ctx, api.RegisterRequest{ID: "kept", Class: api.Offline, GPUs: []string{"0"}})
	if err != nil {
		t.Fatal(err)
	}
	n.stop()

	root := filepath.Join(dir, "run", "c")
	outside := filepath.Join(dir, "outside")
	os.MkdirAll(filepath.Join(outside, "sub"), 0o755)
	writeFile(t, filepath.Join(outside, "precious"), "keep me")
	writeFile(t, filepath.Join(outside, "sub", "precious"), "keep me too")
	if _, err := ctlblock.Create(filepath.Join(root, "orphan-1"), ctlblock.Unlimited()); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(root, "orphan-2", "deeper"), 0o755)
	os.Symlink(outside, filepath.Join(root, "orphan-2", "deeper", "link"))        // a link inside an orphan
	os.Symlink(filepath.Join(outside, "sub"), filepath.Join(root, "orphan-link")) // an orphan that is a link
	os.Symlink(filepath.Join(outside, "precious"), filepath.Join(root, "file-link"))
	writeFile(t, filepath.Join(root, ".usage.tmp123"), "x")
	writeFile(t, filepath.Join(root, "not an id"), "x")

	n = startNode(t, dir)
	defer n.stop()
	checkConsistent(t, n.client, dir, "after restart")
	if _, err := os.Stat(kept.Control.Usage); err != nil {
		t.Errorf("the registered container's control block is gone: %v", err)
	}
	for _, f := range []string{"precious", "sub/precious"} {
		if b, err := os.ReadFile(filepath.Join(outside, f)); err != nil || !strings.HasPrefix(string(b), "keep me") {
			t.Errorf("a file a planted link pointed at was touched: %s: %q %v", f, b, err)
		}
	}
}

// kill -9 during register/unregister churn, then restart: every acknowledged registration
// that was not unregistered is still there, and no control directory is left without its
// container (the old muxd left 16 orphans over 10 kills and never removed them).
func TestKill9DuringChurnLeavesNoOrphans(t *testing.T) {
	bin := testenv.Artifact(t, "bin/muxd")
	dir := t.TempDir()
	pol := writePolicy(t, dir, "")
	c := client.New(filepath.Join(dir, "run", "muxd.sock"), 2*time.Second)
	ctx := context.Background()
	for kill := range 3 {
		cmd := startProcess(t, bin, pol)
		waitReady(t, c)
		checkConsistent(t, c, dir, fmt.Sprintf("after restart %d", kill))
		// What muxd acknowledged last for each id (registered or not), and the ids whose
		// last operation was in flight at the kill (either outcome is right for those).
		var mu sync.Mutex
		acked := map[string]bool{}
		uncertain := map[string]bool{}
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					id := fmt.Sprintf("churn-%d-%d", w, i%5) // each id has one writer
					var err error
					if i%2 == 0 {
						_, err = c.Register(ctx, api.RegisterRequest{ID: id, Class: api.Offline, GPUs: []string{"0"}})
					} else {
						var se *client.StatusError
						if err = c.Unregister(ctx, id); errors.As(err, &se) && se.Code == http.StatusNotFound {
							err = nil
						}
					}
					mu.Lock()
					if err != nil {
						uncertain[id] = true // muxd is gone: this writer stops here
						mu.Unlock()
						return
					}
					acked[id] = i%2 == 0
					mu.Unlock()
				}
			}()
		}
		time.Sleep(300 * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		wg.Wait()

		cmd = startProcess(t, bin, pol)
		waitReady(t, c)
		checkConsistent(t, c, dir, fmt.Sprintf("after kill -9 number %d", kill+1))
		for id, reg := range acked {
			if uncertain[id] {
				continue
			}
			_, err := c.Container(ctx, id)
			if reg && err != nil {
				t.Errorf("kill %d: acknowledged registration of %s lost: %v", kill+1, id, err)
			}
			if !reg && !client.IsNotFound(err) {
				t.Errorf("kill %d: acknowledged unregistration of %s undone: %v", kill+1, id, err)
			}
		}
		t.Logf("kill %d: %d ids acknowledged, %d in flight at the kill", kill+1, len(acked), len(uncertain))
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}
}

// An API connection left idle after a request is closed after the idle timeout; so is one
// that never finishes its headers, or its body. The old server kept idle keep-alive
// connections forever (500 of them were never closed).
func TestAPIClosesIdleAndStalledConnections(t *testing.T) {
	dir := t.TempDir()
	to := Timeouts{Header: 300 * time.Millisecond, Read: 600 * time.Millisecond, Write: 2 * time.Second, Idle: 300 * time.Millisecond}
	n := startNodeOptions(t, dir, Options{PolicyPath: writePolicy(t, dir, ""), Timeouts: to})
	defer n.stop()

	// closedWithin reads from conn until the server closes it, which must happen within
	// limit; it returns the time it took.
	closedWithin := func(t *testing.T, conn net.Conn, rd *bufio.Reader, limit time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		conn.SetReadDeadline(start.Add(limit))
		_, err := io.Copy(io.Discard, rd)
		took := time.Since(start)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("connection still open after %v", limit)
		}
		return took
	}

	const conns = 500
	var list []net.Conn
	var readers []*bufio.Reader
	for i := range conns {
		conn, err := net.Dial("unix", n.socket)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /v1/node HTTP/1.1\r\nHost: muxd\r\n\r\n")
		rd := bufio.NewReader(conn)
		resp, err := http.ReadResponse(rd, nil)
		if err != nil || resp.StatusCode != 200 || resp.Close {
			t.Fatalf("connection %d: %v %v (want a 200 keeping the connection open)", i, resp, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		list, readers = append(list, conn), append(readers, rd)
	}
	// All idle now; every one must be closed about Idle after its request.
	for i := range list {
		closedWithin(t, list[i], readers[i], 5*time.Second)
	}

	t.Run("headers never finished", func(t *testing.T) {
		conn, err := net.Dial("unix", n.socket)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /v1/node HTTP/1.1\r\nHost: mu")
		if took := closedWithin(t, conn, bufio.NewReader(conn), 5*time.Second); took < to.Header/2 {
			t.Errorf("closed after %v, before the header timeout %v", took, to.Header)
		}
	})
	t.Run("body never finished", func(t *testing.T) {
		conn, err := net.Dial("unix", n.socket)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /v1/containers HTTP/1.1\r\nHost: muxd\r\nContent-Length: 200\r\n\r\n{\"id\":")
		rd := bufio.NewReader(conn)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(rd, nil)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 400 {
				t.Errorf("a stalled body got %d %s, want 400", resp.StatusCode, body)
			}
		}
		closedWithin(t, conn, rd, 5*time.Second)
	})
	if cs, err := n.client.Containers(context.Background()); err != nil || len(cs) != 0 {
		t.Errorf("stalled requests registered something: %v %v", cs, err)
	}
}

// The defaults are what the README documents.
func TestAPIServerDefaultTimeouts(t *testing.T) {
	d := &Daemon{log: quietLog()}
	s := d.newAPIServer(http.NotFoundHandler())
	got := Timeouts{Header: s.ReadHeaderTimeout, Read: s.ReadTimeout, Write: s.WriteTimeout, Idle: s.IdleTimeout}
	want := Timeouts{Header: 5 * time.Second, Read: 30 * time.Second, Write: 30 * time.Second, Idle: 30 * time.Second}
	if got != want {
		t.Errorf("API server timeouts %+v, want %+v", got, want)
	}
}

// A 100 MB body is refused after muxd has read its first 64 KiB, not after all of it.
func TestAPIRefusesHugeBodyFast(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.stop()
	conn, err := net.Dial("unix", n.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const size = 100 << 20
	start := time.Now()
	fmt.Fprintf(conn, "POST /v1/containers HTTP/1.1\r\nHost: muxd\r\nContent-Length: %d\r\n\r\n{\"id\":\"", size)
	go func() { // keep sending until muxd stops reading
		chunk := []byte(strings.Repeat("x", 64<<10))
		for sent := 0; sent < size; sent += len(chunk) {
			conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err := conn.Write(chunk); err != nil {
				return
			}
		}
	}()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a 100 MB body: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if took := time.Since(start); resp.StatusCode != 400 || !strings.Contains(string(body), "larger than 65536 bytes") || took > 2*time.Second {
		t.Errorf("100 MB body: %d %s after %v; want 400 'larger than 65536 bytes' within 2 s", resp.StatusCode, body, took)
	}
}

// 1,000 registrations at once all succeed, each with its control block.
func TestThousandConcurrentRegistrations(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, dir)
	defer n.stop()
	c := client.New(n.socket, 30*time.Second)
	var wg sync.WaitGroup
	var failed atomic.Int64
	var first atomic.Value
	for i := range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Register(context.Background(), api.RegisterRequest{ID: fmt.Sprintf("many-%04d", i), Class: api.Offline, GPUs: []string{"0"}})
			if err != nil {
				failed.Add(1)
				first.CompareAndSwap(nil, err.Error())
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d of 1000 concurrent registrations failed; first: %v", failed.Load(), first.Load())
	}
	checkConsistent(t, n.client, dir, "after 1000 registrations")
	if l := n.d.reg.Len(); l != 1000 {
		t.Errorf("%d registered, want 1000", l)
	}
}

// A start report naming a kernel thread is refused.
func TestStartRefusesKernelThread(t *testing.T) {
	err := plausibleContainerPID(2)
	if err == nil {
		t.Skip("pid 2 is not a kernel thread in this pid namespace")
	}
	if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "kernel thread") {
		t.Errorf("pid 2: %v", err)
	}
}
