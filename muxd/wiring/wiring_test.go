package wiring

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/policy"
)

func testPolicy() *policy.Policy {
	p := policy.Default()
	p.Node.RunDir = "/run/mf"
	p.Node.StateDir = "/var/lib/mf"
	p.Node.Socket = "/run/mf/muxd.sock"
	p.MPS.PipeDir = "/run/mf/mps"
	p.Hook.LibXCUDA = "/opt/mf/libxcuda.so"
	return p
}

func container(class api.Class, ctl api.ControlPaths) api.Container {
	return api.Container{RegisterRequest: api.RegisterRequest{ID: "c1", Class: class, GPUs: []string{"0"}}, Control: ctl}
}

func baseSpec() *specs.Spec {
	return &specs.Spec{
		Process: &specs.Process{Env: []string{"PATH=/bin", "CUDA_MPS_PIPE_DIRECTORY=/elsewhere"}},
		Mounts:  []specs.Mount{{Destination: "/run", Type: "tmpfs", Source: "tmpfs"}},
		Hooks:   &specs.Hooks{Poststop: []specs.Hook{{Path: "/usr/bin/other-hook"}}},
	}
}

func TestPlanWiresContainer(t *testing.T) {
	p := testPolicy()
	p.Hook.FailClosed = true
	pl := Plan{
		Container:  container(api.Offline, api.ControlPaths{Dir: "/run/mf/c/c1", Limits: "/run/mf/c/c1/limits", Usage: "/run/mf/c/c1/usage"}),
		Policy:     p,
		HookBinary: "/usr/bin/muxflow-hook",
		Preload:    "/bundle/muxflow-ld.so.preload",
		// What muxd's blocks.MPSThreadCeiling gives an offline container under the
		// default policy (sm_max 70%).
		ThreadPercent: 70,
	}
	mods, err := pl.Modifiers()
	if err != nil {
		t.Fatal(err)
	}
	s := baseSpec()
	if err := mods.Modify(s); err != nil {
		t.Fatal(err)
	}
	// Applying twice (a retried create) must not duplicate anything.
	if err := mods.Modify(s); err != nil {
		t.Fatal(err)
	}
	wantMounts := []specs.Mount{
		{Destination: "/run", Type: "tmpfs", Source: "tmpfs"},
		Bind("/run/mf/mps", "/run/muxflow/mps", true),
		Bind("/opt/mf/libxcuda.so", "/usr/lib/muxflow/libxcuda.so", false),
		Bind("/run/mf/c/c1/limits", "/run/muxflow/ctl/limits", false),
		Bind("/run/mf/c/c1/usage", "/run/muxflow/ctl/usage", true),
		Bind("/bundle/muxflow-ld.so.preload", "/etc/ld.so.preload", false),
	}
	if diff := cmp.Diff(wantMounts, s.Mounts); diff != "" {
		t.Errorf("mounts (-want +got):\n%s", diff)
	}
	if !slices.Contains(s.Mounts[3].Options, "ro") || !slices.Contains(s.Mounts[4].Options, "rw") {
		t.Errorf("limits must be read-only and usage writable: %v %v", s.Mounts[3].Options, s.Mounts[4].Options)
	}
	wantEnv := []string{
		"PATH=/bin",
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=70",
		"CUDA_MPS_CLIENT_PRIORITY=1",
		"CUDA_MPS_PIPE_DIRECTORY=/run/muxflow/mps",
		"MUXFLOW_CLASS=offline",
		"MUXFLOW_CONTAINER_ID=c1",
		"XCUDA_CONTROL_BLOCK=/run/muxflow/ctl",
		"XCUDA_DRAIN_TIMEOUT=9",
		"XCUDA_FAIL_POLICY=closed",
	}
	if diff := cmp.Diff(wantEnv, s.Process.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	args := []string{"--socket", "/run/mf/muxd.sock", "--timeout", "2s"}
	three := 3
	wantHooks := &specs.Hooks{
		CreateRuntime: []specs.Hook{{Path: "/usr/bin/muxflow-hook", Args: append([]string{"muxflow-hook", "create-runtime"}, args...), Timeout: &three}},
		Poststop:      []specs.Hook{{Path: "/usr/bin/other-hook"}},
	}
	if diff := cmp.Diff(wantHooks, s.Hooks); diff != "" {
		t.Errorf("hooks (-want +got):\n%s", diff)
	}
	if s.Annotations[AnnotationWired] != "offline" {
		t.Errorf("annotations = %v", s.Annotations)
	}
}

func TestPlanDirectoryOnlyIsReadOnly(t *testing.T) {
	pl := Plan{Container: container(api.Online, api.ControlPaths{Dir: "/run/mf/c/c1"}), Policy: testPolicy(), HookBinary: "/h", Preload: "/p", ThreadPercent: 100}
	mods, err := pl.Modifiers()
	if err != nil {
		t.Fatal(err)
	}
	s := baseSpec()
	if err := mods.Modify(s); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == ContainerControlDir })
	if i < 0 || !slices.Contains(s.Mounts[i].Options, "ro") {
		t.Errorf("control directory not mounted read-only: %+v", s.Mounts)
	}
	for _, kv := range s.Process.Env {
		if strings.HasPrefix(kv, EnvThreadPercent+"=") || strings.HasPrefix(kv, EnvFailPolicy+"=") || strings.HasPrefix(kv, EnvDrainTimeout+"=") {
			t.Errorf("online container at 100%% needs no %s", kv)
		}
	}
}

func TestPlanRefusesPathsOutsideMuxflow(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctl  api.ControlPaths
		id   string
	}{
		{"dir outside", api.ControlPaths{Dir: "/etc"}, "c1"},
		{"dir is run dir", api.ControlPaths{Dir: "/run/mf"}, "c1"},
		{"dir escapes", api.ControlPaths{Dir: "/run/mf/../../etc"}, "c1"},
		{"relative dir", api.ControlPaths{Dir: "run/mf/c/c1"}, "c1"},
		{"limits outside dir", api.ControlPaths{Dir: "/run/mf/c/c1", Limits: "/etc/shadow", Usage: "/run/mf/c/c1/usage"}, "c1"},
		{"usage is dir", api.ControlPaths{Dir: "/run/mf/c/c1", Limits: "/run/mf/c/c1/limits", Usage: "/run/mf/c/c1"}, "c1"},
		{"only limits", api.ControlPaths{Dir: "/run/mf/c/c1", Limits: "/run/mf/c/c1/limits"}, "c1"},
		{"hostile id", api.ControlPaths{Dir: "/run/mf/c/x"}, "../x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := container(api.Offline, tc.ctl)
			c.ID = tc.id
			if _, err := (Plan{Container: c, Policy: testPolicy(), HookBinary: "/h", Preload: "/p"}).Modifiers(); err == nil {
				t.Error("accepted")
			}
		})
	}
}

func TestModifiersValidate(t *testing.T) {
	s := baseSpec()
	if err := (Mounts{Bind("relative", "/x", false)}).Modify(s); err == nil {
		t.Error("relative mount source accepted")
	}
	if err := (Mounts{Bind("/x", "/a/../b", false)}).Modify(s); err == nil {
		t.Error("unclean destination accepted")
	}
	if err := (Env{"A=B": "c"}).Modify(s); err == nil {
		t.Error("env name with = accepted")
	}
	if err := (Env{"A": "b"}).Modify(&specs.Spec{}); err == nil {
		t.Error("spec without process accepted")
	}
	if err := (Hooks{Binary: "muxflow-hook"}).Modify(s); err == nil {
		t.Error("relative hook path accepted")
	}
}

func TestPreloadContents(t *testing.T) {
	for _, tc := range []struct{ image, want string }{
		{"", "/usr/lib/muxflow/libxcuda.so\n"},
		{"/lib/libjemalloc.so\n\n  /usr/lib/muxflow/libxcuda.so \n/lib/x.so", "/usr/lib/muxflow/libxcuda.so\n/lib/libjemalloc.so\n/lib/x.so\n"},
	} {
		if got := PreloadContents(tc.image); got != tc.want {
			t.Errorf("PreloadContents(%q) = %q, want %q", tc.image, got, tc.want)
		}
	}
}
