// Package front is muxflow-runtime's first stage, the part every runtime command goes
// through. It decides in well under a millisecond whether a command needs muxflow at all:
// commands other than create and run, and containers that ask for no GPU, go straight to the
// real runtime (runc or crun) with their command line untouched and nothing written.
// Everything else — GPU containers, and any case the fast path is not sure about — is handed
// to the full wrapper (`muxflow-hook runtime`, package wrapper), which links muxd's client
// and the policy decoder that this stage keeps out of the fast path.
package front

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/muxflow/muxflow/hook/gpucontainer"
)

// HookName is the file name of muxflow-hook, looked for next to muxflow-runtime.
const HookName = "muxflow-hook"

// WrapperCommand is muxflow-hook's subcommand that runs the full wrapper.
const WrapperCommand = "runtime"

// maxSpecSize bounds config.json; real specs are tens of KiB.
const maxSpecSize = 16 << 20

// Front holds what the first stage touches in the system; tests replace the pieces.
type Front struct {
	Exec   func(path string, argv, env []string) error
	Self   string // muxflow-runtime's own path
	Cwd    string
	Getenv func(string) string
	Stderr io.Writer
}

// Run is muxflow-runtime's main. It returns only when it could not exec anything.
func Run(args []string) error {
	f := &Front{Exec: syscall.Exec, Getenv: os.Getenv, Stderr: os.Stderr}
	f.Self, _ = os.Executable()
	f.Cwd, _ = os.Getwd()
	return f.Run(args)
}

// Run decides and execs.
func (f *Front) Run(args []string) error {
	inv, err := ParseArgs(args, f.Cwd)
	if err != nil {
		return f.full(inv, args)
	}
	if inv.Command == "create" || inv.Command == "run" {
		if inv.Config != "" {
			return f.full(inv, args) // a spec outside the bundle: the wrapper refuses it
		}
		gpu, sure := f.gpuContainer(inv.Bundle)
		if gpu || !sure {
			return f.full(inv, args)
		}
	}
	name, ok := QuickRuntime(f.Getenv)
	if !ok {
		return f.full(inv, args)
	}
	path, err := exec.LookPath(name)
	if err != nil || f.isSelf(path) {
		return f.full(inv, args) // the wrapper reports a missing or looping runtime properly
	}
	if err := f.Exec(path, append([]string{filepath.Base(path)}, args...), os.Environ()); err != nil {
		return f.fail(inv, fmt.Errorf("muxflow-runtime: exec %s: %w", path, err))
	}
	return nil
}

// gpuContainer reads only what detection needs from the bundle's config.json. sure is
// false when the spec could not be read or understood; the full wrapper then decides, and
// reports the problem.
func (f *Front) gpuContainer(bundle string) (gpu, sure bool) {
	root, err := os.OpenRoot(bundle) // a config.json symlinked out of the bundle is not followed
	if err != nil {
		return false, false
	}
	defer root.Close()
	file, err := root.Open("config.json")
	if err != nil {
		return false, false
	}
	defer file.Close()
	data, err := io.ReadAll(io.LimitReader(file, maxSpecSize+1))
	if err != nil || len(data) > maxSpecSize {
		return false, false
	}
	var s struct {
		Process *struct {
			Env []string `json:"env"`
		} `json:"process"`
		Annotations map[string]string `json:"annotations"`
		Linux       *struct {
			Devices []specs.LinuxDevice `json:"devices"`
		} `json:"linux"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return false, false
	}
	spec := specs.Spec{Annotations: s.Annotations}
	if s.Process != nil {
		spec.Process = &specs.Process{Env: s.Process.Env}
	}
	if s.Linux != nil {
		spec.Linux = &specs.Linux{Devices: s.Linux.Devices}
	}
	gpus, err := gpucontainer.Detect(&spec)
	if err != nil {
		return false, false
	}
	return gpus != nil, true
}

// full hands the command to the full wrapper: muxflow-hook next to this binary.
func (f *Front) full(inv Invocation, args []string) error {
	hook := filepath.Join(filepath.Dir(f.Self), HookName)
	if st, err := os.Stat(hook); err != nil || !st.Mode().IsRegular() {
		return f.fail(inv, fmt.Errorf("muxflow-runtime: %s is not installed next to muxflow-runtime; reinstall muxflow", hook))
	}
	argv := append([]string{HookName, WrapperCommand}, args...)
	if err := f.Exec(hook, argv, os.Environ()); err != nil {
		return f.fail(inv, fmt.Errorf("muxflow-runtime: exec %s: %w", hook, err))
	}
	return nil
}

func (f *Front) isSelf(path string) bool {
	a, err1 := os.Stat(path)
	b, err2 := os.Stat(f.Self)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}

// fail reports err on stderr and, when the runtime was given --log, as the last error
// entry of that log, where containerd looks for the runtime's reason.
func (f *Front) fail(inv Invocation, err error) error {
	fmt.Fprintln(f.Stderr, err)
	if inv.Log != "" {
		if lf, oerr := os.OpenFile(inv.Log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); oerr == nil {
			WriteLogLine(lf, inv.LogFormat, "error", err.Error())
			lf.Close()
		}
	}
	return err
}

// WriteLogLine writes one line the way runc's logrus does (json or text).
func WriteLogLine(w io.Writer, format, level, msg string) {
	now := time.Now().Format(time.RFC3339Nano)
	if format == "json" {
		b, _ := json.Marshal(map[string]string{"level": level, "msg": msg, "time": now})
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	fmt.Fprintf(w, "time=%q level=%s msg=%q\n", now, level, msg)
}
