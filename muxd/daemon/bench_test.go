package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/muxflow/muxflow/muxd/api"
)

// BenchmarkContainerLifecycle measures what one GPU container costs muxd: register (the
// runtime at create), start (the createRuntime hook) and unregister (poststop), each a
// durable registry write, through the real client and socket.
func BenchmarkContainerLifecycle(b *testing.B) {
	n := startNode(b, b.TempDir())
	defer n.stop()
	ctx := context.Background()
	pid := containerProcess(b)
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("bench-%d", i)
		if _, err := n.client.Register(ctx, api.RegisterRequest{ID: id, Class: api.Offline, GPUs: []string{"0"}}); err != nil {
			b.Fatal(err)
		}
		if _, err := n.client.Start(ctx, id, pid); err != nil {
			b.Fatal(err)
		}
		if err := n.client.Unregister(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNodeInfo is the cost of a read-only API call (muxctl status, probes).
func BenchmarkNodeInfo(b *testing.B) {
	n := startNode(b, b.TempDir())
	defer n.stop()
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if _, err := n.client.Node(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRuntimeCreate measures what muxd does for one GPU container started through
// muxflow-runtime, the way the runtime calls it (one request per connection, raw bodies):
// the create request with a runc-sized spec (inspect, register, control block, wire),
// the container's pid, and its unregistration. report: the pid comes in a start report
// (muxflow-runtime's forked reporter, or muxflow-hook); pidfile: muxd watches the pid file
// the create request names (pidwatch.go) and the benchmark writes it as runc does. CPU
// is the whole process's (client included), per container.
func BenchmarkRuntimeCreate(b *testing.B) {
	dir := b.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		b.Fatal(err)
	}
	writeFile(b, filepath.Join(bin, "libxcuda.so"), "")
	if err := os.MkdirAll(filepath.Join(dir, "mps"), 0o755); err != nil {
		b.Fatal(err)
	}
	n := startNodeWith(b, dir, fmt.Sprintf("pipe_dir = %q\n[hook]\nlibxcuda = %q\n", filepath.Join(dir, "mps"), filepath.Join(bin, "libxcuda.so")))
	defer n.stop()
	bundle := filepath.Join(dir, "bundle")
	if err := os.MkdirAll(filepath.Join(bundle, "rootfs", "etc"), 0o755); err != nil {
		b.Fatal(err)
	}
	spec := runcSpec(b, filepath.Join(bundle, "rootfs"))
	pid := containerProcess(b)
	hc := rawClient(n.socket)
	do := func(method, path string, body []byte, want int) {
		req, _ := http.NewRequest(method, "http://muxd"+path, bytes.NewReader(body))
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			b.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, data)
		}
	}
	pidFile := filepath.Join(bundle, "init.pid")
	seq := 0
	for _, mode := range []string{"report", "pidfile"} {
		b.Run(mode, func(b *testing.B) {
			cpu0 := processCPU()
			for range b.N {
				seq++
				id := fmt.Sprintf("bench-%d", seq)
				q := url.Values{"id": {id}, "bundle": {bundle}}
				// The runtime writes its pid file in both modes, as runc does.
				os.Remove(pidFile)
				if mode == "report" {
					do("POST", api.RuntimeCreatePath+"?"+q.Encode(), spec, http.StatusOK)
					writePidFile(b, pidFile, pid)
					do("POST", api.RuntimeHooksPath+"create-runtime", fmt.Appendf(nil, `{"id":%q,"pid":%d}`, id, pid), http.StatusNoContent)
				} else {
					q.Set("pid_file", pidFile)
					do("POST", api.RuntimeCreatePath+"?"+q.Encode(), spec, http.StatusCreated)
					writePidFile(b, pidFile, pid)
					// Polled: this loop's own wake-ups count in the CPU figure.
					for {
						if c, err := n.d.reg.Get(id); err == nil && c.State == api.StateRunning {
							break
						}
						time.Sleep(200 * time.Microsecond)
					}
				}
				do("DELETE", api.ContainersPath+id, nil, http.StatusNoContent)
			}
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
		})
	}
}

// processCPU is this process's user and system time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rawClient speaks to muxd's socket with one connection per request, as the C clients do.
func rawClient(socket string) *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
}

// runcSpec is `runc spec` (runc 1.x) with a GPU request and the offline class.
func runcSpec(t testing.TB, rootfs string) []byte {
	t.Helper()
	s := map[string]any{
		"ociVersion": "1.2.0",
		"process": map[string]any{
			"terminal": false, "user": map[string]any{"uid": 0, "gid": 0}, "args": []string{"/bin/true"},
			"env": []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm", "NVIDIA_VISIBLE_DEVICES=0"},
			"cwd": "/",
			"capabilities": map[string]any{
				"bounding":  []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"},
				"effective": []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"},
				"permitted": []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"},
			},
			"rlimits":         []map[string]any{{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}},
			"noNewPrivileges": true,
		},
		"root":     map[string]any{"path": rootfs, "readonly": true},
		"hostname": "runc",
		"mounts": []map[string]any{
			{"destination": "/proc", "type": "proc", "source": "proc"},
			{"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
			{"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": []string{"nosuid", "noexec", "nodev"}},
			{"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": []string{"nosuid", "noexec", "nodev", "ro"}},
			{"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
		},
		"annotations": map[string]string{"muxflow.io/class": "offline"},
		"linux": map[string]any{
			"resources":     map[string]any{"devices": []map[string]any{{"allow": false, "access": "rwm"}}},
			"namespaces":    []map[string]any{{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}, {"type": "cgroup"}},
			"maskedPaths":   []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"},
			"readonlyPaths": []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
	raw, err := json.MarshalIndent(s, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
