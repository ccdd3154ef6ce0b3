package xcudatest

import (
	"context"
	"testing"
	"time"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
)

// atpRun runs gpusim's train (GPU-filling kernels) under libxcuda on a simulated MPS H100
// with the given MPS active-thread percentage in its limits, and returns the mean share
// of the GPU's SMs its kernels held while they ran (gpusim's per-process counters).
func atpRun(t *testing.T, pct uint32) float64 {
	t.Helper()
	l := ctlblock.Unlimited()
	l.MPSActiveThreadPercent = pct
	h := newHarness(t, l)
	d := h.useGpusimMPS(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	train, out := h.startGpusim(t, d, "train", "--duration", "1.5", "--mem", "64M", "--big-share", "1")
	time.Sleep(1200 * time.Millisecond)
	st, err := d.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := train.Wait(); err != nil {
		t.Fatalf("train: %v\n%s", err, out.String())
	}
	for _, p := range st[0].Processes {
		if p.PID == train.Process.Pid && p.BusyNs > 0 {
			return p.SMNs / p.BusyNs / float64(st[0].SMs)
		}
	}
	t.Fatalf("no gpusim counters for train (pid %d): %+v", train.Process.Pid, st[0].Processes)
	return 0
}

// TestGpusimActiveThreadPercentage: the MPS active-thread percentage in an offline
// container's limits (muxd sets it from its offline SM ceiling) reaches the driver through
// libxcuda and bounds the SMs its GPU-filling kernels hold, so a GPU-filling online kernel
// finds the rest free at once: 50% holds at most 66 of the H100's 132 SMs; 100% fills it.
func TestGpusimActiveThreadPercentage(t *testing.T) {
	if testing.Short() {
		t.Skip("gpusim runs take seconds")
	}
	half, full := atpRun(t, 50), atpRun(t, 100)
	t.Logf("SMs held while running: %.2f of the GPU at 50%%, %.2f at 100%%", half, full)
	if half > 0.51 {
		t.Errorf("at 50%% the offline kernels held %.2f of the SMs", half)
	}
	if full < 0.9 {
		t.Errorf("at 100%% the offline kernels held only %.2f of the SMs", full)
	}
}
