package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/tests/testenv"
)

// TestUnhealthyGPUStopsOfflineContainerThroughContainerd: two real containers (runc,
// started by containerd) registered on a simulated GPU; the GPU is held throttled until
// it is declared unhealthy; the offline container must be stopped through containerd's
// API within grace + 1 s, and the online one must keep running.
func TestUnhealthyGPUStopsOfflineContainerThroughContainerd(t *testing.T) {
	dir, err := os.MkdirTemp("", "mfcd") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cd := testenv.StartContainerd(t, dir)
	const grace = 2 * time.Second
	n := startNodeWith(t, nodeOptions{grace: grace, throttledMax: time.Second, containerd: cd.Address})
	rootfs := testenv.BusyboxRootfs(t, dir)
	ctx := context.Background()
	const ns = "muxflow-e2e"

	// The offline container ignores nothing: SIGTERM ends it (as libxcuda's drain would).
	startContainer(t, n, cd, ns, "online-svc", api.Online, []string{"--rootfs", rootfs}, "/bin/sh", "-c", "exec sleep 600")
	startContainer(t, n, cd, ns, "offline-job", api.Offline, []string{"--rootfs", rootfs}, "/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.1; done")

	if err := n.sim.SetPowerLimit(ctx, 0, 80); err != nil {
		t.Fatal(err)
	}
	// The GPU is throttled only while it works: keep it busy with an unregistered load.
	n.loadGPU(30)
	n.waitFor("GPU unhealthy", 15*time.Second, func() bool { return n.gpu().Health == "unhealthy" })
	unhealthy := time.Now()
	n.waitFor("offline container stopped", grace+5*time.Second, func() bool {
		out, _ := cd.Ctr(ctx, ns, "task", "ls")
		return taskStatus(out, "offline-job") == "STOPPED"
	})
	took := time.Since(unhealthy)
	t.Logf("offline container stopped %v after the GPU turned unhealthy (grace %v)", took.Round(time.Millisecond), grace)
	if took > grace+time.Second {
		t.Errorf("stopping took %v, more than grace + 1s", took)
	}
	out, _ := cd.Ctr(ctx, ns, "task", "ls")
	if s := taskStatus(out, "online-svc"); s != "RUNNING" {
		t.Errorf("online container is %s, want RUNNING:\n%s", s, out)
	}
	data, _ := os.ReadFile(filepath.Join(n.dir, "muxd.log"))
	if !strings.Contains(string(data), `"msg":"evicted offline work","part":"evict","id":"offline-job"`) || strings.Contains(string(data), "eviction failed") {
		t.Errorf("muxd did not stop the container through containerd cleanly:\n%s", tail(string(data), 20))
	}
}

// startContainer runs a detached container through containerd (runArgs go to `ctr run`
// before the id: mounts and environment, then "--rootfs", DIR), registers it with muxd
// as class on GPU 0 and reports its host pid, as muxflow-runtime does; the container is
// removed when the test ends. It returns the host pid.
func startContainer(t *testing.T, n *node, cd *testenv.Containerd, ns, id string, class api.Class, runArgs []string, args ...string) int {
	t.Helper()
	ctx := context.Background()
	run := append(append(append([]string{"run", "-d"}, runArgs...), id), args...)
	if out, err := cd.Ctr(ctx, ns, run...); err != nil {
		t.Fatalf("ctr run %s: %v\n%s", id, err, out)
	}
	t.Cleanup(func() {
		cd.Ctr(ctx, ns, "task", "kill", "-s", "SIGKILL", id)
		time.Sleep(200 * time.Millisecond)
		cd.Ctr(ctx, ns, "task", "delete", "-f", id)
		cd.Ctr(ctx, ns, "container", "delete", id)
	})
	pid := taskPID(t, cd, ns, id)
	if _, err := n.client.Register(ctx, api.RegisterRequest{ID: id, Class: class, GPUs: []string{"0"}, Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.client.Start(ctx, id, pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

func taskPID(t *testing.T, cd *testenv.Containerd, ns, id string) int {
	out, err := cd.Ctr(context.Background(), ns, "task", "ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == id {
			pid, _ := strconv.Atoi(f[1])
			return pid
		}
	}
	t.Fatalf("task %s not listed:\n%s", id, out)
	return 0
}

func taskStatus(out, id string) string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == id {
			return f[2]
		}
	}
	return "GONE"
}
