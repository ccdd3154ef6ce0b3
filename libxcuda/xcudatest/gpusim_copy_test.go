package xcudatest

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
)

// copyRun runs gpusim's train as an offline process with the given signal role, each
// step a 32 MiB batch copied in and one short kernel, beside online requests that copy
// 16 MiB in and out around one kernel, on one simulated MPS H100. It returns the share
// of the offline batch copies that started on the PCIe link while an online request
// was under way (from its input copy queued to its output copy done), and infer's result.
func copyRun(t *testing.T, role ctlblock.SignalRole) (float64, inferResult) {
	t.Helper()
	trace := filepath.Join(t.TempDir(), "ops.csv")
	on, off, d, page := mpsPair(t, ctlblock.Limits{ShareBP: 10000, Signal: ctlblock.Signal{Role: role, GPUs: 1}},
		"-op-trace", trace)
	if err := page.SetFollowers([]uint32{1}); err != nil { // as muxd keeps it
		t.Fatal(err)
	}
	train, tout := off.startGpusim(t, d, "train", "--duration", "3.5", "--mem", "256M",
		"--kernels", "1", "--kernel-us", "100", "--batch", "32M")
	time.Sleep(300 * time.Millisecond)
	infer := on.gpusimCommand(d, "infer", "--rate", "constant:150", "--duration", "2.5", "--kernels", "1",
		"--kernel-us", "300", "--grid", "132", "--io-bytes", "16M")
	out, err := infer.CombinedOutput()
	if err != nil {
		t.Fatalf("infer: %v\n%s", err, out)
	}
	if err := train.Wait(); err != nil {
		t.Fatalf("train: %v\n%s", err, tout.String())
	}
	if r := lastJSON[trainResult](t, tout.String()); r.Iterations == 0 || r.Errors != 0 {
		t.Fatalf("train: %+v", r)
	}
	d.Stop() // flushes the trace
	f, err := os.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) < 2 {
		t.Fatalf("op trace: %v (%d rows)", err, len(rows))
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	num := func(r []string, c string) float64 {
		v, _ := strconv.ParseFloat(r[col[c]], 64)
		return v
	}
	offPID, onPID := strconv.Itoa(train.Process.Pid), strconv.Itoa(infer.Process.Pid)
	type span struct{ from, to float64 }
	var requests []span
	var starts []float64 // the offline batch copies' starts
	open := -1.0
	for _, r := range rows[1:] {
		switch pid, kind := r[col["pid"]], r[col["kind"]]; {
		case pid == onPID && kind == "h2d":
			open = num(r, "queued_us")
		case pid == onPID && kind == "d2h" && open >= 0:
			requests, open = append(requests, span{open, num(r, "end_us")}), -1
		case pid == offPID && kind == "h2d":
			starts = append(starts, num(r, "head_us"))
		}
	}
	if len(requests) < 100 || len(starts) < 100 {
		t.Fatalf("%d online requests and %d offline copies in the trace", len(requests), len(starts))
	}
	during := 0
	for _, s := range starts {
		for _, q := range requests {
			if s > q.from && s < q.to {
				during++
				break
			}
		}
	}
	return float64(during) / float64(len(starts)), lastJSON[inferResult](t, string(out))
}

// TestGpusimHoldsCopies: an offline process that follows the signal page holds its
// host<->device copies while an online request is under way, as it holds its launches,
// so its batch copies no longer share the PCIe link with a request's input and output.
// Measured on the 2-core build machine: 9.7-9.9% of the batch copies started during a
// request without the page, 0.3-0.4% with it; the test fails with the hold taken out of
// the copy wrappers.
func TestGpusimHoldsCopies(t *testing.T) {
	if testing.Short() {
		t.Skip("gpusim runs take seconds")
	}
	without, wi := copyRun(t, ctlblock.SignalNone)
	with, fi := copyRun(t, ctlblock.SignalFollow)
	t.Logf("offline copies started during an online request: %.1f%% without the page, %.1f%% with it; infer p50/p99 %.2f/%.2f against %.2f/%.2f ms",
		100*without, 100*with, fi.ReqP50, fi.ReqP99, wi.ReqP50, wi.ReqP99)
	if without < 0.05 {
		t.Fatalf("without the page only %.1f%% of the offline copies met a request: the test does not overlap them", 100*without)
	}
	if with > without/3 {
		t.Errorf("with the page %.1f%% of the offline copies started during a request, against %.1f%% without: copies are not held", 100*with, 100*without)
	}
}
