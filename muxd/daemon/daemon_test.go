package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/client"
)

type testNode struct {
	d                   *Daemon
	dir, socket, policy string
	client              *client.Client
	stop                func()
}

func writePolicy(t testing.TB, dir, extra string) string {
	t.Helper()
	return writePolicyNode(t, dir, "", extra)
}

// writePolicyNode is writePolicy with extra lines in the [node] table too.
func writePolicyNode(t testing.TB, dir, nodeExtra, extra string) string {
	t.Helper()
	p := filepath.Join(dir, "policy.toml")
	text := fmt.Sprintf("[node]\nstate_dir = %q\nrun_dir = %q\nsocket = %q\n%s[mps]\nenabled = false\n%s",
		filepath.Join(dir, "state"), filepath.Join(dir, "run"), filepath.Join(dir, "run", "muxd.sock"), nodeExtra, extra)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// startNode runs a real muxd (in-process) on a temp socket and state directory.
func startNode(t testing.TB, dir string) *testNode {
	t.Helper()
	return startNodeWith(t, dir, "")
}

// startNodeWith is startNode with extra policy text, which continues the [mps] table.
func startNodeWith(t testing.TB, dir, extra string) *testNode {
	t.Helper()
	return startNodeWithPolicy(t, dir, writePolicy(t, dir, extra))
}

func startNodeWithPolicy(t testing.TB, dir, pol string) *testNode {
	t.Helper()
	return startNodeOptions(t, dir, Options{PolicyPath: pol})
}

// startNodeOptions runs muxd with opts (PolicyPath set; Log defaults to a silent one).
func startNodeOptions(t testing.TB, dir string, opts Options) *testNode {
	t.Helper()
	pol := opts.PolicyPath
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	n := &testNode{d: d, dir: dir, policy: pol, socket: filepath.Join(dir, "run", "muxd.sock")}
	n.client = client.New(n.socket, 2*time.Second)
	n.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("muxd Run: %v", err)
		}
	}
	waitReady(t, n.client)
	return n
}

func waitReady(t testing.TB, c *client.Client) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := c.Node(context.Background()); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("muxd did not become ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAPIRegisterListUnregister(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.stop()
	ctx := context.Background()
	fi, err := os.Stat(n.socket)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v %v, want 0600", fi.Mode(), err)
	}
	req := api.RegisterRequest{ID: "job-1", Class: api.Offline, GPUs: []string{"0"}, Limits: api.Limits{GPUMemory: 8 << 30, SMPercent: 30}, Namespace: "k8s.io"}
	c, err := n.client.Register(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if c.State != api.StateCreated || c.Control.Dir != filepath.Join(n.dir, "run", "c", "job-1") {
		t.Errorf("registered: %+v", c)
	}
	blk, err := ctlblock.Open(c.Control.Dir)
	if err != nil {
		t.Fatalf("control block not created: %v", err)
	}
	if l := blk.Limits(); l.MemoryBytes[0] != 8<<30 || l.ShareBP != 3000 || l.MPSActiveThreadPercent != 30 {
		t.Errorf("control block limits %+v do not carry the registration's", l)
	}
	blk.Close()
	if c.Control.Limits != filepath.Join(c.Control.Dir, "limits") || c.Control.Usage != filepath.Join(c.Control.Dir, "usage") {
		t.Errorf("control paths: %+v", c.Control)
	}
	if _, err := n.client.Register(ctx, req); err != nil {
		t.Errorf("identical re-register should be idempotent: %v", err)
	}
	pid := containerProcess(t)
	c, err = n.client.Start(ctx, "job-1", pid)
	if err != nil || c.State != api.StateRunning || c.PID != pid {
		t.Fatalf("start: %+v %v", c, err)
	}
	list, err := n.client.Containers(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "job-1" || list[0].Usage == nil || list[0].Usage.SharePercent != 30 {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := n.client.Unregister(ctx, "job-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.client.Container(ctx, "job-1"); !client.IsNotFound(err) {
		t.Errorf("after unregister: %v, want not found", err)
	}
	if _, err := os.Stat(c.Control.Dir); !os.IsNotExist(err) {
		t.Errorf("control directory left behind: %v", err)
	}
	info, err := n.client.Node(ctx)
	if err != nil || info.Containers != 0 || info.Policy != n.policy {
		t.Errorf("node: %+v %v", info, err)
	}
}

// raw sends a request body as-is and returns the status and error message.
func raw(t *testing.T, socket, method, path, body string) (int, string) {
	t.Helper()
	out, err := exec.Command("curl", "-s", "-o", "-", "-w", "\n%{http_code}", "--unix-socket", socket,
		"-X", method, "--data-binary", body, "http://muxd"+path).Output()
	if err != nil {
		t.Fatalf("curl: %v", err)
	}
	s := strings.TrimSpace(string(out))
	i := strings.LastIndexByte(s, '\n')
	var code int
	fmt.Sscan(s[i+1:], &code)
	return code, s[:max(i, 0)]
}

func TestAPIRejectsBadInputAndChangesNothing(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.stop()
	ctx := context.Background()
	if _, err := n.client.Register(ctx, api.RegisterRequest{ID: "keep", Class: api.Online, GPUs: []string{"0"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.client.Register(ctx, api.RegisterRequest{ID: "runs", Class: api.Offline, GPUs: []string{"0"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.client.Start(ctx, "runs", containerProcess(t)); err != nil {
		t.Fatal(err)
	}
	before, _ := n.client.Containers(ctx)
	snapshot := func() []string {
		var files []string
		filepath.Walk(n.dir, func(p string, _ os.FileInfo, _ error) error { files = append(files, p); return nil })
		return files
	}
	filesBefore := snapshot()

	long := strings.Repeat("a", 200)
	tests := []struct {
		name, method, path, body string
		code                     int
		msg                      string
	}{
		{"malformed json", "POST", "/v1/containers", `{"id":`, 400, "malformed JSON"},
		{"unknown field", "POST", "/v1/containers", `{"id":"x","class":"offline","gpus":["0"],"evil":1}`, 400, `unknown field \"evil\"`},
		{"trailing data", "POST", "/v1/containers", `{"id":"x","class":"offline","gpus":["0"]} {}`, 400, "data after"},
		{"traversal id", "POST", "/v1/containers", `{"id":"../x","class":"offline","gpus":["0"]}`, 400, "container id"},
		{"slash id", "POST", "/v1/containers", `{"id":"a/b","class":"offline","gpus":["0"]}`, 400, "container id"},
		{"long id", "POST", "/v1/containers", `{"id":"` + long + `","class":"offline","gpus":["0"]}`, 400, "more than 128"},
		{"nul id", "POST", "/v1/containers", `{"id":"a\u0000b","class":"offline","gpus":["0"]}`, 400, "container id"},
		{"bad class", "POST", "/v1/containers", `{"id":"x","class":"batch","gpus":["0"]}`, 400, "class"},
		{"no gpus", "POST", "/v1/containers", `{"id":"x","class":"offline","gpus":[]}`, 400, "gpus is empty"},
		{"bad gpu", "POST", "/v1/containers", `{"id":"x","class":"offline","gpus":["/dev/sda"]}`, 400, "gpu"},
		{"sm out of class bounds", "POST", "/v1/containers", `{"id":"x","class":"offline","gpus":["0"],"limits":{"sm_percent":95}}`, 400, "limits.sm_percent: 95% is outside the offline class's range 5%..70%"},
		{"conflicting re-register", "POST", "/v1/containers", `{"id":"keep","class":"offline","gpus":["0"]}`, 409, "already registered"},
		{"huge body", "POST", "/v1/containers", `{"id":"` + strings.Repeat("x", 70000) + `"}`, 400, "larger than"},
		{"start bad pid", "POST", "/v1/containers/keep/start", `{"pid":-1}`, 400, "pid"},
		{"start unknown", "POST", "/v1/containers/nope/start", fmt.Sprintf(`{"pid":%d}`, containerProcess(t)), 404, "not registered"},
		// Issue 15's JSON probes: each refused with a sentence naming what is wrong.
		{"upper-case ID", "POST", "/v1/containers", `{"ID":"y","class":"offline","gpus":["0"]}`, 400, `key \"ID\" in the request body must be written \"id\" (keys are case-sensitive)`},
		{"upper-case CLASS", "POST", "/v1/containers", `{"id":"y","CLASS":"offline","gpus":["0"]}`, 400, `key \"CLASS\" in the request body must be written \"class\"`},
		{"duplicate key", "POST", "/v1/containers", `{"id":"y","class":"online","class":"offline","gpus":["0"]}`, 400, `key \"class\" appears twice`},
		{"duplicate id re-registering", "POST", "/v1/containers", `{"id":"keep","class":"online","gpus":["0"],"id":"evil"}`, 400, `key \"id\" appears twice`},
		{"invalid utf-8 namespace", "POST", "/v1/containers", "{\"id\":\"y\",\"class\":\"offline\",\"gpus\":[\"0\"],\"namespace\":\"k8s\xff\"}", 400, "not valid UTF-8"},
		{"surrogate namespace", "POST", "/v1/containers", `{"id":"y","class":"offline","gpus":["0"],"namespace":"a\udc00"}`, 400, "unpaired UTF-16 surrogate"},
		{"newline in pod", "POST", "/v1/containers", `{"id":"y","class":"offline","gpus":["0"],"pod":"default/web\n0"}`, 400, "pod holds the non-printable character U+000A"},
		{"nul in namespace", "POST", "/v1/containers", `{"id":"y","class":"offline","gpus":["0"],"namespace":"a\u0000"}`, 400, "namespace holds the non-printable character U+0000"},
		{"start pid 1", "POST", "/v1/containers/keep/start", `{"pid":1}`, 400, "pid 1 is the host's init"},
		{"restart running with pid 1", "POST", "/v1/containers/runs/start", `{"pid":1}`, 400, "pid 1 is the host's init"},
		{"start pid 0", "POST", "/v1/containers/keep/start", `{"pid":0}`, 400, "not a valid process id"},
		{"start muxd itself", "POST", "/v1/containers/keep/start", fmt.Sprintf(`{"pid":%d}`, os.Getpid()), 400, "is muxd itself"},
		{"start muxd's parent", "POST", "/v1/containers/keep/start", fmt.Sprintf(`{"pid":%d}`, os.Getppid()), 400, "ancestor of muxd"},
		{"start gone pid", "POST", "/v1/containers/keep/start", `{"pid":4194303}`, 400, "has exited"},
		{"start upper-case PID", "POST", "/v1/containers/keep/start", `{"PID":5}`, 400, `must be written \"pid\"`},
		{"get traversal", "GET", "/v1/containers/..%2F..%2Fetc", "", 400, "container id"},
		{"delete traversal", "DELETE", "/v1/containers/..%2Fkeep", "", 400, "container id"},
		{"delete unknown", "DELETE", "/v1/containers/nope", "", 404, "not registered"},
		{"unknown endpoint", "GET", "/v2/node", "", 404, "no endpoint"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := raw(t, n.socket, tc.method, tc.path, tc.body)
			if code != tc.code || !strings.Contains(body, tc.msg) {
				t.Errorf("%s %s: got %d %s; want %d mentioning %q", tc.method, tc.path, code, body, tc.code, tc.msg)
			}
		})
	}
	after, _ := n.client.Containers(ctx)
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("bad requests changed the registry (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(filesBefore, snapshot()); diff != "" {
		t.Errorf("bad requests changed files (-before +after):\n%s", diff)
	}
}

func TestAPIRefusesOtherUsers(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test checks peer credentials and must run as root (CI does)")
	}
	n := startNode(t, t.TempDir())
	defer n.stop()
	// Open the socket's mode so that only the peer-credential check stands in the way.
	os.Chmod(n.socket, 0o666)
	os.Chmod(filepath.Dir(n.socket), 0o755)
	for d := n.dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"curl", "-s", "-w", "\n%{http_code}", "--unix-socket", n.socket, "http://muxd/v1/containers")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl as nobody: %v %s", err, out)
	}
	if !strings.HasSuffix(strings.TrimSpace(string(out)), "403") || !strings.Contains(string(out), "uid 65534 may not use") {
		t.Errorf("nobody got: %s", out)
	}
}

func TestPolicyReloadEndpoint(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.stop()
	ctx := context.Background()
	orig, _ := os.ReadFile(n.policy)
	if err := os.WriteFile(n.policy, append(orig, []byte("[alloc]\nheadroom = \"bogus\"\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := n.client.ReloadPolicy(ctx)
	var se *client.StatusError
	if !errors.As(err, &se) || se.Code != http.StatusUnprocessableEntity || !strings.Contains(se.Message, "alloc.headroom") {
		t.Fatalf("reload of a broken file: %v", err)
	}
	p, _ := n.client.Policy(ctx)
	if !strings.Contains(p.TOML, `headroom = "10%"`) {
		t.Errorf("old policy not kept:\n%s", p.TOML)
	}
	os.WriteFile(n.policy, append(orig, []byte("[alloc]\nheadroom = \"25%\"\n")...), 0o644)
	if _, err := n.client.ReloadPolicy(ctx); err != nil {
		t.Fatal(err)
	}
	p, _ = n.client.Policy(ctx)
	if !strings.Contains(p.TOML, `headroom = "25%"`) {
		t.Errorf("new policy not applied:\n%s", p.TOML)
	}
}

func writeFile(t testing.TB, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
