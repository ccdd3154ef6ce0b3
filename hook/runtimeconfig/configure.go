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
	restart     string
	fresh       string // content of a config file that does not exist yet
}

var targets = map[string]target{
	"containerd": {"/etc/containerd/config.toml", editContainerd, "systemctl restart containerd", "version = 2\n"},
	"docker":     {"/etc/docker/daemon.json", editDocker, "systemctl restart docker", ""},
}

// Configure runs `muxctl runtime configure` with args after "configure":
// --runtime=containerd|docker [--config PATH] [--binary PATH] [--dry-run] [--remove].
// It prints what it did and the restart it needs on stdout; with --dry-run it prints the
// resulting file and writes nothing.
func Configure(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("muxctl runtime configure", flag.ContinueOnError)
	fs.SetOutput(stderr)
	runtime := fs.String("runtime", "", "containerd or docker")
	path := fs.String("config", "", "the config file (default /etc/containerd/config.toml or /etc/docker/daemon.json)")
	binary := fs.String("binary", DefaultBinary, "absolute path of muxflow-runtime")
	dry := fs.Bool("dry-run", false, "print the resulting file instead of writing it")
	remove := fs.Bool("remove", false, "remove the muxflow runtime instead of adding it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	t, ok := targets[*runtime]
	if !ok {
		return fmt.Errorf("--runtime must be containerd or docker, got %q", *runtime)
	}
	if *path == "" {
		*path = t.defaultPath
	}
	if b := *binary; !filepath.IsAbs(b) || filepath.Clean(b) != b || strings.ContainsAny(b, "\x00\n\r\"'\\") {
		return fmt.Errorf("--binary must be a clean absolute path without quotes, got %q", b)
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
	out, err := t.edit(doc, *binary, *remove)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if *dry {
		_, err := io.WriteString(stdout, out)
		return err
	}
	verb := "added the muxflow runtime to"
	if *remove {
		verb = "removed the muxflow runtime from"
	}
	if exists && out == old {
		fmt.Fprintf(stdout, "%s: already up to date; nothing changed\n", file)
		return nil
	}
	backup := ""
	if exists {
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
