package specedit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/blocks"
	"github.com/muxflow/muxflow/muxd/wiring"
	"github.com/muxflow/muxflow/policy"
)

// fakeRegistry records registrations and makes each container's control directory, as
// muxd's control block manager does.
type fakeRegistry struct {
	runDir       string
	err          error
	registered   []api.RegisterRequest
	unregistered []string
}

func (f *fakeRegistry) Register(r api.RegisterRequest) (api.Container, error) {
	if f.err != nil {
		return api.Container{}, f.err
	}
	f.registered = append(f.registered, r)
	dir := filepath.Join(f.runDir, "c", r.ID)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return api.Container{}, err
	}
	b, err := ctlblock.Attach(dir, ctlblock.Unlimited())
	if err != nil {
		return api.Container{}, err
	}
	b.Close()
	return api.Container{RegisterRequest: r, State: api.StateCreated, Control: api.ControlPaths{Dir: dir, Limits: dir + "/limits", Usage: dir + "/usage"}}, nil
}

func (f *fakeRegistry) Unregister(id string) error {
	f.unregistered = append(f.unregistered, id)
	return nil
}

type env struct {
	t      *testing.T
	dir    string
	policy *policy.Policy
	reg    *fakeRegistry
	hook   string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, dir: dir, reg: &fakeRegistry{runDir: filepath.Join(dir, "run")}}
	p := policy.Default()
	p.Node.RunDir = filepath.Join(dir, "run")
	p.Node.StateDir = filepath.Join(dir, "state")
	p.Node.Socket = filepath.Join(dir, "run", "muxd.sock")
	p.MPS.PipeDir = filepath.Join(dir, "mps")
	p.Hook.LibXCUDA = filepath.Join(dir, "bin", "libxcuda.so")
	e.hook = filepath.Join(dir, "bin", "muxflow-hook")
	writeFile(t, p.Hook.LibXCUDA, "", 0o644)
	writeFile(t, e.hook, "#!/bin/sh\n", 0o755)
	must(t, os.MkdirAll(p.MPS.PipeDir, 0o755))
	e.policy = p
	return e
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(path), 0o755))
	must(t, os.WriteFile(path, []byte(data), mode))
}

// bundle writes a bundle whose config.json carries env and annotations, plus fields
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
	must(e.t, os.MkdirAll(filepath.Join(dir, "rootfs", "etc"), 0o755))
	return dir, data
}

func (e *env) create(id, bundle string, spec []byte) (*api.Container, []byte, error) {
	return create(Request{ID: id, Bundle: bundle, HookBinary: e.hook, Spec: spec}, e.policy, e.reg)
}

// create runs the three steps of a create request as muxd does (muxd/daemon/runtime.go
// runtimeCreate), with a fake registry.
func create(req Request, p *policy.Policy, reg *fakeRegistry) (*api.Container, []byte, error) {
	pr, err := Inspect(req, p)
	if err != nil || pr == nil {
		return nil, nil, err
	}
	c, err := reg.Register(pr.Registration.Request())
	if err != nil {
		return nil, nil, fmt.Errorf("muxflow: muxd refused GPU container %s: %w", req.ID, err)
	}
	out, err := pr.Wire(p, c, blocks.MPSThreadCeiling(c, p))
	if err != nil {
		reg.Unregister(c.ID)
		return nil, nil, err
	}
	return &c, out, nil
}

func TestNonGPUContainerIsNotRegistered(t *testing.T) {
	e := newEnv(t)
	b, spec := e.bundle("b", []string{"NVIDIA_VISIBLE_DEVICES=void"}, map[string]string{"muxflow.io/class": "offline"})
	c, out, err := e.create("c1", b, spec)
	if c != nil || out != nil || err != nil {
		t.Fatalf("got %v, %d bytes, %v; want nothing", c, len(out), err)
	}
	if len(e.reg.registered) != 0 {
		t.Error("a non-GPU container was registered")
	}
}

func TestGPUContainerIsWired(t *testing.T) {
	e := newEnv(t)
	b, spec := e.bundle("bundle with spaces", []string{"NVIDIA_VISIBLE_DEVICES=0,1"}, map[string]string{
		"muxflow.io/class": "offline", "muxflow.io/sm-percent": "40",
		"io.kubernetes.cri.sandbox-namespace": "ml", "io.kubernetes.cri.sandbox-name": "train-0",
	})
	writeFile(t, filepath.Join(b, "rootfs", "etc", "ld.so.preload"), "/lib/libimage.so\n", 0o644)
	c, raw, err := e.create("c1", b, spec)
	if err != nil {
		t.Fatal(err)
	}
	wantReq := []api.RegisterRequest{{ID: "c1", Class: api.Offline, GPUs: []string{"0", "1"}, Limits: api.Limits{SMPercent: 40}, Pod: "ml/train-0"}}
	if diff := cmp.Diff(wantReq, e.reg.registered); diff != "" {
		t.Errorf("registration (-want +got):\n%s", diff)
	}
	if c == nil || c.ID != "c1" {
		t.Fatalf("container = %+v", c)
	}
	var s specs.Spec
	must(t, json.Unmarshal(raw, &s))
	var dsts []string
	for _, m := range s.Mounts {
		dsts = append(dsts, m.Destination)
	}
	wantDsts := []string{"/proc", wiring.ContainerMPSDir, wiring.ContainerLib, wiring.ContainerLimits, wiring.ContainerUsage, wiring.PreloadPath}
	if diff := cmp.Diff(wantDsts, dsts); diff != "" {
		t.Errorf("mount destinations (-want +got):\n%s", diff)
	}
	preload := filepath.Join(c.Control.Dir, PreloadFile)
	if m := s.Mounts[len(s.Mounts)-1]; m.Source != preload || !slices.Contains(m.Options, "ro") {
		t.Errorf("preload mount = %+v, want a read-only bind of %s", m, preload)
	}
	if !slices.Contains(s.Process.Env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40") || !slices.Contains(s.Process.Env, "NVIDIA_VISIBLE_DEVICES=0,1") {
		t.Errorf("env = %q", s.Process.Env)
	}
	if s.Hooks == nil || len(s.Hooks.CreateRuntime) != 1 || s.Hooks.CreateRuntime[0].Path != e.hook || len(s.Hooks.Poststop) != 0 {
		t.Errorf("hooks = %+v", s.Hooks)
	}
	// Fields this runtime-spec version does not know survive the edit.
	var generic map[string]any
	must(t, json.Unmarshal(raw, &generic))
	if generic["futureField"] == nil || generic["process"].(map[string]any)["futureProcessField"] != float64(7) {
		t.Errorf("unknown fields lost: %s", raw)
	}
	pre, _ := os.ReadFile(preload)
	if string(pre) != "/usr/lib/muxflow/libxcuda.so\n/lib/libimage.so\n" {
		t.Errorf("preload = %q", pre)
	}
	// The bundle itself is never written: the runtime writes the returned spec.
	if got, _ := os.ReadFile(filepath.Join(b, "config.json")); string(got) != string(spec) {
		t.Error("Create wrote config.json")
	}
}

func TestRefusals(t *testing.T) {
	refused := errors.New("offline container c1 not admitted: GPU 0 is unhealthy")
	for _, tc := range []struct {
		name, id string
		env      []string
		ann      map[string]string
		spec     string // replaces the generated config.json when set
		regErr   error
		wantErr  string
		invalid  bool
	}{
		{"bad class", "c1", []string{"NVIDIA_VISIBLE_DEVICES=0"}, map[string]string{"muxflow.io/class": "gold"}, "", nil, "annotation muxflow.io/class", true},
		{"huge annotation", "c1", []string{"NVIDIA_VISIBLE_DEVICES=0"}, map[string]string{"muxflow.io/gpu-memory": strings.Repeat("1", 1<<20)}, "", nil, "annotation muxflow.io/gpu-memory", true},
		{"SM share above the class bound", "c1", []string{"NVIDIA_VISIBLE_DEVICES=0"}, map[string]string{"muxflow.io/class": "offline", "muxflow.io/sm-percent": "99"}, "", nil, "annotation muxflow.io/sm-percent", true},
		{"hostile id", "../../etc", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil, "", nil, "container id", true},
		{"id with slash", "a/b", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil, "", nil, "container id", true},
		{"bad gpu", "c1", []string{"NVIDIA_VISIBLE_DEVICES=/dev/sda"}, nil, "", nil, "bad GPU request", true},
		{"not JSON", "c1", nil, nil, `{"process":`, nil, "decode config.json", true},
		{"GPU but no process", "c1", nil, nil, `{"linux":{"devices":[{"path":"/dev/nvidia0"}]}}`, nil, "has no process", true},
		{"muxd refuses", "c1", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil, "", refused, "not admitted", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.reg.err = tc.regErr
			b, spec := e.bundle("b", tc.env, tc.ann)
			if tc.spec != "" {
				spec = []byte(tc.spec)
			}
			_, out, err := e.create(tc.id, b, spec)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || out != nil {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
			if errors.Is(err, ErrInvalid) != tc.invalid {
				t.Errorf("errors.Is(err, ErrInvalid) = %v, want %v", !tc.invalid, tc.invalid)
			}
			if !strings.HasPrefix(err.Error(), "muxflow: ") {
				t.Errorf("error %q does not say it comes from muxflow", err)
			}
			if tc.regErr != nil && !errors.Is(err, tc.regErr) {
				t.Error("the registry's error is not wrapped")
			}
		})
	}
}

func TestBadPaths(t *testing.T) {
	e := newEnv(t)
	b, spec := e.bundle("b", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil)
	for _, req := range []Request{
		{ID: "c1", Bundle: "relative/b", HookBinary: e.hook, Spec: spec},
		{ID: "c1", Bundle: b + "/../b", HookBinary: e.hook, Spec: spec},
		{ID: "c1", Bundle: b, HookBinary: "muxflow-hook", Spec: spec},
	} {
		if _, _, err := create(req, e.policy, e.reg); !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: err = %v, want ErrInvalid", req, err)
		}
	}
	if len(e.reg.registered) != 0 {
		t.Error("registered despite a bad path")
	}
}

func TestFailuresAfterRegistrationUnregister(t *testing.T) {
	for _, tc := range []struct {
		name    string
		break_  func(e *env)
		wantErr string
	}{
		{"libxcuda missing", func(e *env) { e.policy.Hook.LibXCUDA = filepath.Join(e.dir, "nope.so") }, "libxcuda is not installed"},
		{"MPS pipe directory missing", func(e *env) { e.policy.MPS.PipeDir = filepath.Join(e.dir, "no-mps") }, "mps.pipe_dir"},
		{"muxflow-hook missing", func(e *env) { e.hook = filepath.Join(e.dir, "none", "muxflow-hook") }, "muxflow-hook is not installed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			tc.break_(e)
			b, spec := e.bundle("b", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil)
			if _, _, err := e.create("c1", b, spec); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
			if diff := cmp.Diff([]string{"c1"}, e.reg.unregistered); diff != "" {
				t.Errorf("unregistered (-want +got):\n%s", diff)
			}
		})
	}
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

func TestHostileBundles(t *testing.T) {
	t.Run("rootfs symlink out of the bundle", func(t *testing.T) {
		e := newEnv(t)
		b, spec := e.bundle("b", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil)
		elsewhere := filepath.Join(e.dir, "elsewhere")
		writeFile(t, filepath.Join(elsewhere, "etc", "ld.so.preload"), "/lib/x.so\n", 0o644)
		must(t, os.RemoveAll(filepath.Join(b, "rootfs")))
		must(t, os.Symlink(elsewhere, filepath.Join(b, "rootfs")))
		before, beforeBundle := files(t, elsewhere), files(t, b)
		if _, _, err := e.create("c1", b, spec); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(before, files(t, elsewhere)); diff != "" {
			t.Errorf("files written in the rootfs:\n%s", diff)
		}
		if diff := cmp.Diff(beforeBundle, files(t, b)); diff != "" {
			t.Errorf("files written in the bundle:\n%s", diff)
		}
	})
	t.Run("image preload is a symlink to the host", func(t *testing.T) {
		e := newEnv(t)
		b, spec := e.bundle("b", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil)
		secret := filepath.Join(e.dir, "secret")
		writeFile(t, secret, "/host/secret.so\n", 0o600)
		must(t, os.Symlink(secret, filepath.Join(b, "rootfs", "etc", "ld.so.preload")))
		c, _, err := e.create("c1", b, spec)
		if c != nil {
			pre, _ := os.ReadFile(filepath.Join(c.Control.Dir, PreloadFile))
			if strings.Contains(string(pre), "secret") {
				t.Errorf("host file leaked into the container's preload: %q", pre)
			}
		} else if err == nil {
			t.Fatal("no container and no error")
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
		if got := ContainerdNamespace(filepath.Clean(in)); got != want {
			t.Errorf("ContainerdNamespace(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzCreate feeds arbitrary config.json bytes through the whole preparation. It must
// never panic; a prepared spec must decode again with the wiring in place, and a refusal
// must leave no registration behind.
func FuzzCreate(f *testing.F) {
	f.Add([]byte(`{"process":{"env":["NVIDIA_VISIBLE_DEVICES=0"]},"annotations":{"muxflow.io/class":"online"}}`))
	f.Add([]byte(`{"process":{"env":["NVIDIA_VISIBLE_DEVICES=all"]},"linux":{"devices":[{"path":"/dev/nvidia0"}]},"x":1}`))
	f.Add([]byte(`{"annotations":{"cdi.k8s.io/a":"nvidia.com/gpu=0"},"process":{},"mounts":null,"hooks":{"poststop":[{"path":"/x"}]}}`))
	f.Add([]byte(`{"process":{"env":["NVIDIA_VISIBLE_DEVICES=0"]},"root":{"path":"/nonexistent"}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		e := newEnv(t)
		c, out, err := e.create("c1", e.dir, raw)
		if err != nil || c == nil {
			if len(e.reg.registered) != len(e.reg.unregistered) {
				t.Fatalf("refused (%v) but left a registration behind", err)
			}
			return
		}
		var again specs.Spec
		if err := json.Unmarshal(out, &again); err != nil {
			t.Fatalf("prepared spec does not decode: %v\n%s", err, out)
		}
		if again.Annotations[wiring.AnnotationWired] == "" || again.Hooks == nil || len(again.Hooks.CreateRuntime) == 0 {
			t.Fatalf("wiring lost in the prepared spec: %s", out)
		}
	})
}

// Without a hook binary the caller reports the pid itself: the spec gets no hook.
func TestNoHookWhenTheRuntimeReportsThePid(t *testing.T) {
	e := newEnv(t)
	b, spec := e.bundle("b", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil)
	_, raw, err := create(Request{ID: "c1", Bundle: b, Spec: spec}, e.policy, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	var s specs.Spec
	must(t, json.Unmarshal(raw, &s))
	if s.Hooks != nil && len(s.Hooks.CreateRuntime) != 0 {
		t.Errorf("hooks = %+v, want none", s.Hooks)
	}
	if s.Annotations[wiring.AnnotationWired] != "offline" {
		t.Errorf("spec not wired: %s", raw)
	}
}

// Issue 15, probe 2: usage files were mode 0666, so any local user could write any
// container's usage. A wired container's usage file belongs to the spec's process user
// (after user-namespace mapping), mode 0600.
func TestUsageFileBelongsToTheContainerUser(t *testing.T) {
	e := newEnv(t)
	b, spec := e.bundle("b", []string{"NVIDIA_VISIBLE_DEVICES=0"}, map[string]string{"muxflow.io/class": "offline"})
	var cfg map[string]any
	must(t, json.Unmarshal(spec, &cfg))
	cfg["process"].(map[string]any)["user"] = map[string]any{"uid": os.Getuid(), "gid": os.Getgid()}
	spec, _ = json.Marshal(cfg)
	c, _, err := e.create("c1", b, spec)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(c.Control.Usage)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("usage file mode %v, want 0600", fi.Mode().Perm())
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Getuid() {
		t.Errorf("usage file owner %d, want the process user %d", st.Uid, os.Getuid())
	}
	if fi, _ := os.Stat(c.Control.Limits); fi.Mode().Perm()&0o022 != 0 {
		t.Errorf("limits file mode %v is writable by others", fi.Mode().Perm())
	}
}

func TestHostIDs(t *testing.T) {
	userns := &specs.Linux{
		UIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}},
		GIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: 200000, Size: 65536}},
	}
	tests := []struct {
		name     string
		s        specs.Spec
		uid, gid int
		wantErr  bool
	}{
		{"no process user is root", specs.Spec{Process: &specs.Process{}}, 0, 0, false},
		{"plain", specs.Spec{Process: &specs.Process{User: specs.User{UID: 1000, GID: 50}}}, 1000, 50, false},
		{"user namespace", specs.Spec{Process: &specs.Process{User: specs.User{UID: 1000, GID: 50}}, Linux: userns}, 101000, 200050, false},
		{"unmapped", specs.Spec{Process: &specs.Process{User: specs.User{UID: 70000}}, Linux: userns}, 0, 0, true},
	}
	for _, tc := range tests {
		uid, gid, err := HostIDs(&tc.s)
		if (err != nil) != tc.wantErr || (err == nil && (uid != tc.uid || gid != tc.gid)) {
			t.Errorf("%s: HostIDs = %d, %d, %v; want %d, %d, err %v", tc.name, uid, gid, err, tc.uid, tc.gid, tc.wantErr)
		}
	}
}
