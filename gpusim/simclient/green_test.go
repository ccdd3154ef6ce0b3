package simclient_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/muxflow/muxflow/gpusim/simclient"
)

// TestGreenContextProbe runs gpusim/tests/greenprobe.c against the fake libcuda:
// SM resources and their split on an H100 and a T4, descriptors, green contexts,
// their streams, confinement of their launches and event ordering with the
// primary context, every argument check.
func TestGreenContextProbe(t *testing.T) {
	d := start(t, simclient.Options{GPUs: "h100,t4"})
	b, err := simclient.Build()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(b, "gpusim", "test", "greenprobe"))
	cmd.Env = append(os.Environ(), d.Env()...)
	out, err := cmd.CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "FAIL") {
			t.Error(l)
		}
	}
	if err != nil {
		t.Fatalf("greenprobe: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "failures 0") {
		t.Fatalf("greenprobe did not finish: %s", out)
	}
}
