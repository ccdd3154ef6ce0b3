package gpucontainer

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/muxflow/muxflow/muxd/api"
)

func withEnv(env ...string) *specs.Spec {
	return &specs.Spec{Process: &specs.Process{Env: env}}
}

func TestDetect(t *testing.T) {
	devs := func(paths ...string) *specs.Spec {
		s := &specs.Spec{Linux: &specs.Linux{}}
		for _, p := range paths {
			s.Linux.Devices = append(s.Linux.Devices, specs.LinuxDevice{Path: p})
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		spec    *specs.Spec
		want    []string
		wantErr bool
	}{
		{"nil spec", nil, nil, false},
		{"no gpu", withEnv("PATH=/bin"), nil, false},
		{"void", withEnv("NVIDIA_VISIBLE_DEVICES=void"), nil, false},
		{"none", withEnv("NVIDIA_VISIBLE_DEVICES=none"), nil, false},
		{"empty", withEnv("NVIDIA_VISIBLE_DEVICES="), nil, false},
		{"all", withEnv("NVIDIA_VISIBLE_DEVICES=all"), []string{"all"}, false},
		{"indexes", withEnv("NVIDIA_VISIBLE_DEVICES=0, 1,1,"), []string{"0", "1"}, false},
		{"uuid", withEnv("NVIDIA_VISIBLE_DEVICES=GPU-0b1c2d3e-aaaa-bbbb"), []string{"GPU-0b1c2d3e-aaaa-bbbb"}, false},
		{"last value wins", withEnv("NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_VISIBLE_DEVICES=void"), nil, false},
		{"env beats devices", &specs.Spec{Process: &specs.Process{Env: []string{"NVIDIA_VISIBLE_DEVICES=void"}}, Linux: &specs.Linux{Devices: []specs.LinuxDevice{{Path: "/dev/nvidia0"}}}}, nil, false},
		{"path-like gpu", withEnv("NVIDIA_VISIBLE_DEVICES=../../etc"), nil, true},
		{"huge", withEnv("NVIDIA_VISIBLE_DEVICES=" + strings.Repeat("0,", 5000)), nil, true},
		{"too many", withEnv("NVIDIA_VISIBLE_DEVICES=" + seq(65)), nil, true},
		{"only commas", withEnv("NVIDIA_VISIBLE_DEVICES=,,"), nil, true},
		{"cdi", &specs.Spec{Annotations: map[string]string{"cdi.k8s.io/gpu": "nvidia.com/gpu=1,nvidia.com/gpu=0", "cdi.k8s.io/x": "vendor.com/nic=eth0"}}, []string{"1", "0"}, false},
		{"cdi other vendor", &specs.Spec{Annotations: map[string]string{"cdi.k8s.io/x": "vendor.com/nic=eth0"}}, nil, false},
		{"cdi bad name", &specs.Spec{Annotations: map[string]string{"cdi.k8s.io/x": "nvidia.com/gpu=a/b"}}, nil, true},
		{"devices", devs("/dev/nvidiactl", "/dev/nvidia1", "/dev/nvidia-uvm", "/dev/nvidia1"), []string{"1"}, false},
		{"control devices only", devs("/dev/nvidiactl", "/dev/nvidia-uvm"), []string{"all"}, false},
		{"other devices", devs("/dev/fuse", "/dev/nvme0"), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Detect(tc.spec)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil && !errors.Is(err, ErrBadDevices) {
				t.Errorf("err %v is not ErrBadDevices", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func seq(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strings.Repeat("1", 1+i/100) + string(rune('0'+i%10)) + string(rune('0'+(i/10)%10)))
	}
	return b.String()
}

func FuzzDetect(f *testing.F) {
	f.Add("0,1", "nvidia.com/gpu=0", "/dev/nvidia0")
	f.Add("all", "", "/dev/nvidiactl")
	f.Add("void", "nvidia.com/gpu=GPU-12345678", "")
	f.Fuzz(func(t *testing.T, env, cdi, dev string) {
		s := &specs.Spec{
			Process:     &specs.Process{Env: []string{"NVIDIA_VISIBLE_DEVICES=" + env}},
			Annotations: map[string]string{"cdi.k8s.io/x": cdi},
			Linux:       &specs.Linux{Devices: []specs.LinuxDevice{{Path: dev}}},
		}
		for _, sp := range []*specs.Spec{s, {Annotations: s.Annotations, Linux: s.Linux}} {
			gpus, err := Detect(sp)
			if err != nil {
				continue
			}
			r := api.RegisterRequest{ID: "x", Class: api.Offline, GPUs: gpus}
			if gpus != nil {
				if verr := r.Validate(); verr != nil {
					t.Fatalf("Detect returned GPUs muxd would refuse: %q: %v", gpus, verr)
				}
			}
		}
	})
}

// FuzzNativeFastPathContract checks what muxflow-runtime's C front assumes (see the
// package comment): a config.json in which Detect finds GPUs always contains one of the
// front's tokens or a backslash, so the front never runs a GPU container unwired.
func FuzzNativeFastPathContract(f *testing.F) {
	f.Add([]byte(`{"process":{"env":["NVIDIA_VISIBLE_DEVICES=0"]}}`))
	f.Add([]byte(`{"annotations":{"cdi.k8s.io/x":"nvidia.com/gpu=0"}}`))
	f.Add([]byte(`{"linux":{"devices":[{"path":"/dev/nvidiactl"}]}}`))
	f.Add([]byte(`{"PROCESS":{"ENV":["NVIDIA_VISIBLE_DEVICES=all"]}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var s specs.Spec
		if json.Unmarshal(raw, &s) != nil {
			return
		}
		gpus, err := Detect(&s)
		if gpus == nil && err == nil {
			return
		}
		for _, tok := range []string{"NVIDIA_VISIBLE_DEVICES", "cdi.k8s.io/", "/dev/nvidia", `\`} {
			if bytes.Contains(raw, []byte(tok)) {
				return
			}
		}
		t.Fatalf("GPU container (%v, %v) without any of the C front's tokens: %s", gpus, err, raw)
	})
}

func TestDetectKubernetesSources(t *testing.T) {
	const uuid = "GPU-6f1a8e0c-0000-4000-8000-000000000001"
	vm := func(dests ...string) *specs.Spec {
		s := withEnv("NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices")
		for _, d := range dests {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: d, Source: "/dev/null", Type: "bind"})
		}
		return s
	}
	ann := func(kv ...string) *specs.Spec {
		s := withEnv("PATH=/bin")
		s.Annotations = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			s.Annotations[kv[i]] = kv[i+1]
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		spec    *specs.Spec
		want    []string
		wantErr string
	}{
		{"volume mounts", vm("/var/run/nvidia-container-devices/"+uuid, "/etc/hosts"), []string{uuid}, ""},
		{"volume mounts by index", vm("/var/run/nvidia-container-devices/1", "/var/run/nvidia-container-devices/0"), []string{"1", "0"}, ""},
		{"volume mounts, none allocated", vm("/etc/hosts"), nil, ""},
		{"volume mounts, bad name", vm("/var/run/nvidia-container-devices/../../etc", "/var/run/nvidia-container-devices/gpu0"), nil, "nvidia-container-devices mounts"},
		{"planned GPU", ann("muxflow.io/gpu", uuid, "io.kubernetes.cri.container-type", "container"), []string{uuid}, ""},
		{"planned GPU on the sandbox", ann("muxflow.io/gpu", uuid, "io.kubernetes.cri.container-type", "sandbox"), nil, ""},
		{"planned GPU malformed", ann("muxflow.io/gpu", "all"), nil, `annotation muxflow.io/gpu: "all" is not a GPU UUID or index`},
		{"device plugin wins over the plan", func() *specs.Spec {
			s := ann("muxflow.io/gpu", uuid)
			s.Process.Env = append(s.Process.Env, "NVIDIA_VISIBLE_DEVICES=0")
			return s
		}(), []string{"0"}, ""},
		{"gpu-memory alone is no GPU", ann("muxflow.io/gpu-memory", "8Gi"), nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Detect(tc.spec)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrBadDevices) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrBadDevices containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Detect (-want +got):\n%s", diff)
			}
		})
	}
}
