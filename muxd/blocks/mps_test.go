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

// A container's MPS ceiling is its own sm-percent, else its class's sm_max below 100 —
// but for offline work while alloc.fit is on, whose GPU's budget may be the whole GPU: no
// ceiling then, the control block says. A container alone on its GPU gets exactly its
// ceiling in its control block, or sm_max where the guard has no budget yet.
func TestMPSThreadCeilingIsTheInitialBlockValue(t *testing.T) {
	for _, fit := range []bool{true, false} {
		p := policy.Default()
		p.Classes.Offline.SMMax = 62.5
		p.Alloc.Fit = fit
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
			wantCeiling := tc.want
			if fit && tc.class == api.Offline && tc.sm == 0 {
				wantCeiling = 0
			}
			if got != wantCeiling || block != tc.want {
				t.Errorf("fit %v, %s sm-percent %d: ceiling %d, block %d; want %d and %d", fit, tc.class, tc.sm, got, block, wantCeiling, tc.want)
			}
		}
	}
}

// Where the guard sized a GPU's budget to the whole GPU (its online kernels fit beside no
// offline part), a new offline container alone on it gets every SM, one with an
// sm-percent that much, and two share it; the launch gate's share stays a part of
// sm_max, the time ceiling.
func TestWholeGPUBudget(t *testing.T) {
	p := policy.Default() // sm_max 70%
	gpus := []api.GPU{{Index: 0, UUID: "GPU-a", OfflineMPS: 100}}
	for _, tc := range []struct {
		name       string
		sm         int
		peers      int
		mps, share uint32
	}{
		{"alone", 0, 0, 100, 70},
		{"own sm-percent 40", 40, 0, 40, 40},
		{"own sm-percent 90: above sm_max, not above the GPU", 90, 0, 90, 70},
		{"beside another offline container", 0, 1, 50, 35},
	} {
		c := ctr("a", api.Offline, api.Limits{SMPercent: tc.sm})
		c.GPUs = []string{"0"}
		var peers []Peer
		for i := range tc.peers {
			o := ctr("peer"+string(rune('0'+i)), api.Offline, api.Limits{})
			o.GPUs = []string{"0"}
			peers = append(peers, Peer{Container: o})
		}
		l := InitialLimits(c, p, gpus, peers...)
		if l.MPSActiveThreadPercent != tc.mps || l.ShareBP != tc.share*100 {
			t.Errorf("%s: MPS %d%%, share %d bp; want %d%% and %d bp", tc.name, l.MPSActiveThreadPercent, l.ShareBP, tc.mps, tc.share*100)
		}
	}
}
