package alloc

import (
	"math"
	"testing"
	"time"
)

func TestSplitBudget(t *testing.T) {
	for _, tc := range []struct {
		name   string
		budget float64
		claims []Claim
		want   []float64
	}{
		{"one takes all", 0.7, []Claim{{1, 0.7}}, []float64{0.7}},
		{"two split evenly", 0.7, []Claim{{1, 0.7}, {1, 0.7}}, []float64{0.35, 0.35}},
		{"own cap binds", 0.7, []Claim{{1, 0.4}}, []float64{0.4}},
		{"capped one leaves the rest to the other", 0.7, []Claim{{1, 0.2}, {1, 0.7}}, []float64{0.2, 0.5}},
		{"the other capped by its own too", 0.7, []Claim{{1, 0.2}, {1, 0.4}}, []float64{0.2, 0.4}},
		{"weights", 0.6, []Claim{{1, 1}, {2, 1}}, []float64{0.2, 0.4}},
		{"zero weight gets nothing", 0.6, []Claim{{0, 1}, {1, 1}}, []float64{0, 0.6}},
		{"no budget", 0, []Claim{{1, 0.4}}, []float64{0}},
		{"four", 0.7, []Claim{{1, 0.7}, {1, 0.7}, {1, 0.05}, {1, 0.7}}, []float64{0.65 / 3, 0.65 / 3, 0.05, 0.65 / 3}},
	} {
		got, parts := SplitBudget(tc.budget, tc.claims)
		var sum float64
		for i := range got {
			sum += got[i]
			if math.Abs(got[i]-tc.want[i]) > 1e-9 {
				t.Errorf("%s: shares %v, want %v", tc.name, got, tc.want)
				break
			}
			if tc.claims[i].Weight > 0 && math.Abs(got[i]-math.Min(tc.claims[i].Cap, parts[i])) > 1e-9 {
				t.Errorf("%s: share %v is not min(cap %v, part %v)", tc.name, got[i], tc.claims[i].Cap, parts[i])
			}
		}
		if sum > tc.budget+1e-9 {
			t.Errorf("%s: shares sum to %v, above the budget %v", tc.name, sum, tc.budget)
		}
	}
}

func TestFitBudget(t *testing.T) {
	for _, tc := range []struct {
		width, max, fitMin float64
		budget             float64
		fits               bool
	}{
		{0, 0.7, 0.3, 0.7, false},    // unknown width
		{0.5, 0.7, 0.3, 0.5, true},   // half-GPU kernels
		{0.2, 0.7, 0.3, 0.7, true},   // narrow: sm_max binds, and fits
		{0.7, 0.7, 0.3, 0.3, true},   // exactly fit_min left
		{0.75, 0.7, 0.3, 0.7, false}, // too wide: nothing gained by shrinking
		{1, 0.7, 0.3, 0.7, false},
		{1.5, 0.7, 0.3, 0.7, false}, // nonsense width
	} {
		b, f := FitBudget(tc.width, tc.max, tc.fitMin)
		if math.Abs(b-tc.budget) > 1e-9 || f != tc.fits {
			t.Errorf("FitBudget(%v, %v, %v) = %v, %v; want %v, %v", tc.width, tc.max, tc.fitMin, b, f, tc.budget, tc.fits)
		}
	}
}

func TestWidthObserve(t *testing.T) {
	var w Width
	t0 := time.Now()
	if got := w.Observe(0, t0); got != 0 {
		t.Errorf("nothing seen: %v", got)
	}
	if got := w.Observe(0.5, t0); got != 0.5 {
		t.Errorf("first width: %v", got)
	}
	if got := w.Observe(0.25, t0.Add(WidthMemory/2)); got != 0.5 {
		t.Errorf("narrower within the memory: %v, want 0.5", got)
	}
	if got := w.Observe(0.25, t0.Add(WidthMemory+time.Second)); got != 0.25 {
		t.Errorf("narrower after the memory: %v, want 0.25", got)
	}
	if got := w.Observe(0, t0.Add(4*WidthMemory)); got != 0 {
		t.Errorf("nothing seen for long: %v, want 0 (unknown)", got)
	}
}
