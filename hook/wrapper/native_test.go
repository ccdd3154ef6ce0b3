package wrapper

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/hookstate"
	"github.com/muxflow/muxflow/muxd/specedit"
	"github.com/muxflow/muxflow/policy"
	"github.com/muxflow/muxflow/tests/testvec"
)

// TestNativeConstants compiles hook/native's headers with gcc and fails when a name, path
// or bound that muxflow-runtime and muxflow-hook (C) share with the Go side differs from
// the Go value: the policy's defaults and bounds, the wrapper's environment and file
// names, and muxd's endpoints. The Go values are the source.
func TestNativeConstants(t *testing.T) {
	def := policy.Default()
	if def.Node.Socket != api.DefaultSocket {
		t.Errorf("the default policy's socket %q is not api.DefaultSocket %q", def.Node.Socket, api.DefaultSocket)
	}
	want := map[string]string{
		"POLICY_ENV":             PolicyEnv,
		"POLICY_DEFAULT_PATH":    policy.DefaultPath,
		"POLICY_DEFAULT_RUNTIME": def.Hook.Runtime,
		"POLICY_DEFAULT_SOCKET":  def.Node.Socket,
		"POLICY_DEFAULT_TIMEOUT": def.Hook.Timeout.D().String(),
		"POLICY_MAX_TIMEOUT_NS":  strconv.FormatInt(maxHookTimeout(t).Nanoseconds(), 10),
		"POLICY_MAX_SIZE":        strconv.Itoa(policy.MaxFileSize),
		"CONFIG_NAME":            "config.json",
		"CONFIG_MAX_SIZE":        strconv.Itoa(specedit.MaxSpecSize),
		"MUXD_MAX_STATE":         strconv.Itoa(hookstate.MaxStateSize),
		"HOOK_NAME":              HookName,
		"WRAPPER_NAME":           "muxflow-wrapper",
		"MUXD_PATH_CREATE":       api.RuntimeCreatePath,
		"MUXD_PATH_HOOKS":        api.RuntimeHooksPath,
		"MUXD_PATH_CONTAINERS":   api.ContainersPath,
	}
	_, self, _, _ := runtime.Caller(0)
	hookDir := filepath.Join(filepath.Dir(self), "..")
	if _, err := os.Stat(filepath.Join(hookDir, "cmd", want["WRAPPER_NAME"])); err != nil {
		t.Errorf("WRAPPER_NAME names no program under hook/cmd: %v", err)
	}
	if maxSpecSize != specedit.MaxSpecSize {
		t.Errorf("the wrapper reads config.json up to %d bytes, muxd up to %d", maxSpecSize, specedit.MaxSpecSize)
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	got := testvec.CMacros(t, "hook/native/src", []string{"policyscan.h", "execpath.h", "muxdcall.h", "bundle.h"}, names, "-D_GNU_SOURCE")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hook/native/src drifted from the Go side (-go +c):\n%s", diff)
	}
}

// maxHookTimeout finds the largest hook.timeout the policy accepts (its bound is in the
// validation, not a constant), by bisection over whole milliseconds.
func maxHookTimeout(t *testing.T) time.Duration {
	accepts := func(ms int64) bool {
		_, err := policy.Parse([]byte(fmt.Sprintf("[hook]\ntimeout = \"%dms\"\n", ms)), "probe")
		return err == nil
	}
	lo, hi := int64(1), int64(24*3600*1000)
	if !accepts(lo) || accepts(hi) {
		t.Fatalf("cannot bracket the policy's hook.timeout bound")
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if accepts(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return time.Duration(lo) * time.Millisecond
}
