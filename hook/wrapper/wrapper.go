// Package wrapper is the full muxflow runtime wrapper, run as `muxflow-hook runtime ARGS`
// when muxflow-runtime's first stage (package front) finds a GPU container or is not sure.
// On create and run it reads the bundle's config.json and, for a GPU container, classifies
// it, registers it with muxd and wires it into MPS and libxcuda before handing the unchanged
// command line to the real runtime (runc or crun). Every other command, and every container
// that asks for no GPU, is passed through untouched and nothing is written.
package wrapper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/muxflow/muxflow/hook/classify"
	"github.com/muxflow/muxflow/hook/front"
	"github.com/muxflow/muxflow/hook/gpucontainer"
	"github.com/muxflow/muxflow/hook/muxdconn"
	"github.com/muxflow/muxflow/hook/wiring"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/policy"
)

// Registrar is the part of muxd's client the wrapper uses.
type Registrar interface {
	Register(ctx context.Context, r api.RegisterRequest) (api.Container, error)
	Unregister(ctx context.Context, id string) error
}

// Wrapper holds what one invocation needs; the zero value plus Defaults is the real thing,
// and tests replace the pieces that touch the system.
type Wrapper struct {
	// Policy loads the policy; by default from $MUXFLOW_POLICY, else /etc/muxflow/policy.toml
	// when it exists, else the embedded default.
	Policy func() (*policy.Policy, string, error)
	// Client returns the muxd client for a policy.
	Client func(*policy.Policy) Registrar
	// Exec replaces the process with the real runtime (syscall.Exec).
	Exec func(path string, argv, env []string) error
	// Self is the wrapper's own executable (muxflow-hook): the binary the OCI hooks run,
	// and, with muxflow-runtime beside it, what hook.runtime must never resolve to.
	Self string
	// Cwd resolves a relative --bundle.
	Cwd string
	// Stderr receives log lines when the runtime was given no --log, and the error
	// sentence always (containerd quotes the runtime's output in its error).
	Stderr io.Writer

	logToFile bool
}

// Run is muxflow-runtime's main: args are the runtime's arguments without argv[0]. It
// returns only on failure; on success the process has become the real runtime.
func Run(ctx context.Context, args []string) error {
	w := &Wrapper{}
	return w.Run(ctx, args)
}

func (w *Wrapper) defaults() {
	if w.Policy == nil {
		w.Policy = LoadPolicy
	}
	if w.Client == nil {
		w.Client = func(p *policy.Policy) Registrar { return muxdconn.New(p.Node.Socket, p.Hook.Timeout.D()) }
	}
	if w.Exec == nil {
		w.Exec = syscall.Exec
	}
	if w.Self == "" {
		if exe, err := os.Executable(); err == nil {
			w.Self = exe
		}
	}
	if w.Cwd == "" {
		w.Cwd, _ = os.Getwd()
	}
	if w.Stderr == nil {
		w.Stderr = os.Stderr
	}
}

// LoadPolicy reads the policy the wrapper and hook run under.
func LoadPolicy() (*policy.Policy, string, error) {
	path := os.Getenv(front.PolicyEnv)
	if path == "" {
		if _, err := os.Stat(policy.DefaultPath); err != nil {
			return policy.Default(), "embedded default", nil
		}
		path = policy.DefaultPath
	}
	p, err := policy.Load(path)
	if err != nil {
		return nil, path, err
	}
	return p, path, nil
}

// Run handles one invocation.
func (w *Wrapper) Run(ctx context.Context, args []string) error {
	w.defaults()
	inv, err := front.ParseArgs(args, w.Cwd)
	log := w.logger(inv)
	if err != nil {
		return w.fail(log, fmt.Errorf("muxflow-runtime: %w", err))
	}
	if inv.Command != "create" && inv.Command != "run" {
		return w.passThrough(log, args)
	}
	if inv.Config != "" {
		return w.externalSpec(log, args, inv)
	}
	b, err := openBundle(inv.Bundle)
	if err != nil {
		return w.fail(log, fmt.Errorf("muxflow-runtime: container %s: %w", inv.ID, err))
	}
	defer b.Close()
	var s specs.Spec
	if err := json.Unmarshal(b.raw, &s); err != nil {
		return w.fail(log, fmt.Errorf("muxflow-runtime: container %s: decode config.json: %w", inv.ID, err))
	}
	gpus, err := gpucontainer.Detect(&s)
	if err != nil {
		return w.fail(log, fmt.Errorf("muxflow: container %s: %w", inv.ID, err))
	}
	if gpus == nil {
		return w.passThrough(log, args)
	}
	return w.gpuContainer(ctx, log, args, inv, b, &s, gpus)
}

// externalSpec handles crun's --config: a spec outside the bundle. It is only read; a GPU
// container is refused because wiring it would mean writing outside the bundle.
func (w *Wrapper) externalSpec(log *slog.Logger, args []string, inv front.Invocation) error {
	data, err := readSpecFile(inv.Config)
	if err != nil {
		return w.fail(log, fmt.Errorf("muxflow-runtime: container %s: %w", inv.ID, err))
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return w.fail(log, fmt.Errorf("muxflow-runtime: container %s: decode %s: %w", inv.ID, inv.Config, err))
	}
	gpus, err := gpucontainer.Detect(&s)
	if err != nil || gpus != nil {
		return w.fail(log, fmt.Errorf("muxflow: GPU container %s uses --config; muxflow wires only the bundle's config.json", inv.ID))
	}
	return w.passThrough(log, args)
}

// passThrough hands a command that muxflow has nothing to add to the real runtime. A broken
// policy must not stop anyone from deleting or killing containers, so it falls back to
// runc with a warning.
func (w *Wrapper) passThrough(log *slog.Logger, args []string) error {
	name := "runc"
	if p, src, err := w.Policy(); err != nil {
		log.Warn("muxflow-runtime: policy unreadable, passing the command to runc", "policy", src, "error", err)
	} else {
		name = p.Hook.Runtime
	}
	return w.execRuntime(log, name, args)
}

func (w *Wrapper) execRuntime(log *slog.Logger, name string, args []string) error {
	path, err := w.findRuntime(name)
	if err != nil {
		return w.fail(log, err)
	}
	argv := append([]string{filepath.Base(path)}, args...)
	if err := w.Exec(path, argv, os.Environ()); err != nil {
		return w.fail(log, fmt.Errorf("muxflow-runtime: exec %s: %w", path, err))
	}
	return nil
}

func (w *Wrapper) findRuntime(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("muxflow-runtime: the OCI runtime %q (policy hook.runtime) is not installed: %w", name, err)
	}
	if w.Self != "" && (sameFile(path, w.Self) || sameFile(path, filepath.Join(filepath.Dir(w.Self), "muxflow-runtime"))) {
		return "", fmt.Errorf("muxflow-runtime: policy hook.runtime %q is muxflow itself; name runc or crun", name)
	}
	return path, nil
}

func sameFile(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

func (w *Wrapper) gpuContainer(ctx context.Context, log *slog.Logger, args []string, inv front.Invocation, b *bundle, s *specs.Spec, gpus []string) error {
	p, src, err := w.Policy()
	if err != nil {
		return w.fail(log, fmt.Errorf("muxflow: cannot create GPU container %s: policy %s: %w", inv.ID, src, err))
	}
	if err := api.ValidateID(inv.ID); err != nil {
		return w.fail(log, fmt.Errorf("muxflow: cannot create GPU container: %w", err))
	}
	class, limits, err := classify.Classify(s.Annotations, p)
	if err != nil {
		return w.fail(log, err)
	}
	req := api.RegisterRequest{
		ID: inv.ID, Class: class, GPUs: gpus, Limits: limits,
		Namespace: containerdNamespace(inv.Bundle),
		Pod:       podName(s.Annotations),
	}
	if err := req.Validate(); err != nil {
		return w.fail(log, fmt.Errorf("muxflow: cannot create GPU container: %w", err))
	}
	cl := w.Client(p)
	rctx, cancel := context.WithTimeout(ctx, p.Hook.Timeout.D())
	c, err := cl.Register(rctx, req)
	cancel()
	if errors.Is(err, muxdconn.ErrUnreachable) {
		mode := p.Hook.OfflineWhenDown
		if class == api.Online {
			mode = p.Hook.OnlineWhenDown
		}
		if mode == "unshared" {
			log.Warn("muxflow: muxd is not running; starting the GPU container unshared, without MPS or limits",
				"container", inv.ID, "class", class, "socket", p.Node.Socket)
			return w.execRuntime(log, p.Hook.Runtime, args)
		}
		return w.fail(log, fmt.Errorf("muxflow: refusing %s GPU container %s because muxd is not running (no answer on %s); start muxd (systemctl start muxd) and retry", class, inv.ID, p.Node.Socket))
	}
	if err != nil {
		return w.fail(log, fmt.Errorf("muxflow: muxd refused GPU container %s: %w", inv.ID, err))
	}
	if err := w.wire(log, inv, b, s, p, c); err != nil {
		w.unregister(ctx, log, cl, p, inv.ID)
		return w.fail(log, fmt.Errorf("muxflow: cannot wire GPU container %s: %w", inv.ID, err))
	}
	log.Info("muxflow: GPU container wired", "container", inv.ID, "class", class, "gpus", strings.Join(gpus, ","))
	err = w.execRuntime(log, p.Hook.Runtime, args)
	// execRuntime returns only when the exec failed: nothing will run the poststop hook.
	w.unregister(ctx, log, cl, p, inv.ID)
	return err
}

func (w *Wrapper) wire(log *slog.Logger, inv front.Invocation, b *bundle, s *specs.Spec, p *policy.Policy, c api.Container) error {
	if c.ID != inv.ID {
		return fmt.Errorf("muxd registered id %q, not %q", c.ID, inv.ID)
	}
	hookBin := w.Self
	if st, err := os.Stat(hookBin); err != nil || !st.Mode().IsRegular() || !filepath.IsAbs(hookBin) {
		return fmt.Errorf("cannot find muxflow-hook's own path (%q) for the container's hooks", hookBin)
	}
	if _, err := os.Stat(p.Hook.LibXCUDA); err != nil {
		return fmt.Errorf("libxcuda is not installed at %s (policy hook.libxcuda)", p.Hook.LibXCUDA)
	}
	if st, err := os.Stat(p.MPS.PipeDir); err != nil || !st.IsDir() {
		return fmt.Errorf("the MPS pipe directory %s (policy mps.pipe_dir) does not exist; is muxd's MPS daemon running?", p.MPS.PipeDir)
	}
	image, err := b.imagePreload(s)
	if err != nil {
		return err
	}
	const preloadName = "muxflow-ld.so.preload"
	if err := b.writeFile(preloadName, []byte(wiring.PreloadContents(image)), 0o644); err != nil {
		return err
	}
	mods, err := wiring.Plan{
		Container: c, Policy: p, HookBinary: hookBin,
		Preload: filepath.Join(b.dir, preloadName),
	}.Modifiers()
	if err != nil {
		return err
	}
	if err := mods.Modify(s); err != nil {
		return err
	}
	out, err := patchSpec(b.raw, s)
	if err != nil {
		return err
	}
	return b.writeFile("config.json", out, b.mode)
}

func (w *Wrapper) unregister(ctx context.Context, log *slog.Logger, cl Registrar, p *policy.Policy, id string) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.Hook.Timeout.D())
	defer cancel()
	if err := cl.Unregister(uctx, id); err != nil {
		log.Warn("muxflow: could not unregister the container after a failed create", "container", id, "error", err)
	}
}

// fail logs err where containerd looks for the runtime's errors and returns it.
func (w *Wrapper) fail(log *slog.Logger, err error) error {
	log.Error(err.Error())
	if w.logToFile {
		fmt.Fprintln(w.Stderr, err)
	}
	return err
}

// annotation returns a bounded annotation value; oversized values are dropped, not cut.
func annotation(ann map[string]string, key string, limit int) string {
	v := ann[key]
	if len(v) > limit {
		return ""
	}
	return v
}

// containerdNamespace reads the containerd namespace (k8s.io, moby, ...) from the bundle
// path containerd's runc shim uses, <state>/io.containerd.runtime.v2.task/<namespace>/<id>;
// muxd needs it to stop the container through containerd. Other callers have none.
func containerdNamespace(bundle string) string {
	parent := filepath.Dir(bundle)
	if filepath.Base(filepath.Dir(parent)) != "io.containerd.runtime.v2.task" {
		return ""
	}
	ns := filepath.Base(parent)
	if len(ns) > 76 || !validNamespace(ns) {
		return ""
	}
	return ns
}

// validNamespace follows containerd's rule: labels of letters and digits, joined by '.',
// '_' or '-' inside a label.
func validNamespace(ns string) bool {
	if ns == "" {
		return false
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || i == len(ns)-1 || (c != '.' && c != '_' && c != '-')) {
			return false
		}
	}
	return true
}

// podName is "namespace/name" from the annotations containerd's CRI plugin sets.
func podName(ann map[string]string) string {
	ns, name := annotation(ann, "io.kubernetes.cri.sandbox-namespace", 253), annotation(ann, "io.kubernetes.cri.sandbox-name", 253)
	if ns == "" || name == "" {
		return ""
	}
	return ns + "/" + name
}

// logger writes where the runtime was told to log (--log, in --log-format), so muxflow's
// lines surface in containerd's logs next to runc's; without --log it writes to stderr.
func (w *Wrapper) logger(inv front.Invocation) *slog.Logger {
	var out io.Writer = w.Stderr
	if inv.Log != "" {
		if f, err := os.OpenFile(inv.Log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err == nil {
			out = f // closed by process exit or exec (O_CLOEXEC)
			w.logToFile = true
		}
	}
	opts := &slog.HandlerOptions{ReplaceAttr: runcStyle}
	if !w.logToFile {
		// Without --log, stderr is the container's own stderr (runc run): only warnings
		// and errors belong there.
		opts.Level = slog.LevelWarn
	}
	if inv.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(out, opts))
	}
	return slog.New(slog.NewTextHandler(out, opts))
}

// runcStyle writes records as runc's logrus does (level in lower case, RFC 3339 time), so
// containerd's reader of the runtime log (which picks the last "error" entry) reads ours.
func runcStyle(groups []string, a slog.Attr) slog.Attr {
	if len(groups) > 0 {
		return a
	}
	switch a.Key {
	case slog.LevelKey:
		if a.Value.String() == slog.LevelWarn.String() {
			return slog.String("level", "warning")
		}
		return slog.String("level", strings.ToLower(a.Value.String()))
	case slog.TimeKey:
		return slog.String("time", a.Value.Time().Format(time.RFC3339Nano))
	}
	return a
}
