package front

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BenchmarkFastPath is the first stage's own work for a non-GPU `create` (parse the command
// line, read and decode the bundle's config.json, detect, find the runtime), without the
// process start and exec around it. It uses the spec `runc spec` writes.
func BenchmarkFastPath(b *testing.B) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		b.Fatal("runc is not installed; run tests/deps.sh as root")
	}
	dir := b.TempDir()
	if out, err := exec.Command(runc, "spec", "--bundle", dir).CombinedOutput(); err != nil {
		b.Fatalf("runc spec: %v\n%s", err, out)
	}
	pol := filepath.Join(dir, "policy.toml")
	if err := os.WriteFile(pol, []byte("[hook]\nruntime = \""+runc+"\"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	execs := 0
	f := &Front{
		Exec:   func(string, []string, []string) error { execs++; return nil },
		Self:   "/nonexistent/muxflow-runtime",
		Cwd:    dir,
		Getenv: func(k string) string { return map[string]string{PolicyEnv: pol}[k] },
	}
	args := []string{"--root", "/run/containerd/runc/k8s.io", "--log", dir + "/log.json", "--log-format", "json", "create", "--bundle", dir, "--pid-file", dir + "/init.pid", "c1"}
	for b.Loop() {
		if err := f.Run(args); err != nil {
			b.Fatal(err)
		}
	}
	if execs == 0 {
		b.Fatal("nothing was executed")
	}
}
