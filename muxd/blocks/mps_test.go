package blocks

import (
	"testing"

	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/policy"
)

// One rounding rule for MPS active-thread percentages: down to a whole percent, 1..100.
func TestMPSThreadPercent(t *testing.T) {
	for in, want := range map[float64]uint32{0: 1, 0.4: 1, 1: 1, 29.999999999: 30, 30.4: 30, 30.99: 30, 69.999: 69, 70: 70, 100: 100, 250: 100} {
		if got := MPSThreadPercent(in); got != want {
			t.Errorf("MPSThreadPercent(%v) = %d, want %d", in, got, want)
		}
	}
}

// A container's MPS ceiling is its own sm-percent, else its class's sm_max below 100; a
// container alone on its GPU gets exactly it in its control block.
func TestMPSThreadCeilingIsTheInitialBlockValue(t *testing.T) {
	p := policy.Default()
	p.Classes.Offline.SMMax = 62.5
	for _, tc := range []struct {
		class api.Class
		sm    int
		want  uint32
	}{
		{api.Offline, 0, 62}, {api.Offline, 5, 5}, {api.Offline, 40, 40}, {api.Offline, 62, 62},
		{api.Online, 0, 0}, {api.Online, 50, 50}, {api.Online, 100, 100},
	} {
		c := ctr("a", tc.class, api.Limits{SMPercent: tc.sm})
		got, block := MPSThreadCeiling(c, p), InitialLimits(c, p, nil).MPSActiveThreadPercent
		if got != tc.want || block != tc.want {
			t.Errorf("%s sm-percent %d: ceiling %d, block %d; want %d", tc.class, tc.sm, got, block, tc.want)
		}
	}
}
