package wrapper

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/muxflow/muxflow/hook/muxdconn"
	"github.com/muxflow/muxflow/hook/wiring"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/policy"
)

// fakeMuxd records registrations.
type fakeMuxd struct {
	runDir       string
	err          error
	registered   []api.RegisterRequest
	unregistered []string
}

func (f *fakeMuxd) Register(_ context.Context, r api.RegisterRequest) (api.Container, error) {
	if f.err != nil {
		return api.Container{}, f.err
	}
	f.registered = append(f.registered, r)
	dir := filepath.Join(f.runDir, "c", r.ID)
	return api.Container{RegisterRequest: r, State: api.StateCreated, Control: api.ControlPaths{Dir: dir, Limits: dir + "/limits", Usage: dir + "/usage"}}, nil
}

func (f *fakeMuxd) Unregister(_ context.Context, id string) error {
	f.unregistered = append(f.unregistered, id)
	return nil
}

type execCall struct {
	path string
	argv []string
}

type env struct {
	t       *testing.T
	w       *Wrapper
	muxd    *fakeMuxd
	execs   []execCall
	stderr  bytes.Buffer
	policy  *policy.Policy
	dir     string
	execErr error
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, dir: dir, muxd: &fakeMuxd{runDir: filepath.Join(dir, "run")}}
	bin := filepath.Join(dir, "bin")
	for _, name := range []string{"muxflow-runtime", "muxflow-hook", "runc", "libxcuda.so"} {
		writeFile(t, filepath.Join(bin, name), "#!/bin/sh\n", 0o755)
	}
	p := policy.Default()
	p.Node.RunDir = filepath.Join(dir, "run")
	p.Node.StateDir = filepath.Join(dir, "state")
	p.Node.Socket = filepath.Join(dir, "run", "muxd.sock")
	p.MPS.PipeDir = filepath.Join(dir, "mps")
	if err := os.MkdirAll(p.MPS.PipeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	p.Hook.Runtime = filepath.Join(bin, "runc")
	p.Hook.LibXCUDA = filepath.Join(bin, "libxcuda.so")
	e.policy = p
	e.w = &Wrapper{
		Policy: func() (*policy.Policy, string, error) { return e.policy, "test", nil },
		Client: func(*policy.Policy) Registrar { return e.muxd },
		Exec: func(path string, argv, _ []string) error {
			e.execs = append(e.execs, execCall{path, argv})
			return e.execErr
		},
		Self:   filepath.Join(bin, "muxflow-hook"),
		Cwd:    dir,
		Stderr: &e.stderr,
	}
	return e
}

func writeFile(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}

// bundle writes a bundle whose config.json carries env and annotations, plus a field
// runtime-spec does not know, and returns its directory and config bytes.
func (e *env) bundle(name string, envs []string, ann map[string]string) (string, []byte) {
	e.t.Helper()
	dir := filepath.Join(e.dir, name)
	cfg := map[string]any{
		"ociVersion":  "1.2.0",
		"process":     map[string]any{"args": []string{"/bin/true"}, "env": append([]string{"PATH=/bin"}, envs...), "cwd": "/", "futureProcessField": 7},
		"root":        map[string]any{"path": "rootfs"},
		"annotations": ann,
		"futureField": map[string]any{"x": []int{1, 2}},
		"mounts":      []any{map[string]any{"destination": "/proc", "type": "proc", "source": "proc"}},
		"linux":       map[string]any{"namespaces": []any{map[string]any{"type": "mount"}}},
	}
	data, _ := json.MarshalIndent(cfg, "", "\t")
	writeFile(e.t, filepath.Join(dir, "config.json"), string(data), 0o600)
	if err := os.MkdirAll(filepath.Join(dir, "rootfs", "etc"), 0o755); err != nil {
		e.t.Fatal(err)
	}
	return dir, data
}

func (e *env) run(args ...string) error {
	return e.w.Run(context.Background(), args)
}

func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

func TestNonGPUContainerIsUntouched(t *testing.T) {
	e := newEnv(t)
	b, orig := e.bundle("bundle with spaces", nil, map[string]string{"muxflow.io/class": "offline"})
	args := []string{"--root", "/r", "create", "--bundle", b, "c1"}
	if err := e.run(args...); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(b, "config.json"))
	if !bytes.Equal(got, orig) {
		t.Error("config.json of a non-GPU container changed")
	}
	if diff := cmp.Diff([]string{"config.json"}, files(t, b)); diff != "" {
		t.Errorf("files in bundle (-want +got):\n%s", diff)
	}
	want := []execCall{{e.policy.Hook.Runtime, append([]string{"runc"}, args...)}}
	if diff := cmp.Diff(want, e.execs, cmp.AllowUnexported(execCall{})); diff != "" {
		t.Errorf("exec (-want +got):\n%s", diff)
	}
	if len(e.muxd.registered) != 0 {
		t.Error("a non-GPU container was registered")
	}
}

func TestPassThroughCommands(t *testing.T) {
	e := newEnv(t)
	e.w.Policy = func() (*policy.Policy, string, error) { return nil, "/etc/muxflow/policy.toml", errors.New("broken") }
	for _, args := range [][]string{{"delete", "--force", "c1"}, {"--version"}, {"state", "c1"}, {"kill", "c1", "9"}} {
		e.execs = nil
		if err := e.run(args...); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		// With a broken policy, runc from PATH (the fallback) must still be used.
		if len(e.execs) != 1 || filepath.Base(e.execs[0].path) != "runc" || !slices.Equal(e.execs[0].argv[1:], args) {
			t.Errorf("%v: exec = %+v", args, e.execs)
		}
	}
}

func TestGPUContainerIsWired(t *testing.T) {
	e := newEnv(t)
	b, _ := e.bundle("bundle with spaces", []string{"NVIDIA_VISIBLE_DEVICES=0,1"}, map[string]string{
		"muxflow.io/class": "offline", "muxflow.io/sm-percent": "40",
		"io.kubernetes.cri.sandbox-namespace": "ml", "io.kubernetes.cri.sandbox-name": "train-0",
	})
	writeFile(t, filepath.Join(b, "rootfs", "etc", "ld.so.preload"), "/lib/libimage.so\n", 0o644)
	log := filepath.Join(b, "log.json")
	if err := e.run("--log", log, "--log-format", "json", "create", "--bundle", b, "c1"); err != nil {
		t.Fatal(err)
	}
	wantReq := []api.RegisterRequest{{ID: "c1", Class: api.Offline, GPUs: []string{"0", "1"}, Limits: api.Limits{SMPercent: 40}, Pod: "ml/train-0"}}
	if diff := cmp.Diff(wantReq, e.muxd.registered); diff != "" {
		t.Errorf("registration (-want +got):\n%s", diff)
	}
	if len(e.execs) != 1 {
		t.Fatalf("exec calls: %+v", e.execs)
	}
	raw, _ := os.ReadFile(filepath.Join(b, "config.json"))
	var s specs.Spec
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	var dsts []string
	for _, m := range s.Mounts {
		dsts = append(dsts, m.Destination)
	}
	wantDsts := []string{"/proc", wiring.ContainerMPSDir, wiring.ContainerLib, wiring.ContainerLimits, wiring.ContainerUsage, wiring.PreloadPath}
	if diff := cmp.Diff(wantDsts, dsts); diff != "" {
		t.Errorf("mount destinations (-want +got):\n%s", diff)
	}
	if !slices.Contains(s.Process.Env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40") || !slices.Contains(s.Process.Env, "NVIDIA_VISIBLE_DEVICES=0,1") {
		t.Errorf("env = %q", s.Process.Env)
	}
	if s.Hooks == nil || len(s.Hooks.CreateRuntime) != 1 || s.Hooks.CreateRuntime[0].Path != filepath.Join(e.dir, "bin", "muxflow-hook") {
		t.Errorf("hooks = %+v", s.Hooks)
	}
	// Fields this runtime-spec version does not know survive the edit.
	var generic map[string]any
	json.Unmarshal(raw, &generic)
	if generic["futureField"] == nil || generic["process"].(map[string]any)["futureProcessField"] != float64(7) {
		t.Errorf("unknown fields lost: %s", raw)
	}
	pre, _ := os.ReadFile(filepath.Join(b, "muxflow-ld.so.preload"))
	if string(pre) != "/usr/lib/muxflow/libxcuda.so\n/lib/libimage.so\n" {
		t.Errorf("preload = %q", pre)
	}
	logged, _ := os.ReadFile(log)
	if !strings.Contains(string(logged), `"level":"info"`) || !strings.Contains(string(logged), "GPU container wired") {
		t.Errorf("runtime log = %s", logged)
	}
}

func TestGPUContainerRefusals(t *testing.T) {
	unreachable := fmt.Errorf("%w at /s: dial: no such file", muxdconn.ErrUnreachable)
	for _, tc := range []struct {
		name    string
		id      string
		env     []string
		ann     map[string]string
		muxdErr error
		// wantErr is a substring of the error; "" means the container must start unwired.
		wantErr string
	}{
		{"bad class", "c1", []string{"NVIDIA_VISIBLE_DEVICES=0"}, map[string]string{"muxflow.io/class": "gold"}, nil, "annotation muxflow.io/class"},
		{"huge annotation", "c1", []string{"NVIDIA_VISIBLE_DEVICES=0"}, map[string]string{"muxflow.io/gpu-memory": strings.Repeat("1", 1<<20)}, nil, "annotation muxflow.io/gpu-memory"},
		{"hostile id", "../../etc", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil, nil, "container id"},
		{"id with slash", "a/b", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil, nil, "container id"},
		{"bad gpu", "c1", []string{"NVIDIA_VISIBLE_DEVICES=/dev/sda"}, nil, nil, "bad GPU request"},
		{"offline, muxd down", "c1", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil, unreachable, "muxd is not running"},
		{"online, muxd down", "c1", []string{"NVIDIA_VISIBLE_DEVICES=0"}, map[string]string{"muxflow.io/class": "online"}, unreachable, ""},
		{"muxd refuses", "c1", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil, &muxdconn.StatusError{Code: 400, Message: "no"}, "muxd refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.muxd.err = tc.muxdErr
			b, orig := e.bundle("b", tc.env, tc.ann)
			log := filepath.Join(b, "log.json")
			err := e.run("--log", log, "--log-format", "json", "create", "--bundle", b, tc.id)
			got, _ := os.ReadFile(filepath.Join(b, "config.json"))
			if !bytes.Equal(got, orig) {
				t.Error("config.json changed")
			}
			if tc.wantErr == "" {
				if err != nil || len(e.execs) != 1 {
					t.Fatalf("err = %v, execs = %v; want an unshared start", err, e.execs)
				}
				if logged, _ := os.ReadFile(log); !strings.Contains(string(logged), `"level":"warning"`) {
					t.Errorf("no warning logged: %s", logged)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
			if len(e.execs) != 0 {
				t.Error("the runtime was run anyway")
			}
			// containerd reports the last error entry of the runtime log, and quotes stderr.
			var last map[string]string
			logged, _ := os.ReadFile(log)
			lines := strings.Split(strings.TrimSpace(string(logged)), "\n")
			if json.Unmarshal([]byte(lines[len(lines)-1]), &last); last["level"] != "error" || last["msg"] != err.Error() {
				t.Errorf("runtime log's last line = %q", lines[len(lines)-1])
			}
			if !strings.Contains(e.stderr.String(), err.Error()) {
				t.Errorf("stderr = %q", e.stderr.String())
			}
		})
	}
}

func TestFailuresAfterRegistrationUnregister(t *testing.T) {
	t.Run("libxcuda missing", func(t *testing.T) {
		e := newEnv(t)
		e.policy.Hook.LibXCUDA = filepath.Join(e.dir, "nope.so")
		b, _ := e.bundle("b", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil)
		if err := e.run("create", "--bundle", b, "c1"); err == nil || !strings.Contains(err.Error(), "libxcuda is not installed") {
			t.Fatalf("err = %v", err)
		}
		if diff := cmp.Diff([]string{"c1"}, e.muxd.unregistered); diff != "" {
			t.Error(diff)
		}
	})
	t.Run("MPS pipe directory missing", func(t *testing.T) {
		e := newEnv(t)
		e.policy.MPS.PipeDir = filepath.Join(e.dir, "no-mps")
		b, _ := e.bundle("b", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil)
		if err := e.run("create", "--bundle", b, "c1"); err == nil || !strings.Contains(err.Error(), "mps.pipe_dir") {
			t.Fatalf("err = %v", err)
		}
		if diff := cmp.Diff([]string{"c1"}, e.muxd.unregistered); diff != "" {
			t.Error(diff)
		}
	})
	t.Run("exec fails", func(t *testing.T) {
		e := newEnv(t)
		e.execErr = errors.New("exec format error")
		b, _ := e.bundle("b", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil)
		if err := e.run("create", "--bundle", b, "c1"); err == nil {
			t.Fatal("no error")
		}
		if diff := cmp.Diff([]string{"c1"}, e.muxd.unregistered); diff != "" {
			t.Error(diff)
		}
	})
	t.Run("runtime is muxflow", func(t *testing.T) {
		e := newEnv(t)
		e.policy.Hook.Runtime = filepath.Join(filepath.Dir(e.w.Self), "muxflow-runtime")
		b, _ := e.bundle("b", nil, nil)
		if err := e.run("create", "--bundle", b, "c1"); err == nil || !strings.Contains(err.Error(), "itself") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestHostileBundles(t *testing.T) {
	t.Run("config.json symlink out of the bundle", func(t *testing.T) {
		e := newEnv(t)
		outside := filepath.Join(e.dir, "outside.json")
		_, data := e.bundle("src", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil)
		writeFile(t, outside, string(data), 0o644)
		b := filepath.Join(e.dir, "b")
		os.MkdirAll(b, 0o755)
		os.Symlink(outside, filepath.Join(b, "config.json"))
		if err := e.run("create", "--bundle", b, "c1"); err == nil {
			t.Fatal("a config.json pointing out of the bundle was followed")
		}
		if got, _ := os.ReadFile(outside); !bytes.Equal(got, data) {
			t.Error("the file outside the bundle changed")
		}
		if len(e.muxd.registered) != 0 || len(e.execs) != 0 {
			t.Error("went on after refusing the bundle")
		}
	})
	t.Run("rootfs symlink out of the bundle", func(t *testing.T) {
		e := newEnv(t)
		b, _ := e.bundle("b", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil)
		elsewhere := filepath.Join(e.dir, "elsewhere")
		writeFile(t, filepath.Join(elsewhere, "etc", "ld.so.preload"), "/lib/x.so\n", 0o644)
		os.RemoveAll(filepath.Join(b, "rootfs"))
		os.Symlink(elsewhere, filepath.Join(b, "rootfs"))
		// A preload that is an absolute symlink resolves inside the image, never on the host.
		before := files(t, elsewhere)
		if err := e.run("create", "--bundle", b, "c1"); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(before, files(t, elsewhere)); diff != "" {
			t.Errorf("files written outside the bundle:\n%s", diff)
		}
		if diff := cmp.Diff([]string{"config.json", "muxflow-ld.so.preload", "rootfs"}, files(t, b)); diff != "" {
			t.Errorf("bundle files (-want +got):\n%s", diff)
		}
	})
	t.Run("image preload is a symlink to the host", func(t *testing.T) {
		e := newEnv(t)
		b, _ := e.bundle("b", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil)
		secret := filepath.Join(e.dir, "secret")
		writeFile(t, secret, "/host/secret.so\n", 0o600)
		os.Symlink(secret, filepath.Join(b, "rootfs", "etc", "ld.so.preload"))
		err := e.run("create", "--bundle", b, "c1")
		pre, _ := os.ReadFile(filepath.Join(b, "muxflow-ld.so.preload"))
		if strings.Contains(string(pre), "secret") {
			t.Errorf("host file leaked into the container's preload: %q (err %v)", pre, err)
		}
	})
	t.Run("spec outside the bundle", func(t *testing.T) {
		e := newEnv(t)
		gpu, gpuData := e.bundle("gpu", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil)
		err := e.run("create", "--config", filepath.Join(gpu, "config.json"), "--bundle", gpu, "c1")
		if err == nil || !strings.Contains(err.Error(), "uses --config") || len(e.execs) != 0 || len(e.muxd.registered) != 0 {
			t.Fatalf("GPU spec via --config: err = %v, execs %v", err, e.execs)
		}
		if got, _ := os.ReadFile(filepath.Join(gpu, "config.json")); !bytes.Equal(got, gpuData) {
			t.Error("spec changed")
		}
		plain, _ := e.bundle("plain", nil, nil)
		if err := e.run("create", "--config", filepath.Join(plain, "config.json"), "--bundle", plain, "c2"); err != nil || len(e.execs) != 1 {
			t.Fatalf("non-GPU spec via --config: err = %v, execs %v", err, e.execs)
		}
	})
	t.Run("missing bundle", func(t *testing.T) {
		e := newEnv(t)
		if err := e.run("create", "--bundle", filepath.Join(e.dir, "none"), "c1"); err == nil {
			t.Fatal("no error")
		}
	})
}

func TestContainerdNamespace(t *testing.T) {
	for in, want := range map[string]string{
		"/run/containerd/io.containerd.runtime.v2.task/k8s.io/abc": "k8s.io",
		"/run/containerd/io.containerd.runtime.v2.task/moby/abc":   "moby",
		"/run/containerd/io.containerd.runtime.v2.task/-bad/abc":   "",
		"/run/containerd/io.containerd.runtime.v2.task/a b/abc":    "",
		"/srv/bundles/abc": "",
		"/run/containerd/io.containerd.runtime.v2.task/../etc/abc": "",
	} {
		if got := containerdNamespace(filepath.Clean(in)); got != want {
			t.Errorf("containerdNamespace(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPatchSpecKeepsUnknownFields(t *testing.T) {
	raw := []byte(`{"ociVersion":"1.2.0","process":{"env":["A=1"],"x-new":{"k":[1,2]}},"x-top":"v","mounts":[]}`)
	var s specs.Spec
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	s.Process.Env = append(s.Process.Env, "B=2")
	out, err := patchSpec(raw, &s)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	json.Unmarshal(out, &got)
	want := map[string]any{
		"ociVersion": "1.2.0",
		"process":    map[string]any{"env": []any{"A=1", "B=2"}, "x-new": map[string]any{"k": []any{float64(1), float64(2)}}},
		"x-top":      "v", "mounts": []any{},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// FuzzSpecHandling feeds arbitrary config.json bytes through what the wrapper does with
// them: decode, detect, wire and patch. It must never panic, and a patched spec must decode
// again with the wiring in place.
func FuzzSpecHandling(f *testing.F) {
	f.Add([]byte(`{"process":{"env":["NVIDIA_VISIBLE_DEVICES=0"]},"annotations":{"muxflow.io/class":"online"}}`))
	f.Add([]byte(`{"process":{"env":["NVIDIA_VISIBLE_DEVICES=all"]},"linux":{"devices":[{"path":"/dev/nvidia0"}]},"x":1}`))
	f.Add([]byte(`{"annotations":{"cdi.k8s.io/a":"nvidia.com/gpu=0"},"process":{},"mounts":null,"hooks":{"poststop":[{"path":"/x"}]}}`))
	p := policy.Default()
	f.Fuzz(func(t *testing.T, raw []byte) {
		var s specs.Spec
		if json.Unmarshal(raw, &s) != nil {
			return
		}
		gpus, err := detectAndClassify(&s, p)
		if err != nil || gpus == nil || s.Process == nil {
			return
		}
		c := api.Container{RegisterRequest: api.RegisterRequest{ID: "c", Class: api.Offline, GPUs: gpus}, Control: api.ControlPaths{Dir: "/run/muxflow/c/c"}}
		mods, err := wiring.Plan{Container: c, Policy: p, HookBinary: "/h", Preload: "/p"}.Modifiers()
		if err != nil {
			t.Fatal(err)
		}
		if err := mods.Modify(&s); err != nil {
			t.Fatal(err)
		}
		out, err := patchSpec(raw, &s)
		if err != nil {
			return // e.g. "process" is not an object in the raw document
		}
		var again specs.Spec
		if err := json.Unmarshal(out, &again); err != nil {
			t.Fatalf("patched spec does not decode: %v\n%s", err, out)
		}
		if again.Annotations[wiring.AnnotationWired] != "offline" || again.Hooks == nil || len(again.Hooks.Poststop) == 0 {
			t.Fatalf("wiring lost in the patched spec: %s", out)
		}
	})
}
