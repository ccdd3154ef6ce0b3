package daemon

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/muxflow/muxflow/muxd/client"
	"github.com/muxflow/muxflow/tests/testenv"
)

// TestSystemdNotify plays systemd's side of Type=notify: muxd must say READY=1 once it
// serves, RELOADING=1 then READY=1 on SIGHUP, WATCHDOG=1 when a watchdog is set, and
// STOPPING=1 on SIGTERM.
func TestSystemdNotify(t *testing.T) {
	bin := testenv.Artifact(t, "bin/muxd")
	dir := t.TempDir()
	pol := writePolicy(t, dir, "")
	nsock := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: nsock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cmd := exec.Command(bin, "--policy", pol)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+nsock, "WATCHDOG_USEC=200000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	next := func(want string) {
		t.Helper()
		buf := make([]byte, 4096)
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			conn.SetReadDeadline(deadline)
			n, _, err := conn.ReadFromUnix(buf)
			if err != nil {
				t.Fatalf("waiting for %s: %v", want, err)
			}
			if strings.Contains(string(buf[:n]), want) {
				return
			}
		}
		t.Fatalf("muxd never sent %s", want)
	}
	next("READY=1")
	if _, err := client.New(filepath.Join(dir, "run", "muxd.sock"), time.Second).Node(t.Context()); err != nil {
		t.Fatalf("READY sent before the API serves: %v", err)
	}
	next("WATCHDOG=1")
	cmd.Process.Signal(syscall.SIGHUP)
	next("RELOADING=1")
	next("READY=1")
	cmd.Process.Signal(syscall.SIGTERM)
	next("STOPPING=1")
	if err := cmd.Wait(); err != nil {
		t.Errorf("muxd exit after SIGTERM: %v", err)
	}
}

// TestSocketActivation hands muxd a listening socket the way systemd does (LISTEN_FDS).
func TestSocketActivation(t *testing.T) {
	bin := testenv.Artifact(t, "bin/muxd")
	if _, err := exec.LookPath("systemd-socket-activate"); err != nil {
		t.Fatal("systemd-socket-activate is missing: install the systemd package (tests/deps.sh does)")
	}
	dir := t.TempDir()
	pol := writePolicy(t, dir, "")
	asock := filepath.Join(dir, "activated.sock")
	cmd := exec.Command("systemd-socket-activate", "-l", asock, bin, "--policy", pol)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	c := client.New(asock, 2*time.Second)
	waitReady(t, c)
	if _, err := os.Stat(filepath.Join(dir, "run", "muxd.sock")); !os.IsNotExist(err) {
		t.Errorf("muxd created its own socket although systemd passed one: %v", err)
	}
}
