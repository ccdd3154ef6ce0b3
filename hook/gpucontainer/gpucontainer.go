// Package gpucontainer decides whether an OCI spec describes a GPU container and, for one
// that does, what muxd must know about it: which GPUs it may use, its class and its limits.
// It only reads the spec; changing it is the job of package wiring. muxflow-runtime's C
// front (hook/native) relies on its sources: a spec in which none of the strings
// NVIDIA_VISIBLE_DEVICES, "cdi.k8s.io/", "/dev/nvidia" and "muxflow.io/gpu" (quoted)
// occurs, and which has no JSON escape, is never a GPU container here, so a new source
// must be added there too.
package gpucontainer

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/policy/annotations"
)

// VisibleDevicesEnv is the variable the NVIDIA container stack reads to pick GPUs.
const VisibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"

// cdiAnnotationPrefix marks the annotations through which CDI requests devices
// ("cdi.k8s.io/<anything>" = "nvidia.com/gpu=0,nvidia.com/gpu=1").
const cdiAnnotationPrefix = "cdi.k8s.io/"

// maxGPUs bounds how many devices one container may name, as muxd's API does.
const maxGPUs = 64

// maxValueLen bounds the length of any value read from the spec: an env value or annotation
// longer than this is hostile, not a GPU list.
const maxValueLen = 4096

// VolumeMountsRoot is the NVIDIA device plugin's volume-mounts strategy: the container's
// NVIDIA_VISIBLE_DEVICES is this path and each GPU is a mount below it named by its UUID
// or index (the device plugin's deviceListStrategy "volume-mounts").
const VolumeMountsRoot = "/var/run/nvidia-container-devices"

// containerTypeAnnotation is set by containerd's CRI: "sandbox" for a pod's pause
// container, which gets the pod's annotations too but never a GPU.
const containerTypeAnnotation = "io.kubernetes.cri.container-type"

// ErrBadDevices classifies a GPU request that cannot be understood; creation must fail.
var ErrBadDevices = errors.New("bad GPU request")

// Detect returns the GPUs a spec asks for, or nil when the container is not a GPU container.
// The sources, in order of precedence: NVIDIA_VISIBLE_DEVICES in the process environment
// ("void", "none" and empty mean no GPU), CDI device annotations for nvidia.com devices,
// then /dev/nvidia* devices in linux.devices (control devices alone mean "all"), and last
// the muxflow.io/gpu annotation: the GPU the muxflow scheduler extender chose for a pod
// that requests none through a device plugin (see Planned).
func Detect(s *specs.Spec) ([]string, error) {
	if s == nil {
		return nil, nil
	}
	if s.Process != nil {
		if v, ok := lookupEnv(s.Process.Env, VisibleDevicesEnv); ok {
			if strings.TrimSpace(v) == VolumeMountsRoot {
				return fromVolumeMounts(s)
			}
			return fromVisibleDevices(v)
		}
	}
	if gpus, err := fromCDI(s.Annotations); gpus != nil || err != nil {
		return gpus, err
	}
	if gpus := fromDevices(s); gpus != nil {
		return gpus, nil
	}
	g, ok, err := Planned(s)
	if !ok || err != nil {
		return nil, err
	}
	return []string{g}, nil
}

// Planned returns the GPU named by the muxflow.io/gpu annotation, which the muxflow
// scheduler extender writes on an offline pod when it binds it (and containerd's
// pod_annotations pass to its containers). A pod's sandbox (pause) container is never a
// GPU container. ok is false when the annotation is absent.
func Planned(s *specs.Spec) (gpu string, ok bool, err error) {
	if s == nil {
		return "", false, nil
	}
	v, ok := s.Annotations[annotations.GPU]
	if !ok || s.Annotations[containerTypeAnnotation] == "sandbox" {
		return "", false, nil
	}
	g, err := annotations.ParseGPU(annotations.GPU, v)
	if err != nil {
		return "", true, fmt.Errorf("%w: %v", ErrBadDevices, err)
	}
	return g, true, nil
}

// fromVolumeMounts reads the GPUs of the volume-mounts strategy: the names of the mounts
// directly below VolumeMountsRoot.
func fromVolumeMounts(s *specs.Spec) ([]string, error) {
	var names []string
	for _, m := range s.Mounts {
		rest, ok := strings.CutPrefix(m.Destination, VolumeMountsRoot+"/")
		if !ok || rest == "" || strings.Contains(rest, "/") {
			continue
		}
		names = append(names, rest)
	}
	if names == nil {
		return nil, nil // the device plugin allocated nothing: no GPU, as "void" would say
	}
	gpus, err := parseList(names)
	if err != nil {
		return nil, fmt.Errorf("%w: %s mounts: %v", ErrBadDevices, VolumeMountsRoot, err)
	}
	return gpus, nil
}

// lookupEnv returns the last value of name, as execve's consumers (getenv) see it.
func lookupEnv(env []string, name string) (string, bool) {
	val, found := "", false
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			val, found = v, true
		}
	}
	return val, found
}

func fromVisibleDevices(v string) ([]string, error) {
	v = strings.TrimSpace(v)
	switch v {
	case "", "void", "none":
		return nil, nil
	}
	if len(v) > maxValueLen {
		return nil, fmt.Errorf("%w: %s is %d bytes long", ErrBadDevices, VisibleDevicesEnv, len(v))
	}
	gpus, err := parseList(strings.Split(v, ","))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadDevices, VisibleDevicesEnv, err)
	}
	return gpus, nil
}

// fromCDI reads fully qualified CDI names of the form nvidia.com/gpu=<name>.
func fromCDI(ann map[string]string) ([]string, error) {
	var names []string
	keys := make([]string, 0, len(ann))
	for k := range ann {
		if strings.HasPrefix(k, cdiAnnotationPrefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys) // deterministic order of GPUs across annotations
	for _, k := range keys {
		v := ann[k]
		if len(v) > maxValueLen {
			return nil, fmt.Errorf("%w: annotation %s is %d bytes long", ErrBadDevices, truncate(k), len(v))
		}
		for dev := range strings.SplitSeq(v, ",") {
			kind, name, ok := strings.Cut(strings.TrimSpace(dev), "=")
			if !ok || (kind != "nvidia.com/gpu" && kind != "nvidia.com/mig") {
				continue // other vendors' devices are none of our business
			}
			names = append(names, name)
		}
	}
	if names == nil {
		return nil, nil
	}
	gpus, err := parseList(names)
	if err != nil {
		return nil, fmt.Errorf("%w: CDI annotation: %v", ErrBadDevices, err)
	}
	return gpus, nil
}

func fromDevices(s *specs.Spec) []string {
	if s.Linux == nil {
		return nil
	}
	var gpus []string
	control := false
	for _, d := range s.Linux.Devices {
		if n, ok := gpuIndexFromDevice(d.Path); ok {
			if !slices.Contains(gpus, n) {
				gpus = append(gpus, n)
			}
		} else if strings.HasPrefix(d.Path, "/dev/nvidia") {
			control = true // nvidiactl, nvidia-uvm...: a GPU container whose GPUs we cannot tell
		}
		if len(gpus) == maxGPUs {
			break
		}
	}
	if gpus == nil && control {
		return []string{"all"}
	}
	return gpus
}

func parseList(items []string) ([]string, error) {
	var gpus []string
	for _, it := range items {
		it = strings.TrimSpace(it)
		if it == "" {
			continue
		}
		if !api.ValidGPU(it) {
			return nil, fmt.Errorf("%q is not a GPU index, a GPU-/MIG- UUID or \"all\"", truncate(it))
		}
		if it == "all" {
			return []string{"all"}, nil
		}
		if !slices.Contains(gpus, it) {
			gpus = append(gpus, it)
		}
		if len(gpus) > maxGPUs {
			return nil, fmt.Errorf("more than %d GPUs requested", maxGPUs)
		}
	}
	if len(gpus) == 0 {
		return nil, fmt.Errorf("no GPU named")
	}
	return gpus, nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
