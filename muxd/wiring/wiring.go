// Package wiring changes a GPU container's OCI spec so that the container joins muxflow:
// it bind-mounts the MPS pipe directory, libxcuda, the container's control block and an
// /etc/ld.so.preload that loads libxcuda, sets the environment libxcuda and CUDA read, and
// adds the OCI hooks that report the container's life to muxd. Each change is a Modifier so
// that the whole edit is a list that tests can check piece by piece.
package wiring

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
)

// Paths inside the container. Those libxcuda reads are ctlblock's, which mirrors
// libxcuda/include (the source) and is checked against it by ctlblock's tests; see the
// mount contract in docs/architecture.md.
const (
	// ContainerRoot holds what muxflow mounts under the runtime's /run.
	ContainerRoot = ctlblock.ContainerRoot
	// ContainerMPSDir is where the host's MPS pipe directory appears.
	ContainerMPSDir = ctlblock.ContainerMPSDir
	// ContainerControlDir is where libxcuda looks for the control block's two files.
	ContainerControlDir = ctlblock.ContainerDir
	// ContainerLimits is the limits file (read-only: only muxd writes it).
	ContainerLimits = ContainerControlDir + "/" + ctlblock.LimitsFile
	// ContainerUsage is the usage file (read-write: libxcuda writes it).
	ContainerUsage = ContainerControlDir + "/" + ctlblock.UsageFile
	// ContainerSignal is the node's GPU signal page (online-aware gating): read-write in
	// online containers, read-only in offline ones.
	ContainerSignal = ctlblock.ContainerSignal
	// ContainerLib is where libxcuda.so appears (read-only).
	ContainerLib = "/usr/lib/muxflow/libxcuda.so"
	// PreloadPath is the dynamic loader's list of libraries loaded into every process.
	PreloadPath = "/etc/ld.so.preload"
)

// Environment variables set in GPU containers.
const (
	EnvMPSPipe       = ctlblock.EnvMPSPipe
	EnvThreadPercent = ctlblock.EnvMPSThreadPercentage
	// EnvControlBlock tells libxcuda the directory of its control block.
	EnvControlBlock = ctlblock.EnvDir
	// EnvFailPolicy is "closed" (ctlblock.EnvFailPolicyClosed) when libxcuda must refuse
	// GPU work without a control block.
	EnvFailPolicy = ctlblock.EnvFailPolicy
	// EnvDrainTimeout bounds libxcuda's drain after SIGTERM (whole seconds); it is set
	// below the eviction grace period so that a drain on a hung GPU ends with the
	// signal's own action rather than muxd's SIGKILL.
	EnvDrainTimeout = ctlblock.EnvDrainTimeout
	EnvContainerID  = "MUXFLOW_CONTAINER_ID"
	EnvClass        = "MUXFLOW_CLASS"
)

// Modifier is one change to a spec.
type Modifier interface {
	Modify(*specs.Spec) error
}

// List applies its modifiers in order and stops at the first error.
type List []Modifier

// Modify implements Modifier.
func (l List) Modify(s *specs.Spec) error {
	for _, m := range l {
		if err := m.Modify(s); err != nil {
			return err
		}
	}
	return nil
}

// Mounts appends bind mounts. They go last so that they land on top of the runtime's own
// /run tmpfs, whatever its position.
type Mounts []specs.Mount

// Modify implements Modifier. A mount whose destination the spec already uses replaces it,
// so that applying the wiring twice (a retried create) leaves one copy.
func (m Mounts) Modify(s *specs.Spec) error {
	for _, mt := range m {
		if !filepath.IsAbs(mt.Source) || filepath.Clean(mt.Source) != mt.Source {
			return fmt.Errorf("mount source %q is not a clean absolute path", mt.Source)
		}
		if !filepath.IsAbs(mt.Destination) || filepath.Clean(mt.Destination) != mt.Destination {
			return fmt.Errorf("mount destination %q is not a clean absolute path", mt.Destination)
		}
		s.Mounts = slices.DeleteFunc(s.Mounts, func(x specs.Mount) bool { return x.Destination == mt.Destination })
		s.Mounts = append(s.Mounts, mt)
	}
	return nil
}

// Bind returns a bind mount of src at dst, read-only unless rw.
func Bind(src, dst string, rw bool) specs.Mount {
	mode := "ro"
	if rw {
		mode = "rw"
	}
	return specs.Mount{Destination: dst, Type: "bind", Source: src, Options: []string{"rbind", "nosuid", "nodev", mode}}
}

// Env sets environment variables of the container's process, replacing earlier values.
type Env map[string]string

// Modify implements Modifier.
func (e Env) Modify(s *specs.Spec) error {
	if s.Process == nil {
		return fmt.Errorf("spec has no process")
	}
	keys := make([]string, 0, len(e))
	for k := range e {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("environment variable name %q is invalid", k)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		s.Process.Env = slices.DeleteFunc(s.Process.Env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
		s.Process.Env = append(s.Process.Env, k+"="+e[k])
	}
	return nil
}

// Hooks adds muxflow-hook as a createRuntime hook: it reports the container's host pid to
// muxd. It is used only when the container's creator cannot report the pid itself (the C
// muxflow-runtime does, from the runtime's pid file, and asks for no hook). Existing hooks are kept; muxflow's runs last so that the container is set up as its
// other hooks want it before muxd learns its pid. There is no poststop hook: muxd watches
// the process it was told about and unregisters the container when it exits, which saves
// a hook process on every container's run (a few ms each) and also works when the runtime
// never gets to run poststop hooks. muxflow-hook still understands poststop, for specs
// wired by earlier versions.
type Hooks struct {
	// Binary is the host path of muxflow-hook.
	Binary string
	// Args follow the subcommand on every hook's command line (socket, timeout).
	Args []string
	// TimeoutSeconds bounds each hook run; runc kills a hook that overruns.
	TimeoutSeconds int
}

// Hook subcommands understood by muxflow-hook (and muxd's /v1/runtime/hooks endpoint).
const (
	HookStart = "create-runtime"
	HookStop  = "poststop"
)

// Modify implements Modifier.
func (h Hooks) Modify(s *specs.Spec) error {
	if !filepath.IsAbs(h.Binary) {
		return fmt.Errorf("hook binary %q is not an absolute path", h.Binary)
	}
	if s.Hooks == nil {
		s.Hooks = &specs.Hooks{}
	}
	mk := func(sub string) specs.Hook {
		hk := specs.Hook{Path: h.Binary, Args: append([]string{"muxflow-hook", sub}, h.Args...)}
		if h.TimeoutSeconds > 0 {
			t := h.TimeoutSeconds
			hk.Timeout = &t
		}
		return hk
	}
	ours := func(x specs.Hook) bool { return x.Path == h.Binary }
	s.Hooks.CreateRuntime = append(slices.DeleteFunc(s.Hooks.CreateRuntime, ours), mk(HookStart))
	return nil
}

// Annotation records on the spec that muxflow wired it, for `runc state` and debugging.
type Annotation map[string]string

// Modify implements Modifier.
func (a Annotation) Modify(s *specs.Spec) error {
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	for k, v := range a {
		s.Annotations[k] = v
	}
	return nil
}
