package sim

import (
	"math/rand/v2"
	"sort"
	"testing"
)

// The end heap gives a kernel's residencies in order of their ends and skips the marks
// of residencies that changed speed or left since.
func TestEndHeapOrderAndStaleMarks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	k := &op{}
	var live []*residency
	for range 200 {
		r := &residency{k: k, ver: 1}
		r.end = rng.Float64() * 1000
		k.ends.push(endMark{r.end, r, r.ver})
		if rng.IntN(4) == 0 {
			r.ver++ // left, or sped up: this mark is stale
			if rng.IntN(2) == 0 {
				r.end = rng.Float64() * 1000
				k.ends.push(endMark{r.end, r, r.ver})
				live = append(live, r)
			}
			continue
		}
		live = append(live, r)
	}
	want := make([]float64, len(live))
	for i, r := range live {
		want[i] = r.end
	}
	sort.Float64s(want)
	for i, w := range want {
		r := k.first()
		if r == nil {
			t.Fatalf("heap empty after %d of %d live residencies", i, len(want))
		}
		if r.end != w {
			t.Fatalf("residency %d: end %v, want %v", i, r.end, w)
		}
		k.ends.pop()
	}
	if r := k.first(); r != nil {
		t.Errorf("a stale mark came out: end %v", r.end)
	}
}
