package harness

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every drawn scenario validates, the draw depends only on (seed, index), and a sweep
// covers the axes it promises.
func TestRandomScenarios(t *testing.T) {
	gpus, rates := map[string]bool{}, map[string]bool{}
	var graphs, batches, multi, filling, narrow int
	for i := 0; i < 200; i++ {
		text := RandomScenario(3, i)
		if again := RandomScenario(3, i); again != text {
			t.Fatalf("scenario %d of seed 3 differs between two draws", i)
		}
		s, err := ParseScenario([]byte(text))
		if err != nil {
			t.Fatalf("scenario %d does not validate: %v\n%s", i, err, text)
		}
		share := float64(s.Online.Kernels) * s.Online.KernelUS * 1e-6 * s.Online.MaxQPS
		if share > 0.51 {
			t.Errorf("scenario %d: the online service alone takes %.0f%% of the GPU at its peak, above 50%%", i, 100*share)
		}
		gpus[s.GPU], rates[s.Online.Rate] = true, true
		if len(s.Offline) > 1 {
			multi++
		}
		for _, j := range s.Offline {
			if j.Graph {
				graphs++
			}
			if j.Batch > 0 {
				batches++
			}
		}
		if strings.Contains(s.Description, "(they hold 100% of the SMs)") {
			filling++
		}
		if strings.Contains(s.Description, "(they hold 5% of the SMs)") {
			narrow++
		}
	}
	if len(gpus) != 4 || len(rates) != 3 {
		t.Errorf("200 draws cover GPUs %v and rates %v; want all four and all three", gpus, rates)
	}
	for what, n := range map[string]int{"CUDA-graph jobs": graphs, "jobs with a batch": batches, "several jobs": multi, "GPU-filling online kernels": filling, "narrow online kernels": narrow} {
		if n < 10 {
			t.Errorf("200 draws gave %d scenarios with %s", n, what)
		}
	}
	if RandomScenario(3, 0) == RandomScenario(4, 0) {
		t.Error("seeds 3 and 4 drew the same first scenario")
	}
}

// gen writes the files, and replaces none that is already there.
func TestGenWritesAndKeeps(t *testing.T) {
	dir := t.TempDir()
	var out, errs bytes.Buffer
	if err := Run(t.Context(), []string{"gen", "--seed", "5", "--count", "3", dir}, &out, &errs); err != nil {
		t.Fatalf("gen: %v (%s)", err, errs.String())
	}
	for i := 0; i < 3; i++ {
		path := filepath.Join(dir, fmt.Sprintf("rand-5-%03d.toml", i))
		if _, err := LoadScenario(path); err != nil {
			t.Fatalf("%v", err)
		}
	}
	keep := filepath.Join(dir, "rand-5-001.toml")
	if err := os.WriteFile(keep, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := Run(t.Context(), []string{"gen", "--seed", "5", "--count", "3", dir}, &out, &errs)
	if err == nil || !strings.Contains(err.Error(), "rand-5-000.toml already exists") {
		t.Fatalf("gen over an existing sweep: %v, want an error naming the file", err)
	}
	if b, _ := os.ReadFile(keep); string(b) != "mine" {
		t.Errorf("gen replaced an existing file: %q", b)
	}
	for _, args := range [][]string{{"gen", "--count", "0", dir}, {"gen", "--count", "1001", dir}, {"gen"}, {"gen", dir, dir}} {
		if err := Run(t.Context(), args, &out, &errs); err == nil {
			t.Errorf("muxexp %v: no error", args)
		}
	}
}
