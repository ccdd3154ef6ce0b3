package daemon

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/mps"
	"github.com/muxflow/muxflow/muxd/registry"
	"github.com/muxflow/muxflow/policy"
	"github.com/muxflow/muxflow/policy/classify"
)

// fakeMPSControl answers get_server_list, get_client_list and quit the way
// nvidia-cuda-mps-control does; "clients" in the pipe directory lists the clients of
// server 4242, and "quit" is recorded in "commands".
const fakeMPSControl = `#!/bin/sh
dir=${CUDA_MPS_PIPE_DIRECTORY:?}
read -r line
echo "$line" >> "$dir/commands"
[ -e "$dir/running" ] || { echo "Cannot find MPS control daemon process" >&2; exit 1; }
case "$line" in
  get_server_list) echo 4242 ;;
  "get_client_list 4242") cat "$dir/clients" 2>/dev/null ;;
  quit) rm -f "$dir/running" ;;
esac
`

func TestStopMPSOnlyWhenIdle(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "mps-control")
	if err := os.WriteFile(bin, []byte(fakeMPSControl), 0o755); err != nil {
		t.Fatal(err)
	}
	pipe := filepath.Join(dir, "pipe")
	if err := os.MkdirAll(pipe, 0o755); err != nil {
		t.Fatal(err)
	}
	reg, err := registry.Open(filepath.Join(dir, "reg"), registry.ProcFS{}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	d := &Daemon{
		log: slog.New(slog.NewTextHandler(&logs, nil)),
		reg: reg,
		mps: &mps.Supervisor{Control: mps.Control{Binary: bin, PipeDir: pipe, LogDir: dir, Timeout: 2 * time.Second}},
	}
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(pipe, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	quitSent := func() bool {
		data, _ := os.ReadFile(filepath.Join(pipe, "commands"))
		return strings.Contains(string(data), "quit")
	}

	// A client is attached (an online service, say): MPS stays, and the log says why.
	write("running", "")
	write("clients", "777\n")
	d.stopMPSIfIdle()
	if quitSent() {
		t.Fatal("muxd quit the MPS control daemon while a client was attached")
	}
	if !strings.Contains(logs.String(), "leaving the MPS control daemon running") || !strings.Contains(logs.String(), "clients=1") {
		t.Errorf("the log does not say why MPS was left running:\n%s", logs.String())
	}

	// No client, but a GPU container is registered as running (its process may not have
	// made its CUDA context yet): MPS stays.
	write("clients", "")
	svc, err := classify.Request(api.RegisterRequest{ID: "svc", Class: api.Online, GPUs: []string{"0"}}, policy.Default())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := reg.Add(svc, api.ControlPaths{}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Start("svc", os.Getpid()); err != nil {
		t.Fatal(err)
	}
	d.stopMPSIfIdle()
	if quitSent() {
		t.Fatal("muxd quit the MPS control daemon while a GPU container was running")
	}

	// Idle: muxd quits it.
	if err := reg.Remove("svc"); err != nil {
		t.Fatal(err)
	}
	d.stopMPSIfIdle()
	if !quitSent() {
		t.Fatalf("muxd left an idle MPS control daemon running; log:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "stopped the MPS control daemon") {
		t.Errorf("the log does not say MPS was stopped:\n%s", logs.String())
	}

	// Not running at all: nothing to do, no warning.
	logs.Reset()
	d.stopMPSIfIdle()
	if strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("a stopped MPS daemon gave a warning:\n%s", logs.String())
	}
}
