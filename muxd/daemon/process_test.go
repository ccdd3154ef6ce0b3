package daemon

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/client"
	"github.com/muxflow/muxflow/tests/testenv"
)

// startProcess runs the built muxd binary, as systemd would, on a temp policy.
func startProcess(t *testing.T, bin, pol string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "--policy", pol)
	log, err := os.Create(filepath.Join(filepath.Dir(pol), fmt.Sprintf("muxd-%d.log", time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); log.Close() })
	return cmd
}

func TestCrashSafetyKill9(t *testing.T) {
	bin := testenv.Artifact(t, "bin/muxd")
	dir := t.TempDir()
	pol := writePolicy(t, dir, "")
	sock := filepath.Join(dir, "run", "muxd.sock")
	c := client.New(sock, 2*time.Second)
	ctx := context.Background()

	// Long-lived processes stand in for the containers' init processes.
	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()

	cmd := startProcess(t, bin, pol)
	waitReady(t, c)
	const n = 50
	for i := range n {
		id := fmt.Sprintf("ctr-%02d", i)
		class := api.Offline
		if i%5 == 0 {
			class = api.Online
		}
		if _, err := c.Register(ctx, api.RegisterRequest{ID: id, Class: class, GPUs: []string{"0"}}); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if _, err := c.Start(ctx, id, sleeper.Process.Pid); err != nil {
				t.Fatal(err)
			}
		}
	}
	before, err := c.Containers(ctx)
	if err != nil || len(before) != n {
		t.Fatalf("before crash: %d containers, %v", len(before), err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	startProcess(t, bin, pol) // the stale socket must not stop the restart
	waitReady(t, c)
	after, err := c.Containers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != n {
		t.Fatalf("after kill -9 and restart: %d containers, want %d", len(after), n)
	}
	for i := range after {
		if after[i].ID != before[i].ID || after[i].State != before[i].State || after[i].PID != before[i].PID || after[i].Class != before[i].Class {
			t.Errorf("container %d changed: %+v -> %+v", i, before[i], after[i])
		}
	}
}

func TestRestartDropsDeadContainers(t *testing.T) {
	bin := testenv.Artifact(t, "bin/muxd")
	dir := t.TempDir()
	pol := writePolicy(t, dir, "")
	c := client.New(filepath.Join(dir, "run", "muxd.sock"), 2*time.Second)
	ctx := context.Background()
	short := exec.Command("sleep", "300")
	short.Start()
	cmd := startProcess(t, bin, pol)
	waitReady(t, c)
	c.Register(ctx, api.RegisterRequest{ID: "gone", Class: api.Offline, GPUs: []string{"0"}})
	if _, err := c.Start(ctx, "gone", short.Process.Pid); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	short.Process.Kill()
	short.Wait() // the container's process exits while muxd is down
	startProcess(t, bin, pol)
	waitReady(t, c)
	if _, err := c.Container(ctx, "gone"); !client.IsNotFound(err) {
		t.Errorf("a container whose process died while muxd was down is still registered: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "run", "c", "gone")); !os.IsNotExist(err) {
		t.Errorf("its control directory was left: %v", err)
	}
}

func TestSIGHUPReload(t *testing.T) {
	bin := testenv.Artifact(t, "bin/muxd")
	dir := t.TempDir()
	pol := writePolicy(t, dir, "[evict]\ngrace = \"7s\"\n")
	c := client.New(filepath.Join(dir, "run", "muxd.sock"), 2*time.Second)
	ctx := context.Background()
	cmd := startProcess(t, bin, pol)
	waitReady(t, c)
	orig, _ := os.ReadFile(pol)

	waitFor := func(want string) string {
		deadline := time.Now().Add(5 * time.Second)
		for {
			p, err := c.Policy(ctx)
			if err == nil && strings.Contains(p.TOML, want) {
				return p.TOML
			}
			if time.Now().After(deadline) {
				t.Fatalf("policy never showed %q: %v\n%s", want, err, p.TOML)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// A broken file is rejected: the old policy stays and muxd keeps serving.
	os.WriteFile(pol, []byte(strings.Replace(string(orig), `"7s"`, `"7 parsecs"`, 1)), 0o644)
	cmd.Process.Signal(syscall.SIGHUP)
	time.Sleep(300 * time.Millisecond)
	waitFor(`grace = "7s"`)
	logs, _ := filepath.Glob(filepath.Join(dir, "muxd-*.log"))
	data, _ := os.ReadFile(logs[0])
	if !strings.Contains(string(data), "policy reload rejected") || !strings.Contains(string(data), "evict.grace") {
		t.Errorf("the rejection was not logged with its cause:\n%s", data)
	}
	// A good file is applied.
	os.WriteFile(pol, []byte(strings.Replace(string(orig), `"7s"`, `"3s"`, 1)), 0o644)
	cmd.Process.Signal(syscall.SIGHUP)
	waitFor(`grace = "3s"`)
}
