package specedit

import (
	"fmt"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/muxflow/muxflow/policy/annotations"
)

// CDISpecDirs are the directories searched for the node's Container Device Interface
// specs: /etc/cdi and /var/run/cdi, where `nvidia-ctk cdi generate` and muxflow's device
// plugin (deviceplugin) write theirs.
var CDISpecDirs = cdi.DefaultSpecDirs

// CDIKind is the CDI kind of whole GPUs; a device is named by the GPU's UUID (and, in
// nvidia-ctk's specs, also by its index).
const CDIKind = "nvidia.com/gpu"

// injectPlanned gives a container that asked for no GPU through a device plugin the GPU
// the scheduler extender chose for its pod (the muxflow.io/gpu annotation): its device
// nodes, their cgroup rules, driver mounts and environment, as its CDI spec describes
// them — what nvidia-container-toolkit does for a device it allocates. A GPU the node has
// no spec for (it is gone, or was never here) is refused in one sentence, which kubelet
// shows in the pod's events.
func injectPlanned(s *specs.Spec, gpu string) error {
	cache, err := cdi.NewCache(cdi.WithSpecDirs(CDISpecDirs...), cdi.WithAutoRefresh(false))
	if err != nil && cache == nil {
		return fmt.Errorf("muxflow: read the node's CDI specs in %s: %v", strings.Join(CDISpecDirs, ", "), err)
	}
	// Errors in other vendors' spec files do not matter as long as the device resolves.
	name := CDIKind + "=" + gpu
	if cache.GetDevice(name) == nil {
		return fmt.Errorf("muxflow: GPU %s, which the muxflow scheduler chose for this pod (annotation %s), is not on this node: no CDI device %s in %s",
			gpu, annotations.GPU, name, strings.Join(CDISpecDirs, ", "))
	}
	if s.Linux == nil {
		s.Linux = &specs.Linux{}
	}
	if _, err := cache.InjectDevices(s, name); err != nil {
		return fmt.Errorf("muxflow: cannot give this pod GPU %s (annotation %s): %v", gpu, annotations.GPU, err)
	}
	return nil
}

// cdiAnnotationPrefix marks the annotations through which the NVIDIA device plugin's
// cdi-annotations strategy names a container's devices.
const cdiAnnotationPrefix = "cdi.k8s.io/"

// annotatedGPUDevices lists the nvidia.com GPU devices named in cdi.k8s.io/* annotations,
// in a stable order.
func annotatedGPUDevices(ann map[string]string) []string {
	var keys []string
	for k := range ann {
		if strings.HasPrefix(k, cdiAnnotationPrefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		for d := range strings.SplitSeq(ann[k], ",") {
			d = strings.TrimSpace(d)
			if (strings.HasPrefix(d, "nvidia.com/gpu=") || strings.HasPrefix(d, "nvidia.com/mig=")) && !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	}
	return out
}

// injectAnnotated applies the CDI devices a device plugin named in cdi.k8s.io/*
// annotations (the NVIDIA device plugin's cdi-annotations strategy). containerd 1.6 does
// not apply CDI itself; where the engine already did, applying the same edits again
// changes nothing (CDI replaces device nodes and mounts by path).
func injectAnnotated(s *specs.Spec, devices []string) error {
	cache, err := cdi.NewCache(cdi.WithSpecDirs(CDISpecDirs...), cdi.WithAutoRefresh(false))
	if err != nil && cache == nil {
		return fmt.Errorf("muxflow: read the node's CDI specs in %s: %v", strings.Join(CDISpecDirs, ", "), err)
	}
	for _, d := range devices {
		if cache.GetDevice(d) == nil {
			return fmt.Errorf("muxflow: CDI device %s, which the device plugin allocated (annotation %s*), is not in the node's CDI specs in %s",
				d, cdiAnnotationPrefix, strings.Join(CDISpecDirs, ", "))
		}
	}
	if s.Linux == nil {
		s.Linux = &specs.Linux{}
	}
	if _, err := cache.InjectDevices(s, devices...); err != nil {
		return fmt.Errorf("muxflow: cannot apply CDI devices %s: %v", strings.Join(devices, ", "), err)
	}
	return nil
}
