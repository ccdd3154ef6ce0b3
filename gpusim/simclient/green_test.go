package simclient_test

import (
	"testing"

	"github.com/muxflow/muxflow/gpusim/simclient"
)

// TestGreenContextProbe runs gpusim/tests/greenprobe.c against the fake libcuda:
// SM resources and their split on an H100 and a T4, descriptors, green contexts,
// their streams, confinement of their launches and event ordering with the
// primary context, every argument check.
func TestGreenContextProbe(t *testing.T) {
	runProbe(t, start(t, simclient.Options{GPUs: "h100,t4"}), "greenprobe")
}
