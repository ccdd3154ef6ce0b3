// Package testenv finds what muxflow's tests need from the build: the repository root,
// the build directory (make build puts binaries and libraries there) and the shared data
// sets beside the checkout. A missing artifact fails the test with the command that makes
// it; tests are never skipped for want of a build.
package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// Root returns the repository root (the directory holding go.mod).
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("testenv: cannot find the repository root (no go.mod above the test)")
		}
		dir = parent
	}
}

// BuildDir returns $MUXFLOW_BUILD, or <root>/build.
func BuildDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("MUXFLOW_BUILD"); d != "" {
		return d
	}
	return filepath.Join(Root(t), "build")
}

// Artifact returns the path of a built file under the build directory (e.g. "bin/muxd"),
// failing the test if it has not been built.
func Artifact(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(BuildDir(t), rel)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("testenv: %s is missing; run `make build` first (or `make test`, which builds)", p)
	}
	return p
}

// SharedData returns the path of a data set under ../shared/data beside the checkout,
// failing the test if it is absent.
func SharedData(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(Root(t), "..", "shared", "data", rel)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("testenv: shared data %s is missing (expected beside the checkout)", p)
	}
	return p
}
