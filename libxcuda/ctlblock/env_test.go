package ctlblock

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestEnvMatchesHeader compiles xcuda_env.h and xcuda_ctl.h with gcc and fails when a
// container path or variable name that libxcuda reads differs from its Go mirror, which
// muxd/wiring uses to write specs.
func TestEnvMatchesHeader(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatalf("gcc is needed to check xcuda_env.h against its Go mirror (install gcc): %v", err)
	}
	want := map[string]string{
		"XCUDA_CONTAINER_ROOT":            ContainerRoot,
		"XCUDA_MPS_DIR":                   ContainerMPSDir,
		"XCUDA_FAIL_POLICY_CLOSED":        EnvFailPolicyClosed,
		"XCUDA_ENV_DRAIN_TIMEOUT":         EnvDrainTimeout,
		"XCUDA_DRAIN_TIMEOUT_MAX":         strconv.Itoa(DrainTimeoutMax),
		"XCUDA_ENV_MPS_PIPE":              EnvMPSPipe,
		"XCUDA_ENV_MPS_THREAD_PERCENTAGE": EnvMPSThreadPercentage,
		"XCUDA_ENV_MPS_PINNED_MEM":        EnvMPSPinnedMem,
		"XCUDA_ENV_MPS_CLIENT_PRIORITY":   EnvMPSClientPriority,
		"XCUDA_MPS_PRIORITY_BELOW_NORMAL": MPSPriorityBelowNormal,
		// xcuda_ctl.h
		"XCUDA_ENV_FAIL_POLICY":   EnvFailPolicy,
		"XCUDA_ENV_CONTROL_BLOCK": EnvDir,
		"XCUDA_DEFAULT_DIR":       ContainerDir,
		"XCUDA_ENV_SIGNAL":        EnvSignal,
		"XCUDA_DEFAULT_SIGNAL":    ContainerSignal,
	}
	_, self, _, _ := runtime.Caller(0)
	include := filepath.Join(filepath.Dir(self), "..", "include")
	var src strings.Builder
	src.WriteString("#include <stdio.h>\n#include \"xcuda_ctl.h\"\n#include \"xcuda_env.h\"\n#define S_(x) #x\n#define S(x) S_(x)\nint main(void) {\n")
	for name := range want {
		// Strings print as they are; numbers as their spelling.
		fmt.Fprintf(&src, "printf(\"%%s=%%s\\n\", %q, _Generic((%s), char *: (%s), default: S(%s)));\n", name, name, name, name)
	}
	src.WriteString("return 0;\n}\n")
	dir := t.TempDir()
	cfile := filepath.Join(dir, "env.c")
	if err := os.WriteFile(cfile, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "env")
	if out, err := exec.Command(gcc, "-std=c11", "-Wall", "-Werror", "-I", include, "-o", bin, cfile).CombinedOutput(); err != nil {
		t.Fatalf("compile env probe: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("run env probe: %v", err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the Go mirror drifted from libxcuda/include (-go +c):\n%s", diff)
	}
}
