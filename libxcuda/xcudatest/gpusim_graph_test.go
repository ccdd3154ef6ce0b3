package xcudatest

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/muxflow/muxflow/gpusim/simclient"
	"github.com/muxflow/muxflow/libxcuda/ctlblock"
)

// tracedPair is mpsPair with gpusimd writing its op trace (returned: read it after
// d.Stop), an offline side of the given signal role at a 100% share, and the GPU's slot
// counting one follower, as muxd keeps it.
func tracedPair(t *testing.T, role ctlblock.SignalRole) (on, off *harness, d *simclient.Daemon, trace string) {
	t.Helper()
	trace = filepath.Join(t.TempDir(), "ops.csv")
	on, off, d, page := mpsPair(t, ctlblock.Limits{ShareBP: 10000, Signal: ctlblock.Signal{Role: role, GPUs: 1}},
		"-op-trace", trace)
	if err := page.SetFollowers([]uint32{1}); err != nil {
		t.Fatal(err)
	}
	return on, off, d, trace
}

// readOpTrace reads gpusimd's op trace (gpusimd -op-trace): its rows after the header, and
// each column's index by name.
func readOpTrace(t *testing.T, path string) ([][]string, map[string]int) {
	t.Helper()
	f, err := os.Open(path)
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
	return rows[1:], col
}

// graphRun runs gpusim's train replaying its step as one CUDA graph (20 kernels, about
// 15 ms on an H100; trainArgs add to train's arguments) as an offline process that follows
// the signal page, beside GPU-filling online requests, and returns the share of its
// kernels queued while those came that gpusimd queued within 20 µs of the kernel before
// them: a graph launched whole queues all its kernels at once, one launched in chunks while
// online work is recent (each held and bounded by the gate) one chunk at a time.
func graphRun(t *testing.T, role ctlblock.SignalRole, trainArgs ...string) float64 {
	t.Helper()
	on, off, d, trace := tracedPair(t, role)
	train, tout := off.startGpusim(t, d, "train", append([]string{"--duration", "4", "--mem", "64M",
		"--kernels", "20", "--kernel-us", "500", "--graph"}, trainArgs...)...)
	time.Sleep(300 * time.Millisecond)
	infer := on.gpusimCommand(d, "infer", "--rate", "constant:40", "--duration", "3", "--kernels", "1",
		"--kernel-us", "1500", "--grid", "1056")
	if out, err := infer.CombinedOutput(); err != nil {
		t.Fatalf("infer: %v\n%s", err, out)
	}
	if err := train.Wait(); err != nil {
		t.Fatalf("train: %v\n%s", err, tout.String())
	}
	if r := lastJSON[trainResult](t, tout.String()); r.Iterations == 0 || r.Errors != 0 {
		t.Fatalf("train: %+v", r)
	}
	d.Stop() // flushes the trace
	rows, col := readOpTrace(t, trace)
	// the offline kernels queued while online requests came
	offPID, onPID := strconv.Itoa(train.Process.Pid), strconv.Itoa(infer.Process.Pid)
	type op struct{ queued, end float64 }
	var ops, online []op
	for _, r := range rows {
		if r[col["kind"]] != "kernel" {
			continue
		}
		q, _ := strconv.ParseFloat(r[col["queued_us"]], 64)
		e, _ := strconv.ParseFloat(r[col["end_us"]], 64)
		switch r[col["pid"]] {
		case offPID:
			ops = append(ops, op{q, e})
		case onPID:
			online = append(online, op{q, e})
		}
	}
	if len(online) == 0 {
		t.Fatal("no online kernel in the trace")
	}
	first, last := online[0].queued, online[0].end
	for _, o := range online {
		first, last = min(first, o.queued), max(last, o.end)
	}
	ops = slices.DeleteFunc(ops, func(o op) bool { return o.queued < first || o.queued > last })
	sort.Slice(ops, func(i, j int) bool { return ops[i].queued < ops[j].queued })
	if len(ops) < 100 {
		t.Fatalf("only %d offline kernels in the trace", len(ops))
	}
	together := 0
	for i := 1; i < len(ops); i++ {
		if ops[i].queued-ops[i-1].queued < 20 {
			together++
		}
	}
	frac := float64(together) / float64(len(ops)-1)
	t.Logf("signal role %d: %d offline kernels while online requests came, %.0f%% queued within 20 µs of the one before",
		role, len(ops), 100*frac)
	return frac
}

// TestGpusimSplitsLongGraphs: an offline process that follows the signal page launches its
// graph of kernels in chunks, each held and bounded by the gate, while online work is recent
// on its GPU; one that does not follow the page launches it whole (docs/results.md,
// t4-graph-fill).
func TestGpusimSplitsLongGraphs(t *testing.T) {
	if split := graphRun(t, ctlblock.SignalFollow); split > 0.4 {
		t.Errorf("following the page, %.0f%% of the offline kernels were queued together with the one before, want few", 100*split)
	}
	if whole := graphRun(t, ctlblock.SignalNone); whole < 0.8 {
		t.Errorf("not following the page, %.0f%% of the offline kernels were queued together with the one before, want most", 100*whole)
	}
}

// TestGpusimSplitsGraphsWithCopies: a training step's graph that begins with its batch's
// input copy and a memset (what a captured PyTorch step holds besides kernels) is split
// too.
func TestGpusimSplitsGraphsWithCopies(t *testing.T) {
	if split := graphRun(t, ctlblock.SignalFollow, "--batch", "1M"); split > 0.4 {
		t.Errorf("a graph with a copy and a memset: %.0f%% of the offline kernels were queued together with the one before, want few", 100*split)
	}
}

// TestGpusimChangedGraphGoesWhole: once a job sets a node of its instantiated graph again
// (here its memset, cuGraphExecMemsetNodeSetParams, before every step) the chunks no
// longer hold what the graph does, and the graph is launched whole.
func TestGpusimChangedGraphGoesWhole(t *testing.T) {
	if whole := graphRun(t, ctlblock.SignalFollow, "--batch", "1M", "--update-every", "1"); whole < 0.8 {
		t.Errorf("a graph set again before every step: %.0f%% of the offline kernels were queued together with the one before, want most (launched whole)", 100*whole)
	}
}
