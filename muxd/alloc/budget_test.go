package alloc

import (
	"math"
	"slices"
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
		{0, 0.7, 0.3, 0.7, false},  // unknown width
		{0.5, 0.7, 0.3, 0.5, true}, // half-GPU kernels
		{0.2, 0.7, 0.3, 0.7, true}, // narrow: sm_max binds, and fits
		{0.7, 0.7, 0.3, 0.3, true}, // exactly fit_min left
		{0.75, 0.7, 0.3, 1, false}, // too wide: nothing gained by shrinking, the whole GPU
		{1, 0.7, 0.3, 1, false},
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

// Bus reads each class's bandwidth per unit of running time from the weighted readings,
// says the GPU is contended once the two together pass BusMax, and remembers it for
// WidthMemory; whole-percent rounding of small figures does not decide it alone.
func TestBusContention(t *testing.T) {
	now := time.Unix(1000, 0)
	heavy := BusUse{OnlineUtil: 0.2, OnlineMem: 0.1, OfflineUtil: 0.6, OfflineMem: 0.36, Known: true}  // 50% + 60%
	light := BusUse{OnlineUtil: 0.2, OnlineMem: 0.06, OfflineUtil: 0.6, OfflineMem: 0.18, Known: true} // 30% + 30%
	var b Bus
	bound, on, off := b.Observe(light, now)
	if bound || math.Abs(on-0.3) > 1e-9 || math.Abs(off-0.3) > 1e-9 {
		t.Fatalf("light: bound %v online %.2f offline %.2f, want false 0.30 0.30", bound, on, off)
	}
	for i := range 30 {
		bound, on, off = b.Observe(heavy, now.Add(time.Duration(i+1)*100*time.Millisecond))
	}
	if !bound || on < 0.49 || off < 0.59 {
		t.Fatalf("heavy for 3s: bound %v online %.2f offline %.2f, want true ~0.50 ~0.60", bound, on, off)
	}
	last := now.Add(3 * time.Second)
	for i := range 50 {
		bound, _, _ = b.Observe(light, last.Add(time.Duration(i+1)*100*time.Millisecond))
	}
	if !bound {
		t.Errorf("light again for 5s: not bound, want bound for WidthMemory")
	}
	if bound, _, _ = b.Observe(light, last.Add(WidthMemory+time.Second)); bound {
		t.Errorf("light for longer than WidthMemory: still bound")
	}
	if bound, _, _ = b.Observe(BusUse{}, last.Add(WidthMemory+2*time.Second)); bound {
		t.Errorf("no memory figures: bound")
	}

	// One period at 3% utilisation and 3% memory (a ratio of 1 from rounding) is not
	// enough evidence; nor is an unknown reading.
	var c Bus
	if bound, on, _ := c.Observe(BusUse{OnlineUtil: 0.03, OnlineMem: 0.03, OfflineUtil: 0.6, OfflineMem: 0.5, Known: true}, now); bound || on != 0 {
		t.Errorf("one 3%% reading: bound %v online %.2f, want false 0", bound, on)
	}
	var d Bus
	if bound, on, off := d.Observe(BusUse{OnlineUtil: 0.5, OnlineMem: 0.5, OfflineUtil: 0.5, OfflineMem: 0.5}, now); bound || on != 0 || off != 0 {
		t.Errorf("a reading without memory figures: bound %v %.2f %.2f, want false 0 0", bound, on, off)
	}
}

func TestFitHeld(t *testing.T) {
	for _, tc := range []struct {
		name   string
		held   []uint32
		budget float64
		turn   int
		want   []bool
	}{
		{"all fit, whoever's turn", []uint32{25, 25}, 50, 1, []bool{true, true}},
		{"the first took the whole budget: its turn", []uint32{50, 25}, 50, 0, []bool{true, false}},
		{"the first took the whole budget: the second's turn", []uint32{50, 25}, 50, 1, []bool{false, true}},
		// largest-first would fit the 30 alone
		{"no turn: the best sum, not the largest first", []uint32{30, 25, 25}, 50, -1, []bool{false, true, true}},
		{"the turn's, then the best sum in the room left", []uint32{30, 25, 25}, 50, 1, []bool{false, true, true}},
		{"the turn's, then what fits beside it", []uint32{30, 25, 15}, 50, 0, []bool{true, false, true}},
		{"four jobs over 70, each in turn", []uint32{70, 35, 23, 17}, 70, 0, []bool{true, false, false, false}},
		{"four jobs over 70, the second's turn", []uint32{70, 35, 23, 17}, 70, 1, []bool{false, true, true, false}},
		{"four jobs over 70, the last's turn", []uint32{70, 35, 23, 17}, 70, 3, []bool{false, true, false, true}},
		{"equal sums: the same set every time", []uint32{25, 25, 25}, 50, -1, []bool{true, true, false}},
		{"a turn past the list is none", []uint32{50, 25}, 50, 7, []bool{true, false}},
		{"unknown or whole-GPU holdings never fit, even in their turn", []uint32{0, 100, 101, 40}, 70, 1, []bool{false, false, false, true}},
		{"no budget", []uint32{10}, 0, 0, []bool{false}},
		{"NaN budget", []uint32{10}, math.NaN(), 0, []bool{false}},
		{"a budget past the GPU is the GPU", []uint32{60, 60}, math.Inf(1), 1, []bool{false, true}},
		{"rounding to whole percents", []uint32{50}, 49.6, 0, []bool{true}},
		{"none", nil, 70, -1, []bool{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FitHeld(tc.held, tc.budget, tc.turn)
			if !slices.Equal(got, tc.want) {
				t.Errorf("FitHeld(%v, %v, %v) = %v, want %v", tc.held, tc.budget, tc.turn, got, tc.want)
			}
		})
	}
}

func TestTurnAt(t *testing.T) {
	cycle := func(n int) time.Duration { return time.Duration(n) * FitTurn }
	t0 := time.Unix(0, 0).Add(100 * cycle(6)) // a cycle's start for 2 and 3 containers
	for _, tc := range []struct {
		name string
		held []uint32
		at   time.Duration
		want int
	}{
		{"none", nil, 0, -1},
		{"none that may fit", []uint32{0, 101}, 0, -1},
		{"alone", []uint32{30}, 3 * time.Second, 0},
		{"the first's turn", []uint32{70, 35}, 0, 0},
		{"still the first's: two thirds of the cycle", []uint32{70, 35}, cycle(2) * 66 / 100, 0},
		{"the second's", []uint32{70, 35}, cycle(2) * 67 / 100, 1},
		{"the first's again", []uint32{70, 35}, cycle(2), 0},
		{"those that may not fit take no turn", []uint32{0, 50, 50}, cycle(2) * 3 / 4, 2},
		{"the cycle's last instant", []uint32{50, 25}, cycle(2) - 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TurnAt(tc.held, t0.Add(tc.at)); got != tc.want {
				t.Errorf("TurnAt(%v, +%v) = %d, want %d", tc.held, tc.at, got, tc.want)
			}
		})
	}
}

func TestBoundedBeside(t *testing.T) {
	for _, tc := range []struct{ budget, fitted, want float64 }{
		{50, 0, 1},             // nothing fits: the split as it is
		{70, 35, 0.5},          // half the budget left
		{50, 50, BoundedFloor}, // none left: the floor
		{70, 95, BoundedFloor}, // more held than the budget (cannot be chosen so; still the floor)
		{70, 63, BoundedFloor},
		{0, 10, 1},
		{math.NaN(), 10, 1},
		{50, math.NaN(), 1},
	} {
		if got := BoundedBeside(tc.budget, tc.fitted); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("BoundedBeside(%v, %v) = %v, want %v", tc.budget, tc.fitted, got, tc.want)
		}
	}
}

// A container's split part of a fitted budget is offered where it fits beside what its
// neighbours' processes may hold; where it does not, it will take turns, and is offered
// the whole budget up to its own cap.
func TestTurnOffer(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		part, budget, cap, want float64
		others                  uint32
	}{
		{"alone", 0.5, 0.5, 0.7, 0.5, 0},
		{"the split fits beside the others' split", 0.25, 0.5, 0.7, 0.25, 25},
		{"beside one that holds the whole budget: all of it", 0.25, 0.5, 0.7, 0.5, 50},
		{"its own cap still binds", 0.25, 0.5, 0.3, 0.3, 50},
		{"a cap under its part keeps the part", 0.2, 0.5, 0.1, 0.2, 50},
		{"three ways, rounded: 33 beside 33 + 33 fits 100", 0.333, 1, 1, 0.333, 66},
		{"a neighbour that may hold the whole GPU", 0.35, 0.7, 0.7, 0.7, 100},
	} {
		if got := TurnOffer(tc.part, tc.budget, tc.cap, tc.others); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: TurnOffer(%v, %v, %v, %d) = %v, want %v", tc.name, tc.part, tc.budget, tc.cap, tc.others, got, tc.want)
		}
	}
}
