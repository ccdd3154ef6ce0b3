package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/muxflow/muxflow/muxd/api"
)

// TestFallbackWrapperUsesTheHook runs a GPU container down the slow path: a policy that
// muxflow-runtime's quick scan cannot read for sure (a quoted key) sends the create to
// muxflow-wrapper, which has muxd add muxflow-hook as the container's createRuntime hook;
// runc runs the hook, and muxd learns the host pid from it.
func TestFallbackWrapperUsesTheHook(t *testing.T) {
	runc := lookTool(t, "runc")
	n := newNode(t, runc, "")
	rootfs := busyboxRootfs(t, n.dir)
	editPolicy(t, n.policy, n.policy, "\nruntime = ", "\n'runtime' = ")

	bundle := filepath.Join(n.dir, "fallback")
	must(t, os.MkdirAll(bundle, 0o755))
	writeSpec(t, bundle, rootfs, []string{"/bin/sleep", "60"}, []string{"NVIDIA_VISIBLE_DEVICES=0"}, map[string]string{"muxflow.io/class": "offline"})
	root := filepath.Join(n.dir, "runc-root")
	// The detached container inherits the runtime's stdio: a file, not a pipe that the
	// test would wait on until the container ends.
	errFile := filepath.Join(n.dir, "fallback.stderr")
	stderr, err := os.Create(errFile)
	must(t, err)
	defer stderr.Close()
	cmd := exec.Command(n.runtime, "--root", root, "run", "--detach", "--bundle", bundle, "fb-1")
	cmd.Env = append(os.Environ(), "MUXFLOW_POLICY="+n.policy)
	cmd.Stderr = stderr
	if err := cmd.Run(); err != nil {
		msg, _ := os.ReadFile(errFile)
		t.Fatalf("muxflow-runtime run: %v\n%s", err, msg)
	}
	defer func() {
		exec.Command(runc, "--root", root, "kill", "fb-1", "KILL").Run()
		exec.Command(runc, "--root", root, "delete", "--force", "fb-1").Run()
	}()
	spec, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	must(t, err)
	if !bytes.Contains(spec, []byte(`"createRuntime"`)) || !bytes.Contains(spec, []byte(`muxflow-hook`)) {
		t.Errorf("the wrapper's spec has no muxflow-hook createRuntime hook:\n%s", spec)
	}
	out, err := exec.Command(runc, "--root", root, "state", "fb-1").Output()
	must(t, err)
	var st struct {
		Pid int `json:"pid"`
	}
	must(t, json.Unmarshal(out, &st))
	c, err := n.client.Container(t.Context(), "fb-1")
	if err != nil || c.State != api.StateRunning || c.PID != st.Pid || st.Pid <= 0 {
		t.Fatalf("muxd has %+v (err %v), want running with pid %d", c, err, st.Pid)
	}
}

// editPolicy writes to dst the policy file src with its first old replaced by new, and
// fails when src has no old.
func editPolicy(t testing.TB, src, dst, old, new string) {
	t.Helper()
	pol, err := os.ReadFile(src)
	must(t, err)
	edited := strings.Replace(string(pol), old, new, 1)
	if edited == string(pol) {
		t.Fatalf("the test policy has no %q:\n%s", old, pol)
	}
	must(t, os.WriteFile(dst, []byte(edited), 0o644))
}
