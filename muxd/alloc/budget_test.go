package alloc

import (
	"math"
	"testing"
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
