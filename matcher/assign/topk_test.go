package assign

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTopK(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name string
		w    []float64
		k    int
		want []int32
	}{
		{"basic", []float64{0.1, 0.9, 0.5, 0.7}, 2, []int32{1, 3}},
		{"k larger than row", []float64{0.3, 0.2}, 5, []int32{0, 1}},
		{"skips useless", []float64{-1, 0, math.NaN(), inf, math.Inf(-1), 0.4}, 3, []int32{5}},
		{"ties by index", []float64{0.5, 0.5, 0.5}, 2, []int32{0, 1}},
		{"k zero", []float64{1}, 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := TopK(nil, tc.w, tc.k)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestTopKAgainstSort(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	for trial := 0; trial < 200; trial++ {
		w := make([]float64, 1+r.IntN(300))
		for j := range w {
			w[j] = r.Float64()
		}
		k := 1 + r.IntN(70)
		prefix := []int32{-7}
		got := TopK(prefix, w, k)
		idx := make([]int32, len(w))
		for j := range idx {
			idx[j] = int32(j)
		}
		slices.SortFunc(idx, func(a, b int32) int { return cmpFloatDesc(w[a], w[b]) })
		want := append([]int32{-7}, idx[:min(k, len(w))]...)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("trial %d (-want +got):\n%s", trial, diff)
		}
	}
}

func cmpFloatDesc(a, b float64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}
