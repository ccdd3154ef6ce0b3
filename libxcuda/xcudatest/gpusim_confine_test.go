package xcudatest

import (
	"context"
	"testing"
	"time"

	"github.com/muxflow/muxflow/gpusim/simclient"
	"github.com/muxflow/muxflow/libxcuda/ctlblock"
)

// confineTrain is what a run of gpusim's train (GPU-filling 500 µs kernels, one step a
// synchronisation) showed: the share of the H100's SMs its kernels held while they ran,
// between 0.4 s after confinement was asked for and the end; its GPU time per step; and
// what its libxcuda reported.
type confineTrain struct {
	held      float64
	msPerIter float64
	usage     ctlblock.Usage
}

// runConfined runs train under limits l on a simulated MPS H100, and sets l's
// ConfinePercent to pct after 0.6 s, as muxd does once it names a job.
func runConfined(t *testing.T, l ctlblock.Limits, pct uint32) confineTrain {
	t.Helper()
	h := newHarness(t, l)
	d := h.useGpusimMPS(t)
	train, out := h.startGpusim(t, d, "train", "--duration", "2.4", "--mem", "64M", "--big-share", "1", "--kernels", "4")
	time.Sleep(600 * time.Millisecond)
	l.ConfinePercent = pct
	if err := h.block.SetLimits(l); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	before := processStats(t, d, train.Process.Pid)
	time.Sleep(1200 * time.Millisecond)
	after := processStats(t, d, train.Process.Pid)
	if err := train.Wait(); err != nil {
		t.Fatalf("train: %v\n%s", err, out.String())
	}
	res := lastJSON[struct {
		Iterations int64   `json:"iterations"`
		MsPerIter  float64 `json:"gpu_ms_p50"`
		Errors     int64   `json:"errors"`
		FirstError string  `json:"first_error"`
	}](t, out.String())
	if res.Errors != 0 || res.Iterations == 0 {
		t.Fatalf("train failed under confinement: %+v\n%s", res, out.String())
	}
	u, err := h.block.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	busy := after.BusyNs - before.BusyNs
	if busy <= 0 {
		t.Fatalf("train ran no kernels in the window: %+v then %+v", before, after)
	}
	return confineTrain{held: (after.SMNs - before.SMNs) / busy / 132, msPerIter: res.MsPerIter, usage: u}
}

func processStats(t *testing.T, d *simclient.Daemon, pid int) simclient.ProcessStats {
	t.Helper()
	p, ok, err := d.Process(context.Background(), 0, pid)
	if err != nil || !ok {
		t.Fatalf("gpusim counters of pid %d: %v (found %v)", pid, err, ok)
	}
	return p
}

// TestGpusimConfinedKernels (issue 14): muxd asks a running offline job's libxcuda to
// confine its kernels to half the SMs (limits confine_pct); from then on its GPU-filling
// kernels go into a green context of 72 of the H100's 132 SMs (half, rounded up to the
// H100's partitions of 8), so a GPU-filling online kernel finds the rest free. Each step
// still waits for its kernels (its GPU time per step, measured on the stream it launches
// into, grows as they run on fewer SMs): the launches stay ordered with the job's own
// stream. An MPS active-thread percentage below 100 overrides green contexts: the usage
// page says so, and the percentage holds.
func TestGpusimConfinedKernels(t *testing.T) {
	if testing.Short() {
		t.Skip("gpusim runs take seconds")
	}
	free := runConfined(t, ctlblock.Unlimited(), 0)
	half := runConfined(t, ctlblock.Unlimited(), 50)
	t.Logf("SMs held: %.2f free, %.2f confined; GPU ms a step %.2f, %.2f; usage %v %d SMs",
		free.held, half.held, free.msPerIter, half.msPerIter, half.usage.Confine, half.usage.ConfinedSMs)
	if free.held < 0.85 || free.usage.Confine != ctlblock.ConfineNone {
		t.Errorf("unconfined: held %.2f of the SMs, usage %v; want the GPU, not confined", free.held, free.usage.Confine)
	}
	if half.held > 72.0/132+0.01 || half.held < 0.4 {
		t.Errorf("confined to 50%%: held %.2f of the SMs, want at most 72 of 132", half.held)
	}
	if half.usage.Confine != ctlblock.ConfineOn || half.usage.ConfinedSMs != 72 {
		t.Errorf("usage %v with %d SMs, want confined to 72", half.usage.Confine, half.usage.ConfinedSMs)
	}
	if half.msPerIter < 1.5*free.msPerIter {
		t.Errorf("GPU time a step %.2f ms confined against %.2f free: the step no longer waits for its confined kernels", half.msPerIter, free.msPerIter)
	}

	l := ctlblock.Unlimited()
	l.MPSActiveThreadPercent = 60
	capped := runConfined(t, l, 50)
	if capped.usage.Confine != ctlblock.ConfineMPSPct || capped.held > 0.61 || capped.held < 0.5 {
		t.Errorf("MPS 60%% and confine 50%%: usage %v, held %.2f; want the percentage to hold and the usage to say why", capped.usage.Confine, capped.held)
	}
}
