package specedit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/muxflow/muxflow/muxd/wiring"
)

func TestInjectPlannedGPU(t *testing.T) {
	dir := t.TempDir()
	old := CDISpecDirs
	CDISpecDirs = []string{dir}
	t.Cleanup(func() { CDISpecDirs = old })
	const uuid = "GPU-6f1a8e0c-0000-4000-8000-000000000001"
	spec := `{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"` + uuid + `","containerEdits":{"env":["CUDA_VISIBLE_DEVICES=1"],
	"deviceNodes":[{"path":"/dev/null-gpu","hostPath":"/dev/null","type":"c","major":1,"minor":3,"permissions":"rw"}]}}],
	"containerEdits":{"env":["GPUSIM_SOCKET=/run/gpusim/gpusimd.sock"],"mounts":[{"hostPath":"/run","containerPath":"/run/gpusim","options":["bind","ro"]}]}}`
	if err := os.WriteFile(filepath.Join(dir, "muxflow-gpu.json"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	raw := []byte(`{"ociVersion":"1.2.0","process":{"env":["PATH=/bin"],"args":["sh"]},"root":{"path":"rootfs"},
	"annotations":{"muxflow.io/gpu":"` + uuid + `"},"linux":{"namespaces":[{"type":"pid"}],"resources":{"devices":[{"allow":false,"access":"rwm"}]}},"x-future":1}`)
	var s specs.Spec
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	if err := injectPlanned(&s, uuid); err != nil {
		t.Fatal(err)
	}
	out, err := wiring.Patch(raw, &s)
	if err != nil {
		t.Fatal(err)
	}
	var got specs.Spec
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	for _, e := range []string{"CUDA_VISIBLE_DEVICES=1", "GPUSIM_SOCKET=/run/gpusim/gpusimd.sock", "PATH=/bin"} {
		if !slices.Contains(got.Process.Env, e) {
			t.Errorf("env %q missing: %q", e, got.Process.Env)
		}
	}
	if len(got.Mounts) != 1 || got.Mounts[0].Destination != "/run/gpusim" {
		t.Errorf("mounts = %+v", got.Mounts)
	}
	if len(got.Linux.Devices) != 1 || got.Linux.Devices[0].Path != "/dev/null-gpu" {
		t.Errorf("devices = %+v", got.Linux.Devices)
	}
	allowed := false
	for _, d := range got.Linux.Resources.Devices {
		allowed = allowed || (d.Allow && d.Major != nil && *d.Major == 1 && d.Minor != nil && *d.Minor == 3)
	}
	if !allowed || len(got.Linux.Namespaces) != 1 || !strings.Contains(string(out), `"x-future":1`) {
		t.Errorf("the device's cgroup rule or other fields were lost:\n%s", out)
	}

	err = injectPlanned(&s, "GPU-00000000-dead-4000-8000-000000000000")
	if err == nil || !strings.Contains(err.Error(), "GPU GPU-00000000-dead-4000-8000-000000000000, which the muxflow scheduler chose for this pod (annotation muxflow.io/gpu), is not on this node") {
		t.Errorf("a GPU that is not here: err = %v", err)
	}
}

func TestInjectAnnotatedCDIDevices(t *testing.T) {
	dir := t.TempDir()
	old := CDISpecDirs
	CDISpecDirs = []string{dir}
	t.Cleanup(func() { CDISpecDirs = old })
	spec := `{"cdiVersion":"0.5.0","kind":"nvidia.com/gpu","devices":[{"name":"0","containerEdits":{"env":["GPU_ZERO=1"],
	"deviceNodes":[{"path":"/dev/null-gpu0","hostPath":"/dev/null","type":"c","major":1,"minor":3}]}}]}`
	os.WriteFile(filepath.Join(dir, "nvidia.json"), []byte(spec), 0o644)
	ann := map[string]string{"cdi.k8s.io/nvidia-device-plugin_abc": "nvidia.com/gpu=0", "cdi.k8s.io/other": "vendor.com/fpga=1"}
	devs := annotatedGPUDevices(ann)
	if len(devs) != 1 || devs[0] != "nvidia.com/gpu=0" {
		t.Fatalf("devices = %q", devs)
	}
	s := specs.Spec{Process: &specs.Process{}, Annotations: ann}
	// Twice: an engine that already applied CDI gets the same spec again.
	for range 2 {
		if err := injectAnnotated(&s, devs); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.Linux.Devices) != 1 || s.Linux.Devices[0].Path != "/dev/null-gpu0" || !slices.Contains(s.Process.Env, "GPU_ZERO=1") {
		t.Errorf("spec after injection: devices %+v env %q", s.Linux.Devices, s.Process.Env)
	}
	err := injectAnnotated(&s, []string{"nvidia.com/gpu=7"})
	if err == nil || !strings.Contains(err.Error(), "CDI device nvidia.com/gpu=7, which the device plugin allocated (annotation cdi.k8s.io/*), is not in the node's CDI specs") {
		t.Errorf("missing device: %v", err)
	}
}
