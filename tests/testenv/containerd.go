package testenv

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Tool returns the path of a system tool the tests need, failing (not skipping) the test
// when it is missing: tests/deps.sh installs them.
func Tool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("testenv: %s is not installed; run tests/deps.sh as root", name)
	}
	return p
}

// Containerd is a private containerd started for one test.
type Containerd struct {
	Address string
	ctr     string
}

// StartContainerd runs containerd with its default configuration on private root,
// state and socket paths under dir, and stops it when the test ends.
func StartContainerd(t testing.TB, dir string) *Containerd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("testenv: containerd tests need root (CI runs as root)")
	}
	bin := Tool(t, "containerd")
	Tool(t, "runc")
	Tool(t, "containerd-shim-runc-v2")
	c := &Containerd{Address: filepath.Join(dir, "containerd.sock"), ctr: Tool(t, "ctr")}
	def, err := exec.Command(bin, "config", "default").Output()
	if err != nil {
		t.Fatalf("containerd config default: %v", err)
	}
	cfg := filepath.Join(dir, "containerd.toml")
	if err := os.WriteFile(cfg, def, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfg, "--root", filepath.Join(dir, "cd-root"), "--state", filepath.Join(dir, "cd-state"), "--address", c.Address)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		if t.Failed() {
			t.Logf("containerd log:\n%s", log.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := c.Ctr(context.Background(), "default", "version"); err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd did not answer on %s", c.Address)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Ctr runs ctr against this containerd in a namespace.
func (c *Containerd) Ctr(ctx context.Context, namespace string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, c.ctr, append([]string{"--address", c.Address, "--namespace", namespace}, args...)...).CombinedOutput()
	return string(out), err
}

// BusyboxRootfs builds a root filesystem holding only Debian's static busybox.
func BusyboxRootfs(t testing.TB, dir string) string {
	t.Helper()
	bb := Tool(t, "busybox")
	root := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range []string{"sh", "cat", "ls", "env", "sleep", "echo", "grep", "test", "true", "mount"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"etc", "proc", "sys", "dev", "run", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// AddDynamicProgram copies a dynamically linked program into rootfs as dst, and the
// libraries ldd names (the dynamic loader included) at their own paths, so that it runs
// in a container built by BusyboxRootfs.
func AddDynamicProgram(t testing.TB, rootfs, program, dst string) {
	t.Helper()
	out, err := exec.Command(Tool(t, "ldd"), program).Output()
	if err != nil {
		t.Fatalf("testenv: ldd %s: %v", program, err)
	}
	copyFile := func(src, dst string) {
		data, err := os.ReadFile(src) // follows symlinks: the container gets the real file
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, line := range strings.Split(string(out), "\n") {
		for _, w := range strings.Fields(line) {
			if strings.HasPrefix(w, "/") {
				copyFile(w, filepath.Join(rootfs, w))
			}
		}
	}
	copyFile(program, filepath.Join(rootfs, dst))
}
