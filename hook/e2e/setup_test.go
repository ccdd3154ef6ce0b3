package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/muxflow/muxflow/muxd/client"
	"github.com/muxflow/muxflow/tests/testenv"
)

// node is one test node: a policy in a temp dir, muxd, the built wrapper and hook.
type node struct {
	dir     string // muxd's run directory, socket and policy; bundles and runc's state go here too
	disk    string // muxd's state directory and root filesystems: dir, except in the host layout
	policy  string
	socket  string
	runtime string // build/bin/muxflow-runtime
	muxdBin string
	muxd    *exec.Cmd
	muxdLog *bytes.Buffer
	client  *client.Client
}

// lookTool finds a system tool the tests need, failing (not skipping) without it.
func lookTool(t testing.TB, name string) string { return testenv.Tool(t, name) }

func newNode(t testing.TB, runtimeName, lib string) *node {
	t.Helper()
	return newNodeFrom(t, runtimeName, lib, "", "")
}

// newNodeFrom is newNode with muxd and muxflow-runtime from another build directory
// (build: "" for the one under test), for benchmarks that compare two builds, and with
// everything volatile — muxd's run directory and socket, and the bundles and runc state
// the caller puts in n.dir — under volatile ("" for TMPDIR, as the rest; see hostLayout).
func newNodeFrom(t testing.TB, runtimeName, lib, build, volatile string) *node {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("these tests run containers and need root (CI runs as root)")
	}
	n := &node{
		runtime: testenv.Artifact(t, "bin/muxflow-runtime"),
		muxdBin: testenv.Artifact(t, "bin/muxd"),
	}
	testenv.Artifact(t, "bin/muxflow-hook")
	testenv.Artifact(t, "bin/muxflow-wrapper")
	if build != "" {
		n.runtime, n.muxdBin = filepath.Join(build, "bin", "muxflow-runtime"), filepath.Join(build, "bin", "muxd")
		for _, p := range []string{n.runtime, n.muxdBin} {
			if _, err := os.Stat(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A short directory: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp(volatile, "mfe2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	n.dir, n.disk = dir, dir
	if volatile != "" {
		if n.disk, err = os.MkdirTemp("", "mfe2e-disk"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(n.disk) })
	}
	n.socket = filepath.Join(dir, "run", "muxd.sock")
	if lib == "" {
		// Static busybox never runs the dynamic loader, so the file's content is not read.
		lib = filepath.Join(dir, "libxcuda.so")
		must(t, os.WriteFile(lib, []byte("placeholder for the mount test\n"), 0o644))
	}
	n.policy = filepath.Join(dir, "policy.toml")
	must(t, os.WriteFile(n.policy, []byte(fmt.Sprintf(`[node]
state_dir = %q
run_dir = %q
socket = %q
[mps]
enabled = false
pipe_dir = %q
log_dir = %q
[hook]
runtime = %q
libxcuda = %q
`, n.disk+"/state", dir+"/run", n.socket, dir+"/mps", dir+"/mpslog", runtimeName, lib)), 0o644))
	must(t, os.MkdirAll(dir+"/mps", 0o755))
	n.client = client.New(n.socket, 2*time.Second)
	n.startMuxd(t)
	t.Cleanup(func() { n.stopMuxd(t) })
	return n
}

func (n *node) startMuxd(t testing.TB) {
	t.Helper()
	n.muxdLog = &bytes.Buffer{}
	n.muxd = exec.Command(n.muxdBin, "--policy", n.policy)
	n.muxd.Stdout, n.muxd.Stderr = n.muxdLog, n.muxdLog
	must(t, n.muxd.Start())
	waitFor(t, 10*time.Second, "muxd to listen on "+n.socket, func() bool {
		c, err := net.Dial("unix", n.socket)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

func (n *node) stopMuxd(t testing.TB) {
	t.Helper()
	if n.muxd == nil {
		return
	}
	n.muxd.Process.Signal(os.Interrupt)
	n.muxd.Wait()
	n.muxd = nil
	if t.Failed() {
		t.Logf("muxd log:\n%s", n.muxdLog)
	}
}

// busyboxRootfs builds a root filesystem holding only Debian's static busybox.
func busyboxRootfs(t testing.TB, dir string) string { return testenv.BusyboxRootfs(t, dir) }

func waitFor(t testing.TB, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// writeSpec writes a runc bundle config for args in rootfs, with extra env and annotations.
func writeSpec(t testing.TB, bundle, rootfs string, args, env []string, ann map[string]string) []byte {
	t.Helper()
	out, err := exec.Command(lookTool(t, "runc"), "spec", "--bundle", bundle).CombinedOutput()
	if err != nil {
		t.Fatalf("runc spec: %v\n%s", err, out)
	}
	path := filepath.Join(bundle, "config.json")
	raw, err := os.ReadFile(path)
	must(t, err)
	var s map[string]any
	must(t, json.Unmarshal(raw, &s))
	proc := s["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = args
	proc["env"] = append([]any{"PATH=/bin"}, anys(env)...)
	s["root"] = map[string]any{"path": rootfs, "readonly": false}
	if ann != nil {
		s["annotations"] = ann
	}
	mounts := s["mounts"].([]any)
	s["mounts"] = append(mounts, map[string]any{"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "nodev", "mode=755"}})
	raw, err = json.MarshalIndent(s, "", "\t")
	must(t, err)
	must(t, os.WriteFile(path, raw, 0o644))
	return raw
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func runCmd(ctx context.Context, name string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

// preloadMarker is what fakeLibxcuda prints when the dynamic loader loads it.
const preloadMarker = "fake-libxcuda-preloaded"

// fakeLibxcuda builds a shared library that announces itself on stderr when loaded. It
// stands in for libxcuda to prove that the container's /etc/ld.so.preload loads the mounted
// library, without depending on libxcuda's own build or a GPU.
func fakeLibxcuda(t testing.TB, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "fakexcuda.c")
	must(t, os.WriteFile(src, []byte(`#include <unistd.h>
__attribute__((constructor)) static void loaded(void) {
	static const char m[] = "`+preloadMarker+`\n";
	(void)!write(2, m, sizeof m - 1);
}
`), 0o644))
	lib := filepath.Join(dir, "libxcuda.so")
	if out, err := exec.Command(lookTool(t, "gcc"), "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("build the stand-in libxcuda: %v\n%s", err, out)
	}
	return lib
}

// hostLayout says where the start benchmarks put what a host keeps in memory. On a
// systemd host containerd's bundles and runc's state are under /run, a tmpfs, and so is
// muxd's run directory (the packaged policy's /run/muxflow), while muxd's registry
// (/var/lib/muxflow) and the containers' root filesystems (containerd's snapshots under
// /var/lib/containerd) are on disk. It returns a tmpfs directory for the first part,
// /dev/shm where that is one, or "" to keep everything under TMPDIR: where there is no
// such tmpfs, or where MUXFLOW_BENCH_LAYOUT=tmpdir asks for that layout.
func hostLayout(t testing.TB) string {
	t.Helper()
	switch l := os.Getenv("MUXFLOW_BENCH_LAYOUT"); l {
	case "tmpdir":
		return ""
	case "", "host":
	default:
		t.Fatalf("MUXFLOW_BENCH_LAYOUT=%q: want host or tmpdir", l)
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Logf("no tmpfs at /dev/shm: bundles, runc's state and muxd's run directory stay under TMPDIR")
		return ""
	}
	t.Logf("host layout: bundles, runc's state and muxd's run directory on /dev/shm (tmpfs); muxd's state and the root filesystem under TMPDIR")
	return "/dev/shm"
}
