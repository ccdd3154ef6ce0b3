package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/client"
	"github.com/muxflow/muxflow/muxd/specedit"
	"github.com/muxflow/muxflow/muxd/wiring"
)

// runtimeNode is a muxd whose policy points at an installed-looking libxcuda, MPS pipe
// directory and muxflow-hook, so that GPU containers can be wired.
func runtimeNode(t *testing.T) (*testNode, string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(bin, "libxcuda.so"), "")
	writeFile(t, filepath.Join(bin, "muxflow-hook"), "#!/bin/sh\n")
	if err := os.MkdirAll(filepath.Join(dir, "mps"), 0o755); err != nil {
		t.Fatal(err)
	}
	n := startNodeWith(t, dir, fmt.Sprintf("pipe_dir = %q\n[hook]\nlibxcuda = %q\n", filepath.Join(dir, "mps"), filepath.Join(bin, "libxcuda.so")))
	t.Cleanup(n.stop)
	return n, filepath.Join(bin, "muxflow-hook")
}

// post sends what muxflow-runtime and muxflow-hook send: a raw body, one request per
// connection, and returns status, Content-Type and body.
func post(t *testing.T, socket, path string, body []byte) (int, string, []byte) {
	t.Helper()
	resp, err := rawClient(socket).Post("http://muxd"+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if len(resp.TransferEncoding) != 0 {
		t.Errorf("%s answered with Transfer-Encoding %v; C clients need Content-Length", path, resp.TransferEncoding)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), data
}

func createPath(id, bundle, hook string) string {
	return api.Prefix + "/runtime/create?" + url.Values{"id": {id}, "bundle": {bundle}, "hook": {hook}}.Encode()
}

func specWith(env []string, ann map[string]string) []byte {
	b, _ := json.Marshal(map[string]any{
		"ociVersion":  "1.2.0",
		"process":     map[string]any{"args": []string{"/bin/true"}, "env": env},
		"annotations": ann,
		"x-unknown":   []int{1},
	})
	return b
}

func TestRuntimeCreateAndHooks(t *testing.T) {
	n, hook := runtimeNode(t)
	ctx := context.Background()
	bundle := filepath.Join(n.dir, "bundle")

	code, _, body := post(t, n.socket, createPath("plain", bundle, hook), specWith([]string{"PATH=/bin"}, nil))
	if code != http.StatusNoContent || len(body) != 0 {
		t.Fatalf("non-GPU container: %d %q, want 204 and no body", code, body)
	}
	if cs, _ := n.client.Containers(ctx); len(cs) != 0 {
		t.Fatalf("non-GPU container registered: %+v", cs)
	}

	code, ctype, body := post(t, n.socket, createPath("job-1", bundle, hook), specWith([]string{"NVIDIA_VISIBLE_DEVICES=0"}, map[string]string{"muxflow.io/class": "offline"}))
	if code != http.StatusOK || ctype != "application/json" {
		t.Fatalf("GPU container: %d %s %s", code, ctype, body)
	}
	var s specs.Spec
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatal(err)
	}
	if s.Annotations[wiring.AnnotationWired] != "offline" || len(s.Hooks.CreateRuntime) != 1 || s.Hooks.CreateRuntime[0].Path != hook {
		t.Errorf("spec not wired: %s", body)
	}
	if !strings.Contains(string(body), `"x-unknown":[1]`) {
		t.Errorf("unknown field lost: %s", body)
	}
	c, err := n.client.Container(ctx, "job-1")
	if err != nil || c.Class != api.Offline || c.State != api.StateCreated {
		t.Fatalf("registration: %+v %v", c, err)
	}
	if pre, err := os.ReadFile(filepath.Join(c.Control.Dir, specedit.PreloadFile)); err != nil || !strings.HasPrefix(string(pre), wiring.ContainerLib) {
		t.Errorf("preload file: %q %v", pre, err)
	}

	pid := containerProcess(t)
	state := fmt.Appendf(nil, `{"ociVersion":"1.0.2","id":"job-1","status":"created","pid":%d,"bundle":%q}`, pid, bundle)
	if code, _, body := post(t, n.socket, api.Prefix+"/runtime/hooks/create-runtime", state); code != http.StatusNoContent {
		t.Fatalf("create-runtime hook: %d %s", code, body)
	}
	if c, err := n.client.Container(ctx, "job-1"); err != nil || c.State != api.StateRunning || c.PID != pid {
		t.Fatalf("after create-runtime: %+v %v", c, err)
	}
	if code, _, body := post(t, n.socket, api.Prefix+"/runtime/hooks/poststop", state); code != http.StatusNoContent {
		t.Fatalf("poststop hook: %d %s", code, body)
	}
	if _, err := n.client.Container(ctx, "job-1"); !client.IsNotFound(err) {
		t.Errorf("after poststop: %v, want not found", err)
	}
	if _, err := os.Stat(c.Control.Dir); !os.IsNotExist(err) {
		t.Errorf("control directory left behind: %v", err)
	}
	// A second poststop (runc retries, or muxd dropped the container) is not an error.
	if code, _, body := post(t, n.socket, api.Prefix+"/runtime/hooks/poststop", state); code != http.StatusNoContent {
		t.Errorf("poststop of an unknown container: %d %s", code, body)
	}
}

func TestRuntimeEndpointsRejectBadInput(t *testing.T) {
	n, hook := runtimeNode(t)
	ctx := context.Background()
	bundle := filepath.Join(n.dir, "bundle")
	gpu := specWith([]string{"NVIDIA_VISIBLE_DEVICES=0"}, nil)
	pid := containerProcess(t)
	for _, tc := range []struct {
		name, path string
		body       []byte
		code       int
		want       string
	}{
		{"bad class", createPath("c1", bundle, hook), specWith([]string{"NVIDIA_VISIBLE_DEVICES=0"}, map[string]string{"muxflow.io/class": "gold"}), 400, "annotation muxflow.io/class"},
		{"hostile id", createPath("../etc", bundle, hook), gpu, 400, "container id"},
		{"relative bundle", createPath("c1", "bundle", hook), gpu, 400, "bundle path"},
		{"hook not installed", createPath("c1", bundle, "/nonexistent/muxflow-hook"), gpu, 500, "muxflow-hook is not installed"},
		{"not JSON", createPath("c1", bundle, hook), []byte(`{"process":`), 400, "decode config.json"},
		{"huge spec", createPath("c1", bundle, hook), bytes.Repeat([]byte(" "), specedit.MaxSpecSize+1), 413, "larger than"},
		{"bad state", api.Prefix + "/runtime/hooks/create-runtime", []byte(`{"id":"a/b","pid":1}`), 400, "container id"},
		{"no pid", api.Prefix + "/runtime/hooks/create-runtime", []byte(`{"id":"c1"}`), 400, "gave no pid"},
		{"unknown container", api.Prefix + "/runtime/hooks/create-runtime", fmt.Appendf(nil, `{"id":"c9","pid":%d}`, pid), 404, "c9"},
		{"pid 1", api.Prefix + "/runtime/hooks/create-runtime", []byte(`{"id":"c9","pid":1}`), 400, "pid 1 is the host's init"},
		{"unknown hook", api.Prefix + "/runtime/hooks/prestart", []byte(`{"id":"c1","pid":1}`), 404, "no OCI hook"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, ctype, body := post(t, n.socket, tc.path, tc.body)
			if code != tc.code || !strings.HasPrefix(ctype, "text/plain") || !strings.Contains(string(body), tc.want) {
				t.Errorf("got %d %s %q, want %d with a sentence containing %q", code, ctype, body, tc.code, tc.want)
			}
			if strings.Count(strings.TrimSpace(string(body)), "\n") != 0 {
				t.Errorf("answer is not one line: %q", body)
			}
		})
	}
	if cs, err := n.client.Containers(ctx); err != nil || len(cs) != 0 {
		t.Errorf("containers after refusals: %+v %v", cs, err)
	}
}

// A container is unregistered when its process exits, without any poststop hook.
func TestExitedContainerIsUnregistered(t *testing.T) {
	n, hook := runtimeNode(t)
	ctx := context.Background()
	bundle := filepath.Join(n.dir, "bundle")
	if code, _, body := post(t, n.socket, createPath("job-1", bundle, hook), specWith([]string{"NVIDIA_VISIBLE_DEVICES=0"}, nil)); code != http.StatusOK {
		t.Fatalf("create: %d %s", code, body)
	}
	proc := exec.Command("sleep", "60")
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	defer proc.Process.Kill()
	state := fmt.Appendf(nil, `{"id":"job-1","pid":%d}`, proc.Process.Pid)
	if code, _, body := post(t, n.socket, api.Prefix+"/runtime/hooks/create-runtime", state); code != http.StatusNoContent {
		t.Fatalf("create-runtime hook: %d %s", code, body)
	}
	c, err := n.client.Container(ctx, "job-1")
	if err != nil || c.State != api.StateRunning {
		t.Fatalf("before the exit: %+v %v", c, err)
	}
	proc.Process.Kill()
	proc.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := n.client.Container(ctx, "job-1")
		_, serr := os.Stat(c.Control.Dir)
		if client.IsNotFound(err) && os.IsNotExist(serr) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after its process exited: registration %v, control directory %v; want both gone", err, serr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The runtime's endpoints are root's even for the uids node.allow_uids lets use the API:
// a create request makes muxd read files under the paths it names.
func TestRuntimeEndpointsAreRootOnly(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test checks peer credentials and must run as root (CI does)")
	}
	dir := t.TempDir()
	n := startNodeWithPolicy(t, dir, writePolicyNode(t, dir, "allow_uids = [65534]\n", ""))
	defer n.stop()
	os.Chmod(n.socket, 0o666)
	for d := filepath.Dir(n.socket); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	asNobody := func(method, path string) string {
		out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
			"curl", "-s", "-X", method, "-w", "\n%{http_code}", "--data-binary", "{}", "--unix-socket", n.socket, "http://muxd"+path).Output()
		if err != nil {
			t.Fatalf("curl as nobody: %v %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if out := asNobody("GET", api.Prefix+"/containers"); !strings.HasSuffix(out, "200") {
		t.Fatalf("an allowed uid cannot list containers: %s", out)
	}
	for _, path := range []string{createPath("c1", "/", "/bin/sh"), api.Prefix + "/runtime/hooks/poststop"} {
		if out := asNobody("POST", path); !strings.HasSuffix(out, "403") || !strings.Contains(out, "uid 65534 may not use muxd's runtime endpoints (root only)") {
			t.Errorf("POST %s as an allowed non-root uid: %s, want 403", path, out)
		}
	}
}

// TestRuntimeCreateWatchesPidFile: with pid_file and no hook, muxd answers 201 and records
// the pid the runtime writes into the file (a stale file is not taken for it); without
// pid_file, or with a path it cannot watch, it answers 200 as before.
func TestRuntimeCreateWatchesPidFile(t *testing.T) {
	n, hook := runtimeNode(t)
	ctx := context.Background()
	bundle := filepath.Join(n.dir, "bundle")
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	gpu := specWith([]string{"NVIDIA_VISIBLE_DEVICES=0"}, map[string]string{"muxflow.io/class": "offline"})
	create := func(id, pidFile, hook string) int {
		q := url.Values{"id": {id}, "bundle": {bundle}}
		if pidFile != "" {
			q.Set("pid_file", pidFile)
		}
		if hook != "" {
			q.Set("hook", hook)
		}
		code, _, body := post(t, n.socket, api.Prefix+"/runtime/create?"+q.Encode(), gpu)
		if code != http.StatusOK && code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", id, code, body)
		}
		return code
	}

	pidFile := filepath.Join(bundle, "init.pid")
	writeFile(t, pidFile, "1") // stale: must not be taken for the runtime's
	if code := create("w1", pidFile, ""); code != http.StatusCreated {
		t.Fatalf("create with pid_file: %d, want 201", code)
	}
	time.Sleep(50 * time.Millisecond)
	if c, err := n.client.Container(ctx, "w1"); err != nil || c.State != api.StateCreated {
		t.Fatalf("before the pid file: %+v %v", c, err)
	}
	pid := containerProcess(t)
	writePidFile(t, pidFile, pid)
	waitContainer(t, n.client, "w1", func(c api.Container, err error) bool {
		return err == nil && c.State == api.StateRunning && c.PID == pid
	})

	// A pid file naming a process that has exited already (a short `runc run`): forgotten.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	pidFile2 := filepath.Join(bundle, "w2.pid")
	if code := create("w2", pidFile2, ""); code != http.StatusCreated {
		t.Fatalf("create w2: %d, want 201", code)
	}
	writePidFile(t, pidFile2, gone.Process.Pid)
	waitContainer(t, n.client, "w2", func(_ api.Container, err error) bool { return client.IsNotFound(err) })

	// What muxd cannot or need not watch: 200, and the runtime reports the pid.
	for _, tc := range []struct{ id, pidFile, hook string }{
		{"n1", "", ""},
		{"n2", "relative.pid", ""},
		{"n3", filepath.Join(n.dir, "no-such-dir", "init.pid"), ""},
		{"n4", filepath.Join(bundle, "n4.pid"), hook},
	} {
		if code := create(tc.id, tc.pidFile, tc.hook); code != http.StatusOK {
			t.Errorf("%s: %d, want 200", tc.id, code)
		}
	}
}

// TestRuntimeCreatePidFileRuntimeExits: a runtime (here a helper process that sends the
// create request and exits) that exits without writing its pid file has muxd forget the
// container, as the runtime's own reporter did.
func TestRuntimeCreatePidFileRuntimeExits(t *testing.T) {
	n, _ := runtimeNode(t)
	bundle := filepath.Join(n.dir, "bundle")
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	gpu := specWith([]string{"NVIDIA_VISIBLE_DEVICES=0"}, map[string]string{"muxflow.io/class": "offline"})
	spec := filepath.Join(n.dir, "spec.json")
	writeFile(t, spec, string(gpu))
	q := url.Values{"id": {"gone"}, "bundle": {bundle}, "pid_file": {filepath.Join(bundle, "init.pid")}}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPidWatchHelperRuntime$")
	cmd.Env = append(os.Environ(), "MUXFLOW_TEST_HELPER_SOCKET="+n.socket,
		"MUXFLOW_TEST_HELPER_PATH="+api.Prefix+"/runtime/create?"+q.Encode(), "MUXFLOW_TEST_HELPER_SPEC="+spec)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "status 201") {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	// The container of a runtime that exited must not stay registered.
	waitContainer(t, n.client, "gone", func(_ api.Container, err error) bool { return client.IsNotFound(err) })
}

// waitContainer waits up to 5 s until ok holds for what muxd says of container id.
func waitContainer(t testing.TB, c *client.Client, id string, ok func(api.Container, error) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ct, err := c.Container(context.Background(), id)
		if ok(ct, err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %+v %v", id, ct, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// writePidFile writes a pid file as runc does: a temporary file, renamed.
func writePidFile(t testing.TB, path string, pid int) {
	t.Helper()
	tmp := path + ".tmp"
	writeFile(t, tmp, strconv.Itoa(pid))
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestPidWatchHelperRuntime is the runtime of TestRuntimeCreatePidFileRuntimeExits: it sends
// the create request, prints the status and exits.
func TestPidWatchHelperRuntime(t *testing.T) {
	socket := os.Getenv("MUXFLOW_TEST_HELPER_SOCKET")
	if socket == "" {
		t.Skip("helper process only")
	}
	spec, err := os.ReadFile(os.Getenv("MUXFLOW_TEST_HELPER_SPEC"))
	if err != nil {
		t.Fatal(err)
	}
	code, _, body := post(t, socket, os.Getenv("MUXFLOW_TEST_HELPER_PATH"), spec)
	fmt.Printf("status %d %s\n", code, body[:min(len(body), 80)])
}
