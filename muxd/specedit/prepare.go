// Package specedit is what happens to a container's spec when the container is created,
// in two steps around muxd's registration: Inspect decides whether it is a GPU container
// and makes its registration (policy/classify), and, once muxd has registered it, Wire wires
// the spec into MPS and libxcuda. muxd runs both in-process when muxflow-runtime sends a
// create request (POST /v1/runtime/create, muxd/daemon/runtime.go), so a GPU container
// costs one round trip to a warm daemon on the creation path rather than a Go process
// start per step. The caller writes the returned spec into the bundle: muxd itself never
// writes outside its own directories.
package specedit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/muxflow/muxflow/hook/gpucontainer"
	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/wiring"
	"github.com/muxflow/muxflow/policy"
	"github.com/muxflow/muxflow/policy/classify"
)

// MaxSpecSize bounds config.json; real specs are tens of KiB.
const MaxSpecSize = 16 << 20

// PreloadFile is the name, inside the container's control directory, of the file mounted
// as the container's /etc/ld.so.preload. It lives with the control block so that only
// muxd writes it and it goes away when the container is unregistered.
const PreloadFile = "ld.so.preload"

// Request is one container creation as the runtime sees it.
type Request struct {
	// ID is the container id from the runtime's command line.
	ID string
	// Bundle is the absolute bundle directory; its rootfs is read (never written) for the
	// image's own /etc/ld.so.preload, and its path names the containerd namespace.
	Bundle string
	// HookBinary is the absolute host path of muxflow-hook, put into the spec as its
	// createRuntime hook; "" when the caller reports the container's pid itself (the C
	// muxflow-runtime does, from the runtime's pid file, to spare a hook process).
	HookBinary string
	// Spec is the bundle's config.json as the runtime read it.
	Spec []byte
}

// ErrInvalid marks (through errors.Is) a request that can never succeed as sent: a
// malformed spec, id, path or annotation. Other errors come from the registry or from the
// node's setup.
var ErrInvalid = errors.New("invalid container")

// invalid keeps an error's sentence as it is while making it match ErrInvalid.
type invalid struct{ err error }

func (e invalid) Error() string        { return e.err.Error() }
func (e invalid) Unwrap() error        { return e.err }
func (e invalid) Is(target error) bool { return target == ErrInvalid }

func invalidf(format string, a ...any) error { return invalid{fmt.Errorf(format, a...)} }

// Prepared is a GPU container's spec, inspected and ready to be wired once muxd has
// registered its Registration.
type Prepared struct {
	// Registration is the container's registration: id, GPUs, names, and its class and
	// limits as policy/classify accepted them.
	Registration classify.Registration
	req          Request
	spec         specs.Spec
}

// Inspect reads one container's spec. For a container that asks for no GPU it returns nil.
// For a GPU container it returns its registration and the spec to wire; every error is an
// ErrInvalid: the request can never succeed as sent.
func Inspect(req Request, p *policy.Policy) (*Prepared, error) {
	if len(req.Spec) > MaxSpecSize {
		return nil, invalidf("muxflow: container %q: config.json is larger than %d bytes", req.ID, MaxSpecSize)
	}
	var s specs.Spec
	if err := json.Unmarshal(req.Spec, &s); err != nil {
		return nil, invalidf("muxflow: container %q: decode config.json: %v", req.ID, err)
	}
	gpus, err := gpucontainer.Detect(&s)
	if err != nil {
		return nil, invalidf("muxflow: container %q: %v", req.ID, err)
	}
	if gpus == nil {
		return nil, nil
	}
	if err := api.ValidateID(req.ID); err != nil {
		return nil, invalidf("muxflow: cannot create GPU container: %v", err)
	}
	if !cleanAbs(req.Bundle) {
		return nil, invalidf("muxflow: GPU container %s: bundle path %q is not absolute and clean", req.ID, req.Bundle)
	}
	if req.HookBinary != "" && !cleanAbs(req.HookBinary) {
		return nil, invalidf("muxflow: GPU container %s: hook binary path %q is not absolute and clean", req.ID, req.HookBinary)
	}
	if s.Process == nil {
		return nil, invalidf("muxflow: GPU container %s has no process in config.json", req.ID)
	}
	if g, planned, _ := gpucontainer.Planned(&s); planned && len(gpus) == 1 && gpus[0] == g {
		// The GPU came from the scheduler's plan, not from a device plugin: give it.
		if err := injectPlanned(&s, g); err != nil {
			return nil, invalid{err}
		}
	}
	if devs := annotatedGPUDevices(s.Annotations); len(devs) > 0 {
		// A device plugin's cdi-annotations strategy: apply the devices it named.
		if err := injectAnnotated(&s, devs); err != nil {
			return nil, invalid{err}
		}
	}
	// Annotations, or where the engine cannot set them (Docker < 24) MUXFLOW_CLASS & co.
	reg, err := classify.Register(req.ID, gpus, ContainerdNamespace(req.Bundle), PodName(s.Annotations), s.Annotations, s.Process.Env, p)
	switch {
	case errors.Is(err, api.ErrInvalid): // the id, GPUs or names
		return nil, invalidf("muxflow: cannot create GPU container: %v", err)
	case err != nil: // one sentence naming the annotation or variable
		return nil, invalid{err}
	}
	return &Prepared{Registration: reg, req: req, spec: s}, nil
}

// Wire returns the wired config.json of the registered container c. threadPercent is its
// MPS active-thread ceiling (muxd/blocks MPSThreadCeiling). A failure leaves the
// registration to the caller to undo.
func (pr *Prepared) Wire(p *policy.Policy, c api.Container, threadPercent uint32) ([]byte, error) {
	out, err := wire(pr.req, &pr.spec, p, c, threadPercent)
	if err != nil {
		return nil, fmt.Errorf("muxflow: cannot wire GPU container %s: %w", pr.req.ID, err)
	}
	return out, nil
}

func regularFile(path string) bool {
	st, err := os.Lstat(path)
	return err == nil && st.Mode().IsRegular()
}

func cleanAbs(path string) bool { return filepath.IsAbs(path) && filepath.Clean(path) == path }

func wire(req Request, s *specs.Spec, p *policy.Policy, c api.Container, threadPercent uint32) ([]byte, error) {
	if c.ID != req.ID {
		return nil, fmt.Errorf("muxd registered id %q, not %q", c.ID, req.ID)
	}
	if req.HookBinary != "" {
		if st, err := os.Stat(req.HookBinary); err != nil || !st.Mode().IsRegular() {
			return nil, fmt.Errorf("muxflow-hook is not installed at %s", req.HookBinary)
		}
	}
	if _, err := os.Stat(p.Hook.LibXCUDA); err != nil {
		return nil, fmt.Errorf("libxcuda is not installed at %s (policy hook.libxcuda)", p.Hook.LibXCUDA)
	}
	if st, err := os.Stat(p.MPS.PipeDir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("the MPS pipe directory %s (policy mps.pipe_dir) does not exist; is muxd's MPS daemon running?", p.MPS.PipeDir)
	}
	image, err := imagePreload(req.Bundle, s)
	if err != nil {
		return nil, err
	}
	preload := filepath.Join(c.Control.Dir, PreloadFile)
	// muxd creates the node's GPU signal page at start; an older one has none.
	var signal string
	if sp := ctlblock.SignalPagePath(p.Node.RunDir); regularFile(sp) {
		signal = sp
	}
	mods, err := wiring.Plan{Container: c, Policy: p, HookBinary: req.HookBinary, Preload: preload, Signal: signal, ThreadPercent: threadPercent}.Modifiers()
	if err != nil {
		return nil, err
	}
	if err := giveUsage(c, s); err != nil {
		return nil, err
	}
	// Modifiers has checked that the control directory is muxd's own.
	if err := os.WriteFile(preload, []byte(wiring.PreloadContents(image)), 0o644); err != nil {
		return nil, fmt.Errorf("write the container's ld.so.preload: %w", err)
	}
	if err := mods.Modify(s); err != nil {
		return nil, err
	}
	return wiring.Patch(req.Spec, s)
}

// giveUsage makes the container's usage file writable by the container's own user only
// (and root): libxcuda in the container writes it, nobody else may. The limits file stays
// muxd's, mounted read-only. A muxd that is not root cannot give files away; it only runs
// in tests, where containers run as its own user and the file is already theirs.
func giveUsage(c api.Container, s *specs.Spec) error {
	uid, gid, err := HostIDs(s)
	if err != nil {
		return invalidf("muxflow: GPU container %s: %v", c.ID, err)
	}
	if os.Geteuid() != 0 && uid != os.Geteuid() {
		return nil
	}
	return ctlblock.SetUsageOwner(c.Control.Dir, uid, gid)
}

// HostIDs is the host uid and gid the container's process runs as: the spec's
// process.user, mapped through the user namespace's id mappings when it has any.
func HostIDs(s *specs.Spec) (uid, gid int, err error) {
	var u, g uint32
	if s.Process != nil {
		u, g = s.Process.User.UID, s.Process.User.GID
	}
	var um, gm []specs.LinuxIDMapping
	if s.Linux != nil {
		um, gm = s.Linux.UIDMappings, s.Linux.GIDMappings
	}
	hu, ok := mapID(u, um)
	if !ok {
		return 0, 0, fmt.Errorf("process uid %d is not mapped by the user namespace", u)
	}
	hg, ok := mapID(g, gm)
	if !ok {
		return 0, 0, fmt.Errorf("process gid %d is not mapped by the user namespace", g)
	}
	return int(hu), int(hg), nil
}

func mapID(id uint32, m []specs.LinuxIDMapping) (uint32, bool) {
	if len(m) == 0 {
		return id, true
	}
	for _, r := range m {
		if id >= r.ContainerID && uint64(id) < uint64(r.ContainerID)+uint64(r.Size) {
			h := uint64(r.HostID) + uint64(id-r.ContainerID)
			if h > 1<<32-2 {
				return 0, false
			}
			return uint32(h), true
		}
	}
	return 0, false
}
