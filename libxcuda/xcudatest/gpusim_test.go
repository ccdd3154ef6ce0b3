package xcudatest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
)

// trainResult is the JSON line gpusim's train prints.
type trainResult struct {
	Iterations int64   `json:"iterations"`
	ItPerS     float64 `json:"it_per_s"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error"`
	FailedAt   string  `json:"failed_at"`
}

func lastJSON[T any](t *testing.T, out string) T {
	t.Helper()
	var v T
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &v); err != nil {
		t.Fatalf("parse %q: %v", out, err)
	}
	return v
}

// TestGpusimThrottle: gpusim's train (cuGetProcAddress path, and graphs)
// given a 30% share gets 30% ±5 points of GPU time, as gpusim measures it,
// in every 1 s window.
func TestGpusimThrottle(t *testing.T) {
	for _, graph := range []bool{false, true} {
		t.Run(fmt.Sprintf("graph=%v", graph), func(t *testing.T) {
			h := newHarness(t, ctlblock.Limits{ShareBP: 3000})
			d := h.useGpusim(t)
			args := []string{"--duration", "4.5", "--mem", "64M"}
			if graph {
				args = append(args, "--graph")
			}
			cmd := h.gpusimCommand(d, "train", args...)
			var out strings.Builder
			cmd.Stdout = &out
			cmd.Stderr = &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			var busy []float64
			var at []time.Time
			time.Sleep(700 * time.Millisecond) // start-up and the first refill
			for range 4 {
				p, ok, err := d.Process(ctx, 0, cmd.Process.Pid)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					busy = append(busy, p.BusyNs)
					at = append(at, time.Now())
				}
				time.Sleep(time.Second)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("train: %v\n%s", err, out.String())
			}
			if r := lastJSON[trainResult](t, out.String()); r.Errors != 0 || r.Iterations == 0 {
				t.Fatalf("train result %+v", r)
			}
			if len(busy) < 3 {
				t.Fatalf("gpusim saw train in only %d samples", len(busy))
			}
			var shares []float64
			for i := 1; i < len(busy); i++ {
				shares = append(shares, (busy[i]-busy[i-1])/float64(at[i].Sub(at[i-1]).Nanoseconds()))
			}
			t.Logf("GPU time share per window: %.3f", shares)
			for i, s := range shares {
				if s < 0.25 || s > 0.35 {
					t.Errorf("window %d: share %.3f, want 0.30 ±0.05", i, s)
				}
			}
		})
	}
}

// TestGpusimMemoryCap: train asks for more than its cap and fails with
// CUDA_ERROR_OUT_OF_MEMORY; the same run without libxcuda succeeds.
func TestGpusimMemoryCap(t *testing.T) {
	for _, preload := range []bool{true, false} {
		t.Run(fmt.Sprintf("libxcuda=%v", preload), func(t *testing.T) {
			h := newHarness(t, ctlblock.Limits{ShareBP: ctlblock.ShareFull, MemoryBytes: []uint64{1 << 30}})
			h.preload = preload
			d := h.useGpusim(t)
			out, _ := h.gpusimCommand(d, "train", "--iters", "2", "--mem", "2G").CombinedOutput()
			r := lastJSON[trainResult](t, string(out))
			if preload && r.FirstError != "CUDA_ERROR_OUT_OF_MEMORY" {
				t.Errorf("with a 1 GiB cap, train asking 2 GiB: %+v, want CUDA_ERROR_OUT_OF_MEMORY", r)
			}
			if !preload && r.Errors != 0 {
				t.Errorf("without libxcuda train failed: %+v", r)
			}
		})
	}
}
