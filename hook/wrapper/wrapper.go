// Package wrapper is muxflow-wrapper, the Go half of muxflow-runtime. muxflow-runtime, a
// small C program on every container's creation path (hook/native), settles the common
// cases itself: commands other than create, containers that certainly ask for no GPU, and
// GPU containers that muxd prepares over its API. It hands this wrapper whatever it cannot
// settle with certainty: muxd not running, a policy file or command line it cannot read
// for sure, a spec given with crun's --config. The wrapper decides those with the full
// policy decoder and the runtime-spec types, reports problems where containerd looks for
// them, and otherwise execs the real runtime (runc or crun) with the command line
// unchanged.
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

	"github.com/muxflow/muxflow/hook/gpucontainer"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/client"
	"github.com/muxflow/muxflow/policy"
	"github.com/muxflow/muxflow/policy/classify"
)

// PolicyEnv overrides where the policy is read from. containerd starts runtimes with
// BinaryName and no extra arguments, so the environment (inherited from containerd through
// the shim) is the one way to point muxflow-runtime at another file.
const PolicyEnv = "MUXFLOW_POLICY"

// HookName is the file name of muxflow-hook, installed next to muxflow-wrapper.
const HookName = "muxflow-hook"

// RuntimeName is the file name of muxflow-runtime, installed next to muxflow-wrapper.
const RuntimeName = "muxflow-runtime"

// Muxd is the part of muxd's client the wrapper uses.
type Muxd interface {
	CreateForRuntime(ctx context.Context, id, bundle, hook string, spec []byte) ([]byte, error)
	Unregister(ctx context.Context, id string) error
}

// Wrapper holds what one invocation needs; the zero value is the real thing, and tests
// replace the pieces that touch the system.
type Wrapper struct {
	// Policy loads the policy; by default from $MUXFLOW_POLICY, else /etc/muxflow/policy.toml
	// when it exists, else the embedded default.
	Policy func() (*policy.Policy, string, error)
	// Client returns the muxd client for a policy.
	Client func(*policy.Policy) Muxd
	// Exec replaces the process with the real runtime (syscall.Exec).
	Exec func(path string, argv, env []string) error
	// Self is the wrapper's own executable: muxflow-hook and muxflow-runtime are beside it.
	Self string
	// Cwd resolves a relative --bundle.
	Cwd string
	// Stderr receives log lines when the runtime was given no --log, and the error
	// sentence always (containerd quotes the runtime's output in its error).
	Stderr io.Writer

	logToFile bool
}

// Run is muxflow-wrapper's main: args are the runtime's arguments without argv[0]. It
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
		w.Client = func(p *policy.Policy) Muxd { return client.New(p.Node.Socket, p.Hook.Timeout.D()) }
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

// LoadPolicy reads the policy the wrapper runs under.
func LoadPolicy() (*policy.Policy, string, error) {
	path := os.Getenv(PolicyEnv)
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
	inv, err := ParseArgs(args, w.Cwd)
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
	return w.gpuContainer(ctx, log, args, inv, b, &s)
}

// externalSpec handles crun's --config: a spec outside the bundle. It is only read; a GPU
// container is refused because wiring it would mean writing outside the bundle.
func (w *Wrapper) externalSpec(log *slog.Logger, args []string, inv Invocation) error {
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
	if w.Self != "" && (sameFile(path, w.Self) || sameFile(path, filepath.Join(filepath.Dir(w.Self), RuntimeName))) {
		return "", fmt.Errorf("muxflow-runtime: policy hook.runtime %q is muxflow itself; name runc or crun", name)
	}
	return path, nil
}

func sameFile(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

func (w *Wrapper) gpuContainer(ctx context.Context, log *slog.Logger, args []string, inv Invocation, b *bundle, s *specs.Spec) error {
	p, src, err := w.Policy()
	if err != nil {
		return w.fail(log, fmt.Errorf("muxflow: cannot create GPU container %s: policy %s: %w", inv.ID, src, err))
	}
	if err := api.ValidateID(inv.ID); err != nil {
		return w.fail(log, fmt.Errorf("muxflow: cannot create GPU container: %w", err))
	}
	cl := w.Client(p)
	hook := filepath.Join(filepath.Dir(w.Self), HookName)
	wired, err := cl.CreateForRuntime(ctx, inv.ID, inv.Bundle, hook, b.raw)
	var se *client.StatusError
	switch {
	case errors.Is(err, client.ErrUnreachable):
		return w.muxdDown(log, args, inv, s, p)
	case errors.As(err, &se):
		return w.fail(log, errors.New(se.Message)) // muxd's sentence names the problem
	case err != nil:
		return w.fail(log, fmt.Errorf("muxflow: GPU container %s: %w", inv.ID, err))
	case wired == nil:
		return w.execRuntime(log, p.Hook.Runtime, args)
	}
	if err := b.writeFile("config.json", wired, b.mode); err != nil {
		w.unregister(ctx, log, cl, p, inv.ID)
		return w.fail(log, fmt.Errorf("muxflow: cannot wire GPU container %s: %w", inv.ID, err))
	}
	log.Info("muxflow: GPU container wired", "container", inv.ID)
	err = w.execRuntime(log, p.Hook.Runtime, args)
	// execRuntime returns only when the exec failed: nothing will run the poststop hook.
	w.unregister(ctx, log, cl, p, inv.ID)
	return err
}

// muxdDown applies the policy for a GPU container created while muxd is not running:
// start it unshared, without MPS or limits, or refuse it.
func (w *Wrapper) muxdDown(log *slog.Logger, args []string, inv Invocation, s *specs.Spec, p *policy.Policy) error {
	var env []string
	if s.Process != nil {
		env = s.Process.Env
	}
	class, _, err := classify.Spec(s.Annotations, env, p)
	if err != nil {
		return w.fail(log, err)
	}
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

func (w *Wrapper) unregister(ctx context.Context, log *slog.Logger, cl Muxd, p *policy.Policy, id string) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.Hook.Timeout.D())
	defer cancel()
	if err := cl.Unregister(uctx, id); err != nil && !client.IsNotFound(err) {
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

// logger writes where the runtime was told to log (--log, in --log-format), so muxflow's
// lines surface in containerd's logs next to runc's; without --log it writes to stderr.
func (w *Wrapper) logger(inv Invocation) *slog.Logger {
	var out io.Writer = w.Stderr
	if inv.Log != "" {
		if f, err := os.OpenFile(inv.Log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err == nil {
			out = f // closed by process exit or exec (O_CLOEXEC)
			w.logToFile = true
		}
	}
	level := slog.LevelInfo
	if !w.logToFile {
		// Without --log, stderr is the container's own stderr (runc run): only warnings
		// and errors belong there.
		level = slog.LevelWarn
	}
	return slog.New(runcLogHandler(out, inv.LogFormat, level))
}

// runcLogHandler writes records in runc's --log-format (json, else text). muxflow-runtime
// writes the same lines in C (hook/native/src/runlog.c); testdata/runlog.vec holds both.
func runcLogHandler(out io.Writer, format string, level slog.Leveler) slog.Handler {
	opts := &slog.HandlerOptions{ReplaceAttr: runcStyle, Level: level}
	if format == "json" {
		return slog.NewJSONHandler(out, opts)
	}
	return slog.NewTextHandler(out, opts)
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
