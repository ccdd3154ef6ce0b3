package daemon

import (
	"io"
	"log/slog"
	"os/exec"
	"testing"
)

// containerProcess starts a long-lived process that stands in for a container's init
// process (muxd refuses its own pid and its ancestors') and returns its pid.
func containerProcess(t testing.TB) int {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd.Process.Pid
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
