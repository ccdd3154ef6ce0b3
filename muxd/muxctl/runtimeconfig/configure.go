// Package runtimeconfig is `muxctl runtime configure`: it adds (or removes) the muxflow
// runtime in containerd's config.toml (config versions 2 and 3: a runc.v2 runtime whose
// BinaryName is muxflow-runtime and whose pod_annotations pass muxflow.io/*) or in Docker's
// daemon.json (runtimes.muxflow). Edits are idempotent, keep everything else in the file,
// leave a backup of the previous file and are written atomically.
package runtimeconfig

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/muxflow/muxflow/policy"
)

// DefaultBinary is where the packages install muxflow-runtime.
const DefaultBinary = "/usr/bin/muxflow-runtime"

// BackupSuffix is appended to the config's path for the copy kept before each change.
const BackupSuffix = ".muxflow.bak"

// maxConfigSize bounds the files the tool reads; real ones are a few KiB.
const maxConfigSize = 4 << 20

type target struct {
	defaultPath string
	edit        func(doc, binary string, remove bool) (string, error)
	// setDefault makes muxflow the engine's default runtime (set), or puts the engine's
	// own default back when muxflow is it (!set, on --remove).
	setDefault func(doc string, set bool) (string, error)
	restart    string
	fresh      string // content of a config file that does not exist yet
}

var targets = map[string]target{
	"containerd": {"/etc/containerd/config.toml", editContainerd, defaultContainerd, "systemctl restart containerd", "version = 2\n"},
	"docker":     {"/etc/docker/daemon.json", editDocker, defaultDocker, "systemctl restart docker", ""},
	// CRI-O's is a drop-in of muxflow's own; setDefault is folded into the edit.
	"crio": {crioDropIn, nil, nil, "systemctl restart crio", ""},
}

const configureUsage = `Usage: muxctl runtime configure [--runtime=containerd|docker|crio] [flags]

Adds (or with --remove takes away) a runtime named "muxflow" whose binary is
muxflow-runtime in the container engine's configuration, keeping everything else in the
file and a backup of the old one (<file>.muxflow.bak), and prints the restart it needs:
  containerd  /etc/containerd/config.toml (config version 2 or 3): a runc.v2 runtime
              whose pod_annotations pass muxflow.io/*
  docker      /etc/docker/daemon.json: runtimes.muxflow
  crio        /etc/crio/crio.conf.d/99-muxflow.conf, a drop-in of its own:
              [crio.runtime.runtimes.muxflow]

Flags:
  --runtime NAME     containerd, docker or crio (may be left out with --chain alone)
  --config PATH      the file to edit instead of the default above
  --binary PATH      absolute path of muxflow-runtime (default /usr/bin/muxflow-runtime)
  --set-as-default   also make muxflow the engine's default runtime (containerd
                     default_runtime_name, Docker default-runtime, CRI-O default_runtime),
                     so containers that name no runtime go through muxflow too;
                     --remove puts the engine's default back when muxflow is it
  --chain PROGRAM    the OCI runtime muxflow-runtime calls after wiring a container:
                     sets [hook] runtime in muxflow's policy (default runc); e.g.
                     --chain nvidia-container-runtime keeps the NVIDIA toolkit's runtime
                     in the chain (engine -> muxflow-runtime -> nvidia-container-runtime -> runc);
                     --chain runc undoes it
  --policy PATH      muxflow's policy for --chain (default /etc/muxflow/policy.toml)
  --dry-run          print the resulting file(s), write nothing
  --remove           remove the muxflow runtime instead of adding it
`

// Configure runs `muxctl runtime configure` with args after "configure" (see
// configureUsage). It prints what it did and the restart it needs on stdout; with
// --dry-run it prints the resulting files and writes nothing.
func Configure(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("muxctl runtime configure", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, configureUsage) }
	runtime := fs.String("runtime", "", "containerd, docker or crio")
	path := fs.String("config", "", "the config file (default /etc/containerd/config.toml, /etc/docker/daemon.json or "+crioDropIn+")")
	binary := fs.String("binary", DefaultBinary, "absolute path of muxflow-runtime")
	dry := fs.Bool("dry-run", false, "print the resulting file instead of writing it")
	remove := fs.Bool("remove", false, "remove the muxflow runtime instead of adding it")
	setDefault := fs.Bool("set-as-default", false, "also make muxflow the engine's default runtime")
	chain := fs.String("chain", "", "the OCI runtime muxflow-runtime calls (policy [hook] runtime), e.g. nvidia-container-runtime")
	policyPath := fs.String("policy", policy.DefaultPath, "muxflow's policy, for --chain")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *chain != "" && *remove {
		return fmt.Errorf("--chain and --remove do not go together; to chain runc again, run --chain runc")
	}
	if *setDefault && *remove {
		return fmt.Errorf("--set-as-default and --remove do not go together (--remove puts the engine's default back by itself)")
	}
	if *runtime == "" && *chain != "" {
		return configureChain(*policyPath, *chain, *dry, stdout)
	}
	t, ok := targets[*runtime]
	if !ok {
		return fmt.Errorf("--runtime must be containerd, docker or crio, got %q", *runtime)
	}
	if *path == "" {
		*path = t.defaultPath
	}
	if b := *binary; !filepath.IsAbs(b) || filepath.Clean(b) != b || strings.ContainsAny(b, "\x00\n\r\"'\\") {
		return fmt.Errorf("--binary must be a clean absolute path without quotes, got %q", b)
	}
	if *chain != "" {
		if err := configureChain(*policyPath, *chain, *dry, stdout); err != nil {
			return err
		}
	}
	file, err := resolve(*path)
	if err != nil {
		return err
	}
	old, mode, exists, err := readConfig(file)
	if err != nil {
		return err
	}
	doc := old
	if !exists {
		if *remove {
			fmt.Fprintf(stdout, "%s does not exist; nothing to remove\n", file)
			return nil
		}
		doc = t.fresh
	}
	var out string
	if t.edit == nil { // crio: a drop-in of our own
		out, err = editCrio(doc, *binary, *remove, *setDefault)
	} else {
		out, err = t.edit(doc, *binary, *remove)
		if err == nil && (*setDefault || *remove) {
			out, err = t.setDefault(out, *setDefault)
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if *dry {
		if t.edit == nil && *remove {
			fmt.Fprintf(stdout, "would remove %s\n", file)
			return nil
		}
		_, err := io.WriteString(stdout, out)
		return err
	}
	verb := "added the muxflow runtime to"
	if *setDefault {
		verb = "added the muxflow runtime, as the default runtime, to"
	}
	if *remove {
		verb = "removed the muxflow runtime from"
	}
	if exists && out == old {
		fmt.Fprintf(stdout, "%s: already up to date; nothing changed\n", file)
		return nil
	}
	if t.edit == nil && *remove {
		if err := os.Remove(file); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "removed %s\nrestart to apply: %s\n", file, t.restart)
		return nil
	}
	backup := ""
	if exists && t.edit != nil {
		backup = file + BackupSuffix
		if err := writeAtomic(backup, []byte(old), mode); err != nil {
			return fmt.Errorf("keep a backup of %s: %w", file, err)
		}
	}
	if err := writeAtomic(file, []byte(out), mode); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	fmt.Fprintf(stdout, "%s %s", verb, file)
	if backup != "" {
		fmt.Fprintf(stdout, " (previous file kept as %s)", backup)
	}
	fmt.Fprintf(stdout, "\nrestart to apply: %s\n", t.restart)
	return nil
}

// configureChain sets [hook] runtime in muxflow's policy. muxflow-runtime reads it each
// time it runs, so it applies to the next container without a restart.
func configureChain(path, program string, dry bool, stdout io.Writer) error {
	file, err := resolve(path)
	if err != nil {
		return err
	}
	old, mode, exists, err := readConfig(file)
	if err != nil {
		return err
	}
	if !exists {
		// No file means the embedded default; write the setting alone.
		old, mode = "", 0o644
	}
	out, err := chainPolicy(old, file, program)
	if err != nil {
		return fmt.Errorf("--chain: %w", err)
	}
	if dry {
		fmt.Fprintf(stdout, "# %s\n%s", file, out)
		return nil
	}
	if exists && out == old {
		fmt.Fprintf(stdout, "%s: [hook] runtime is already %q; nothing changed\n", file, program)
		return nil
	}
	if exists {
		if err := writeAtomic(file+BackupSuffix, []byte(old), mode); err != nil {
			return fmt.Errorf("keep a backup of %s: %w", file, err)
		}
	}
	if err := writeAtomic(file, []byte(out), mode); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	fmt.Fprintf(stdout, "muxflow-runtime now calls %s after wiring a container ([hook] runtime in %s", program, file)
	if exists {
		fmt.Fprintf(stdout, "; previous file kept as %s", file+BackupSuffix)
	}
	fmt.Fprintf(stdout, "); applies to the next container, and to muxd after: systemctl reload muxd\n")
	return nil
}

// resolve follows a symlinked config path so that the edit lands in the real file rather
// than replacing the link.
func resolve(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("config path %q: %w", path, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return abs, nil
	}
	if err != nil {
		return "", fmt.Errorf("config path %q: %w", path, err)
	}
	return real, nil
}

func readConfig(path string) (string, fs.FileMode, bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", 0o644, false, nil
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return "", 0, false, fmt.Errorf("%s is not a regular file", path)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, maxConfigSize+1)); err != nil {
		return "", 0, false, fmt.Errorf("read %s: %w", path, err)
	}
	if buf.Len() > maxConfigSize {
		return "", 0, false, fmt.Errorf("%s is larger than %d bytes", path, maxConfigSize)
	}
	return buf.String(), st.Mode().Perm(), true, nil
}

func writeAtomic(path string, data []byte, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op once renamed
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
