package ctlblock

import (
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/muxflow/muxflow/tests/testvec"
)

// TestEnvMatchesHeader compiles xcuda_env.h and xcuda_ctl.h with gcc and fails when a
// container path or variable name that libxcuda reads differs from its Go mirror, which
// muxd/wiring uses to write specs.
func TestEnvMatchesHeader(t *testing.T) {
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
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	got := testvec.CMacros(t, "libxcuda/include", []string{"xcuda_ctl.h", "xcuda_env.h"}, names)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the Go mirror drifted from libxcuda/include (-go +c):\n%s", diff)
	}
}
