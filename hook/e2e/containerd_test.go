package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/client"
	"github.com/muxflow/muxflow/muxd/muxctl/runtimeconfig"
	"github.com/muxflow/muxflow/muxd/wiring"
	"github.com/muxflow/muxflow/tests/testenv"
)

// spy is a runc stand-in placed on both sides of muxflow-runtime: it copies the bundle's
// config.json on create ($SPY_TAG says which side) and execs the next runtime, so the test
// sees exactly the spec containerd wrote and exactly the spec runc got.
const spy = `#!/bin/sh
prev=""; bundle="."; cmd=""; id=""
for a in "$@"; do
  case "$prev" in --bundle|-b) bundle="$a";; esac
  case "$a" in create|run) [ -z "$cmd" ] && cmd="$a";; esac
  prev="$a"; id="$a"
done
if [ "$cmd" = create ]; then cp "$bundle/config.json" "$SPY_DIR/$id.$SPY_TAG.json"; fi
exec "$SPY_NEXT" "$@"
`

type containerdEnv struct {
	*node
	ctr, address, runcBinary string
	outDir                   string
	rootfs                   string
}

func startContainerd(t *testing.T) *containerdEnv {
	containerd := lookTool(t, "containerd")
	runc := lookTool(t, "runc")
	lookTool(t, "containerd-shim-runc-v2")
	e := &containerdEnv{ctr: lookTool(t, "ctr")}

	// The runtime muxflow-runtime hands containers to is the "after" spy, then runc.
	dirBin, err := os.MkdirTemp("", "mfspy")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dirBin) })
	after := filepath.Join(dirBin, "spy-after")
	before := filepath.Join(dirBin, "spy-before")
	must(t, os.WriteFile(after, []byte(strings.ReplaceAll(strings.ReplaceAll(spy, "$SPY_TAG", "after"), "$SPY_NEXT", runc)), 0o755))
	e.node = newNode(t, after, fakeLibxcuda(t, dirBin))
	e.outDir = filepath.Join(e.dir, "out")
	must(t, os.MkdirAll(e.outDir, 0o755))
	e.rootfs = busyboxRootfs(t, e.dir)
	testenv.AddDynamicProgram(t, e.rootfs, "/usr/bin/true", "/usr/bin/dyn")

	// containerd's own default config, edited by `muxctl runtime configure`.
	def, err := exec.Command(containerd, "config", "default").Output()
	must(t, err)
	cfg := filepath.Join(e.dir, "containerd.toml")
	must(t, os.WriteFile(cfg, def, 0o644))
	var out, errb bytes.Buffer
	if err := runtimeconfig.Configure([]string{"--runtime=containerd", "--config", cfg, "--binary", e.runtime}, &out, &errb); err != nil {
		t.Fatalf("configure: %v\n%s", err, errb.String())
	}
	dump, err := exec.Command(containerd, "--config", cfg, "config", "dump").CombinedOutput()
	if err != nil {
		t.Fatalf("containerd config dump: %v\n%s", err, dump)
	}
	// ctr has no CRI runtime classes: read the muxflow runtime's BinaryName from what
	// containerd itself loaded and hand it to ctr, as the CRI plugin would to the shim.
	m := regexp.MustCompile(`(?s)runtimes\.muxflow\.options\]\s*BinaryName = "([^"]+)"`).FindSubmatch(dump)
	if m == nil {
		t.Fatalf("containerd's dump has no muxflow runtime:\n%s", dump)
	}
	binary := string(m[1])
	if binary != e.runtime {
		t.Fatalf("configured BinaryName %q, want %q", binary, e.runtime)
	}
	e.runcBinary = before
	must(t, os.WriteFile(before, []byte(strings.ReplaceAll(strings.ReplaceAll(spy, "$SPY_TAG", "before"), "$SPY_NEXT", binary)), 0o755))

	e.address = filepath.Join(e.dir, "containerd.sock")
	cmd := exec.Command(containerd, "--config", cfg, "--root", e.dir+"/cd-root", "--state", e.dir+"/cd-state", "--address", e.address)
	// The shim inherits containerd's environment, and runtimes inherit the shim's: this is
	// how the wrapper finds its policy and the spies their directory.
	cmd.Env = append(os.Environ(), "MUXFLOW_POLICY="+e.policy, "SPY_DIR="+e.outDir)
	var logBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	must(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		if t.Failed() {
			t.Logf("containerd log:\n%s", logBuf.String())
		}
	})
	waitFor(t, 30*time.Second, "containerd to answer", func() bool {
		_, err := e.ctrRun(context.Background(), "version")
		return err == nil
	})
	return e
}

func (e *containerdEnv) ctrRun(ctx context.Context, args ...string) (string, error) {
	return runCmd(ctx, e.ctr, append([]string{"--address", e.address, "--namespace", "muxflow-e2e"}, args...)...)
}

// run starts a container through the muxflow runtime; detached ones are stopped by the
// returned function.
func (e *containerdEnv) run(t *testing.T, id string, detach bool, env []string, ann map[string]string, script string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"run", "--rootfs", "--runtime", "io.containerd.runc.v2", "--runc-binary", e.runcBinary,
		"--mount", "type=bind,src=" + e.outDir + ",dst=/out,options=rbind:rw"}
	if detach {
		args = append(args, "-d")
	} else {
		args = append(args, "--rm")
	}
	for _, kv := range env {
		args = append(args, "--env", kv)
	}
	for k, v := range ann {
		args = append(args, "--annotation", k+"="+v)
	}
	args = append(args, e.rootfs, id, "/bin/sh", "-c", script)
	return e.ctrRun(ctx, args...)
}

func (e *containerdEnv) remove(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	e.ctrRun(ctx, "task", "kill", "-s", "SIGKILL", id)
	waitFor(t, 20*time.Second, "task "+id+" to stop", func() bool {
		out, _ := e.ctrRun(ctx, "task", "ls")
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == id && f[2] != "STOPPED" {
				return false
			}
		}
		return true
	})
	if out, err := e.ctrRun(ctx, "task", "delete", id); err != nil {
		t.Errorf("ctr task delete %s: %v\n%s", id, err, out)
	}
	if out, err := e.ctrRun(ctx, "container", "delete", id); err != nil {
		t.Errorf("ctr container delete %s: %v\n%s", id, err, out)
	}
}

func (e *containerdEnv) taskPID(t *testing.T, id string) int {
	t.Helper()
	out, err := e.ctrRun(context.Background(), "task", "ls")
	must(t, err)
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == id {
			pid, err := strconv.Atoi(f[1])
			must(t, err)
			return pid
		}
	}
	t.Fatalf("task %s not listed:\n%s", id, out)
	return 0
}

const probe = `
{
  echo "env:$(env | grep -E '^(CUDA_MPS_PIPE_DIRECTORY|XCUDA_CONTROL_BLOCK|MUXFLOW_CLASS)=' | sort | tr '\n' ' ')"
  echo "preload:$(cat /etc/ld.so.preload)"
  test -f /usr/lib/muxflow/libxcuda.so && echo "lib:present"
  test -d /run/muxflow/mps && echo "mps:present"
  if echo tamper > /run/muxflow/ctl/limits 2>/dev/null; then echo "limits:WRITABLE"; else echo "limits:read-only"; fi
  if [ -w /run/muxflow/ctl/usage ]; then echo "usage:writable"; fi
  echo "dyn:$(/usr/bin/dyn 2>&1)"
  if echo tamper > /usr/lib/muxflow/libxcuda.so 2>/dev/null; then echo "lib:WRITABLE"; fi
} > /out/$ID.probe.tmp
mv /out/$ID.probe.tmp /out/$ID.probe
`

func TestContainerd(t *testing.T) {
	e := startContainerd(t)

	t.Run("offline GPU container is wired and registered", func(t *testing.T) {
		id := "gpu-offline"
		if out, err := e.run(t, id, true, []string{"NVIDIA_VISIBLE_DEVICES=0", "ID=" + id},
			map[string]string{"muxflow.io/class": "offline", "muxflow.io/gpu-memory": "4GiB"}, probe+"exec sleep 600"); err != nil {
			t.Fatalf("ctr run: %v\n%s", err, out)
		}
		defer func() {
			e.remove(t, id)
			// muxd unregisters the container when its process exits.
			waitFor(t, 10*time.Second, "muxd to unregister the stopped container", func() bool {
				_, err := e.client.Container(context.Background(), id)
				return client.IsNotFound(err)
			})
		}()
		probeFile := filepath.Join(e.outDir, id+".probe")
		waitFor(t, 20*time.Second, "the container's probe", func() bool { _, err := os.Stat(probeFile); return err == nil })
		got, _ := os.ReadFile(probeFile)
		for _, want := range []string{
			"env:CUDA_MPS_PIPE_DIRECTORY=/run/muxflow/mps MUXFLOW_CLASS=offline XCUDA_CONTROL_BLOCK=/run/muxflow/ctl ",
			"preload:" + wiring.ContainerLib,
			"lib:present", "mps:present", "limits:read-only", "usage:writable", "dyn:" + preloadMarker,
		} {
			if !strings.Contains(string(got), want+"\n") {
				t.Errorf("probe lacks %q:\n%s", want, got)
			}
		}
		if strings.Contains(string(got), "WRITABLE") {
			t.Errorf("the container can write what it must not:\n%s", got)
		}
		c, err := e.client.Container(context.Background(), id)
		if err != nil {
			t.Fatalf("muxd does not know the container: %v", err)
		}
		if pid := e.taskPID(t, id); c.State != api.StateRunning || c.PID != pid {
			t.Errorf("muxd has state %q pid %d, want running with the host pid %d", c.State, c.PID, pid)
		}
		if c.Class != api.Offline || c.Limits.GPUMemory != 4<<30 || fmt.Sprint(c.GPUs) != "[0]" || c.Namespace != "muxflow-e2e" {
			t.Errorf("registered %+v", c.RegisterRequest)
		}
		before, _ := os.ReadFile(filepath.Join(e.outDir, id+".before.json"))
		after, _ := os.ReadFile(filepath.Join(e.outDir, id+".after.json"))
		if len(before) == 0 || bytes.Equal(before, after) || !bytes.Contains(after, []byte(`"io.muxflow.wired":"offline"`)) {
			t.Errorf("the spec runc got is not the wired one")
		}
	})

	t.Run("non-GPU container spec is byte-for-byte unchanged", func(t *testing.T) {
		id := "plain"
		// A dynamically linked program runs without the preload: nothing was wired.
		out, err := e.run(t, id, false, []string{"ID=" + id}, map[string]string{"muxflow.io/class": "offline"}, "/usr/bin/dyn && echo hello")
		if err != nil || out != "hello" {
			t.Fatalf("ctr run: %v\n%s", err, out)
		}
		before, err1 := os.ReadFile(filepath.Join(e.outDir, id+".before.json"))
		after, err2 := os.ReadFile(filepath.Join(e.outDir, id+".after.json"))
		if err1 != nil || err2 != nil {
			t.Fatalf("spies did not record the spec: %v %v", err1, err2)
		}
		if !bytes.Equal(before, after) {
			t.Errorf("spec changed:\nbefore %s\nafter  %s", before, after)
		}
	})

	t.Run("bad annotation fails creation naming it", func(t *testing.T) {
		out, err := e.run(t, "bad-ann", false, []string{"NVIDIA_VISIBLE_DEVICES=0"}, map[string]string{"muxflow.io/sm-percent": "250"}, "true")
		t.Logf("ctr says: %s", out)
		if err == nil || !strings.Contains(out, "annotation muxflow.io/sm-percent") {
			t.Errorf("ctr run: %v\n%s", err, out)
		}
		e.ctrRun(context.Background(), "container", "delete", "bad-ann")
	})

	t.Run("muxd stopped", func(t *testing.T) {
		e.stopMuxd(t)
		out, err := e.run(t, "down-offline", false, []string{"NVIDIA_VISIBLE_DEVICES=0"}, map[string]string{"muxflow.io/class": "offline"}, "true")
		t.Logf("ctr says: %s", out)
		if err == nil || !strings.Contains(out, "muxd is not running") {
			t.Errorf("offline container with muxd down: err %v\n%s", err, out)
		}
		e.ctrRun(context.Background(), "container", "delete", "down-offline")
		out, err = e.run(t, "down-online", false, []string{"NVIDIA_VISIBLE_DEVICES=0"}, map[string]string{"muxflow.io/class": "online"}, "echo started; test -e /run/muxflow/mps || echo unshared")
		if err != nil || out != "started\nunshared" {
			t.Errorf("online container with muxd down: err %v\n%s", err, out)
		}
	})
}
