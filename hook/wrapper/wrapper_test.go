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

	"github.com/muxflow/muxflow/muxd/client"
	"github.com/muxflow/muxflow/policy"
)

// fakeMuxd answers create requests with a canned result and records what it was sent.
type fakeMuxd struct {
	wired        []byte // the answer to a create: nil means "not a GPU container"
	err          error
	created      []string // "id bundle hook"
	unregistered []string
}

func (f *fakeMuxd) CreateForRuntime(_ context.Context, id, bundle, hook string, _ []byte) ([]byte, error) {
	f.created = append(f.created, id+" "+bundle+" "+hook)
	return f.wired, f.err
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
	e := &env{t: t, dir: dir, muxd: &fakeMuxd{wired: []byte(`{"wired":true}`)}}
	bin := filepath.Join(dir, "bin")
	for _, name := range []string{RuntimeName, HookName, "muxflow-wrapper", "runc"} {
		writeFile(t, filepath.Join(bin, name), "#!/bin/sh\n", 0o755)
	}
	p := policy.Default()
	p.Node.Socket = filepath.Join(dir, "muxd.sock")
	p.Hook.Runtime = filepath.Join(bin, "runc")
	e.policy = p
	e.w = &Wrapper{
		Policy: func() (*policy.Policy, string, error) { return e.policy, "test", nil },
		Client: func(*policy.Policy) Muxd { return e.muxd },
		Exec: func(path string, argv, _ []string) error {
			e.execs = append(e.execs, execCall{path, argv})
			return e.execErr
		},
		Self:   filepath.Join(bin, "muxflow-wrapper"),
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

// bundle writes a bundle whose config.json carries env and annotations, and returns its
// directory and config bytes.
func (e *env) bundle(name string, envs []string, ann map[string]string) (string, []byte) {
	e.t.Helper()
	dir := filepath.Join(e.dir, name)
	cfg := map[string]any{
		"ociVersion":  "1.2.0",
		"process":     map[string]any{"args": []string{"/bin/true"}, "env": append([]string{"PATH=/bin"}, envs...)},
		"root":        map[string]any{"path": "rootfs"},
		"annotations": ann,
	}
	data, _ := json.MarshalIndent(cfg, "", "\t")
	writeFile(e.t, filepath.Join(dir, "config.json"), string(data), 0o600)
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
	if len(e.muxd.created) != 0 {
		t.Error("muxd was asked about a non-GPU container")
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

func TestGPUContainerWiredByMuxd(t *testing.T) {
	e := newEnv(t)
	b, _ := e.bundle("bundle with spaces", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil)
	log := filepath.Join(e.dir, "log.json")
	if err := e.run("--log", log, "--log-format", "json", "create", "--bundle", b, "c1"); err != nil {
		t.Fatal(err)
	}
	want := []string{"c1 " + b + " " + filepath.Join(e.dir, "bin", HookName)}
	if diff := cmp.Diff(want, e.muxd.created); diff != "" {
		t.Errorf("create requests (-want +got):\n%s", diff)
	}
	got, _ := os.ReadFile(filepath.Join(b, "config.json"))
	if string(got) != string(e.muxd.wired) {
		t.Errorf("config.json = %s, want muxd's answer", got)
	}
	if st, _ := os.Stat(filepath.Join(b, "config.json")); st.Mode().Perm() != 0o600 {
		t.Errorf("config.json mode = %v, want the original 0600", st.Mode().Perm())
	}
	if len(e.execs) != 1 {
		t.Fatalf("exec calls: %+v", e.execs)
	}
	logged, _ := os.ReadFile(log)
	if !strings.Contains(string(logged), `"level":"info"`) || !strings.Contains(string(logged), "GPU container wired") {
		t.Errorf("runtime log = %s", logged)
	}
}

func TestGPUContainerMuxdSaysNoGPU(t *testing.T) {
	e := newEnv(t)
	e.muxd.wired = nil
	b, orig := e.bundle("b", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil)
	if err := e.run("create", "--bundle", b, "c1"); err != nil || len(e.execs) != 1 {
		t.Fatalf("err = %v, execs = %v", err, e.execs)
	}
	if got, _ := os.ReadFile(filepath.Join(b, "config.json")); !bytes.Equal(got, orig) {
		t.Error("config.json changed")
	}
}

func TestGPUContainerRefusals(t *testing.T) {
	unreachable := fmt.Errorf("%w at /s: dial: no such file", client.ErrUnreachable)
	for _, tc := range []struct {
		name    string
		id      string
		env     []string
		ann     map[string]string
		muxdErr error
		// wantErr is a substring of the error; "" means the container must start unwired.
		wantErr string
	}{
		{"hostile id", "../../etc", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil, nil, "container id"},
		{"bad gpu", "c1", []string{"NVIDIA_VISIBLE_DEVICES=/dev/sda"}, nil, nil, "bad GPU request"},
		{"offline, muxd down", "c1", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil, unreachable, "muxd is not running"},
		{"bad class, muxd down", "c1", []string{"NVIDIA_VISIBLE_DEVICES=0"}, map[string]string{"muxflow.io/class": "gold"}, unreachable, "annotation muxflow.io/class"},
		{"online, muxd down", "c1", []string{"NVIDIA_VISIBLE_DEVICES=0"}, map[string]string{"muxflow.io/class": "online"}, unreachable, ""},
		{"muxd refuses", "c1", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil, &client.StatusError{Code: 400, Message: "muxflow: annotation muxflow.io/class: \"gold\" is not online or offline"}, "annotation muxflow.io/class"},
		{"muxd fails oddly", "c1", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil, errors.New("decode: boom"), "GPU container c1: decode: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.muxd.err = tc.muxdErr
			b, orig := e.bundle("b", tc.env, tc.ann)
			log := filepath.Join(e.dir, "log.json")
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
	t.Run("config.json cannot be replaced", func(t *testing.T) {
		e := newEnv(t)
		b, _ := e.bundle("b", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil)
		// A directory where the temporary file goes makes the write fail.
		if err := os.Mkdir(filepath.Join(b, "config.json.muxflow-tmp"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(b, "config.json.muxflow-tmp", "x"), "", 0o644)
		if err := e.run("create", "--bundle", b, "c1"); err == nil || !strings.Contains(err.Error(), "cannot wire") {
			t.Fatalf("err = %v", err)
		}
		if diff := cmp.Diff([]string{"c1"}, e.muxd.unregistered); diff != "" {
			t.Error(diff)
		}
		if len(e.execs) != 0 {
			t.Error("the runtime was run anyway")
		}
	})
	t.Run("runtime is muxflow", func(t *testing.T) {
		e := newEnv(t)
		e.policy.Hook.Runtime = filepath.Join(filepath.Dir(e.w.Self), RuntimeName)
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
		if len(e.muxd.created) != 0 || len(e.execs) != 0 {
			t.Error("went on after refusing the bundle")
		}
	})
	t.Run("spec outside the bundle", func(t *testing.T) {
		e := newEnv(t)
		gpu, gpuData := e.bundle("gpu", []string{"NVIDIA_VISIBLE_DEVICES=0"}, nil)
		err := e.run("create", "--config", filepath.Join(gpu, "config.json"), "--bundle", gpu, "c1")
		if err == nil || !strings.Contains(err.Error(), "uses --config") || len(e.execs) != 0 || len(e.muxd.created) != 0 {
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
