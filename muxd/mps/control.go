// Package mps drives NVIDIA's MPS control daemon (nvidia-cuda-mps-control): it runs one
// control daemon for the node's GPUs under muxd's supervision (restarting it when it dies
// or stops answering), sets the servers' defaults, and queries servers and clients. It
// speaks the legacy (v2) command protocol on the tool's stdin, which remains the default
// in CUDA 13; gpusim's fake control tool speaks the same, so this code is identical on
// real and simulated nodes.
package mps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Control runs commands against the control daemon that owns PipeDir.
type Control struct {
	// Binary is nvidia-cuda-mps-control (a name in PATH or a path).
	Binary string
	// PipeDir and LogDir become CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY.
	PipeDir, LogDir string
	// Env is added to the tool's environment (tests point gpusim's fake at its simulator).
	Env []string
	// Timeout bounds one command; a daemon that does not answer in time is hung. 0: 2 s.
	Timeout time.Duration
}

// ErrNotRunning is returned when no control daemon answers in PipeDir.
var ErrNotRunning = errors.New("MPS control daemon is not running")

func (c *Control) env() []string {
	env := append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+c.PipeDir, "CUDA_MPS_LOG_DIRECTORY="+c.LogDir)
	return append(env, c.Env...)
}

// Command sends one command line to the daemon and returns its answer.
func (c *Control) Command(ctx context.Context, command string) (string, error) {
	if strings.ContainsAny(command, "\n\r") {
		return "", fmt.Errorf("MPS command %q spans several lines", command)
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Binary)
	cmd.Env = c.env()
	cmd.Stdin = strings.NewReader(command + "\n")
	// A wedged tool may leave children holding our pipes; do not wait on them.
	cmd.WaitDelay = 200 * time.Millisecond
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	answer := strings.TrimSpace(out.String())
	if ctx.Err() != nil {
		return "", fmt.Errorf("MPS command %q: no answer within %v: %w", command, timeout, ErrNotRunning)
	}
	if err != nil {
		msg := strings.TrimSpace(errb.String() + " " + answer)
		if strings.Contains(strings.ToLower(msg), "cannot find mps control daemon") || strings.Contains(msg, "not running") {
			return "", fmt.Errorf("MPS command %q: %w", command, ErrNotRunning)
		}
		return "", fmt.Errorf("MPS command %q failed: %v: %s", command, err, msg)
	}
	return answer, nil
}

// pidFile is where the control daemon writes its pid, in the pipe directory.
const pidFile = "nvidia-cuda-mps-control.pid"

// pidFromFile is the control daemon's pid from its pid file; 0 when there is none.
func (c *Control) pidFromFile() int {
	data, err := os.ReadFile(filepath.Join(c.PipeDir, pidFile))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// ServerList returns the pids of the running MPS servers.
func (c *Control) ServerList(ctx context.Context) ([]int, error) {
	out, err := c.Command(ctx, "get_server_list")
	if err != nil {
		return nil, err
	}
	return parsePIDs(out)
}

// ClientList returns the pids of the clients of one server.
func (c *Control) ClientList(ctx context.Context, server int) ([]int, error) {
	out, err := c.Command(ctx, "get_client_list "+strconv.Itoa(server))
	if err != nil {
		return nil, err
	}
	return parsePIDs(out)
}

// SetDefaultActiveThreadPercentage sets the SM share new servers give each client.
func (c *Control) SetDefaultActiveThreadPercentage(ctx context.Context, pct float64) error {
	if pct <= 0 || pct > 100 {
		return fmt.Errorf("active thread percentage %v is outside (0, 100]", pct)
	}
	_, err := c.Command(ctx, "set_default_active_thread_percentage "+strconv.FormatFloat(pct, 'f', -1, 64))
	return err
}

// SetDefaultPinnedMemLimit sets the device memory limit new clients get on one device.
func (c *Control) SetDefaultPinnedMemLimit(ctx context.Context, device int, bytes uint64) error {
	if device < 0 {
		return fmt.Errorf("device %d is negative", device)
	}
	_, err := c.Command(ctx, fmt.Sprintf("set_default_device_pinned_mem_limit %d %dM", device, bytes>>20))
	return err
}

// Quit stops the control daemon and its servers.
func (c *Control) Quit(ctx context.Context) error {
	_, err := c.Command(ctx, "quit")
	return err
}

// parsePIDs reads one pid per line (the tool prints nothing when there are none).
func parsePIDs(out string) ([]int, error) {
	var pids []int
	for _, f := range strings.Fields(out) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("unexpected MPS answer %q", out)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}
