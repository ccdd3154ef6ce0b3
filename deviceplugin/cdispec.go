package deviceplugin

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// CDIKind is the CDI kind of the GPUs in the spec this plugin writes; the muxflow runtime
// resolves "nvidia.com/gpu=<UUID>" in it for pods the scheduler paired onto a GPU.
const CDIKind = "nvidia.com/gpu"

// Edits is what a container needs for a set of GPUs: device nodes, mounts, environment.
type Edits struct {
	Env     []string
	Devices []cdispec.DeviceNode
	Mounts  []cdispec.Mount
}

// Injector describes how the node's GPUs reach a container.
type Injector interface {
	// Common is what every GPU container needs (control devices, driver libraries).
	Common() Edits
	// Device is what one GPU adds.
	Device(g GPU) Edits
	// Env is the environment for a set of GPUs given together (device-specific variables
	// that list all of them, like gpusim's CUDA_VISIBLE_DEVICES).
	Env(gs []GPU) []string
}

// Spec builds the CDI spec of the node's GPUs: one device per GPU, named by its UUID.
func Spec(inj Injector, gpus []GPU) *cdispec.Spec {
	c := inj.Common()
	s := &cdispec.Spec{
		Version: "0.6.0",
		Kind:    CDIKind,
		ContainerEdits: cdispec.ContainerEdits{
			Env: c.Env, DeviceNodes: ptrs(c.Devices), Mounts: mptrs(c.Mounts),
		},
	}
	for _, g := range gpus {
		e := inj.Device(g)
		e.Env = append(e.Env, inj.Env([]GPU{g})...)
		s.Devices = append(s.Devices, cdispec.Device{
			Name:           g.UUID,
			ContainerEdits: cdispec.ContainerEdits{Env: e.Env, DeviceNodes: ptrs(e.Devices), Mounts: mptrs(e.Mounts)},
		})
	}
	return s
}

func ptrs(ds []cdispec.DeviceNode) []*cdispec.DeviceNode {
	var out []*cdispec.DeviceNode
	for i := range ds {
		out = append(out, &ds[i])
	}
	return out
}

func mptrs(ms []cdispec.Mount) []*cdispec.Mount {
	var out []*cdispec.Mount
	for i := range ms {
		out = append(out, &ms[i])
	}
	return out
}

// WriteSpec writes the spec as JSON into dir/name, atomically.
func WriteSpec(dir, name string, s *cdispec.Spec) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	tmp := path + ".tmp" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("write CDI spec: %w", err)
	}
	return path, nil
}

// SimInjector gives containers gpusim's GPUs: the fake driver (libcuda.so.1, mounted
// where a real driver's would be), the simulator's socket and CUDA_VISIBLE_DEVICES with
// the simulated GPUs' indices. There are no device nodes.
type SimInjector struct {
	Socket string // gpusimd's socket on the host
	LibDir string // the directory holding gpusim's libcuda.so.1 on the host
}

// Container paths of gpusim's parts.
const (
	SimSocketInContainer = "/run/gpusim/gpusimd.sock"
	libInContainer       = "/usr/lib/x86_64-linux-gnu/"
)

func (s SimInjector) Common() Edits {
	return Edits{
		Env: []string{"GPUSIM_SOCKET=" + SimSocketInContainer},
		Mounts: []cdispec.Mount{
			{HostPath: s.Socket, ContainerPath: SimSocketInContainer, Options: []string{"rbind", "rw"}},
			{HostPath: filepath.Join(s.LibDir, "libcuda.so.1"), ContainerPath: libInContainer + "libcuda.so.1", Options: []string{"rbind", "ro"}},
		},
	}
}

func (SimInjector) Device(GPU) Edits { return Edits{} }

func (SimInjector) Env(gs []GPU) []string {
	v := ""
	for i, g := range gs {
		if i > 0 {
			v += ","
		}
		v += strconv.Itoa(g.Index)
	}
	return []string{"CUDA_VISIBLE_DEVICES=" + v}
}

// NVIDIAInjector gives containers real NVIDIA GPUs the way nvidia-container-toolkit does
// in its simplest form: /dev/nvidia<minor> per GPU, the control devices, and the driver's
// user-space libraries and nvidia-smi found on the host. (`nvidia-ctk cdi generate` writes
// a complete spec; see docs/kubernetes.md.)
type NVIDIAInjector struct{}

var driverLibs = []string{"libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1", "libcudadebugger.so.1"}
var libDirs = []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/aarch64-linux-gnu", "/usr/lib"}

func (NVIDIAInjector) Common() Edits {
	var e Edits
	for _, d := range []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"} {
		if _, err := os.Stat(d); err == nil {
			e.Devices = append(e.Devices, cdispec.DeviceNode{Path: d})
		}
	}
	for _, lib := range driverLibs {
		for _, dir := range libDirs {
			p := filepath.Join(dir, lib)
			if real, err := filepath.EvalSymlinks(p); err == nil {
				e.Mounts = append(e.Mounts, cdispec.Mount{HostPath: real, ContainerPath: libInContainer + lib, Options: []string{"rbind", "ro", "nosuid", "nodev"}})
				break
			}
		}
	}
	for _, bin := range []string{"/usr/bin/nvidia-smi"} {
		if _, err := os.Stat(bin); err == nil {
			e.Mounts = append(e.Mounts, cdispec.Mount{HostPath: bin, ContainerPath: bin, Options: []string{"rbind", "ro", "nosuid", "nodev"}})
		}
	}
	return e
}

func (NVIDIAInjector) Device(g GPU) Edits {
	return Edits{Devices: []cdispec.DeviceNode{{Path: "/dev/nvidia" + strconv.Itoa(g.Minor)}}}
}

func (NVIDIAInjector) Env([]GPU) []string { return nil }
