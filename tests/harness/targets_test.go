package harness

import (
	"strings"
	"testing"
)

func targetsReport(muxP99, staticP99, mpsP99, muxOff, staticOff, aloneUtil float64) *Report {
	p := Pass{Results: []Result{
		{Strategy: OnlineAlone, ReqP99: 10, Util: aloneUtil},
		{Strategy: PlainMPS, ReqP99: 10 * mpsP99, OfflineNorm: 0.9},
		{Strategy: StaticShare, ReqP99: 10 * staticP99, OfflineNorm: staticOff},
		{Strategy: Muxflow, ReqP99: 10 * muxP99, OfflineNorm: muxOff},
	}}
	r := &Report{Scenario: &Scenario{Name: "t"}, Passes: []Pass{p}}
	r.aggregate()
	return r
}

func TestTargets(t *testing.T) {
	met := func(r *Report) string {
		var s []string
		for _, c := range r.Targets() {
			s = append(s, c.Met)
		}
		return strings.Join(s, ",")
	}
	// order: p99, offline, vs mps, vs static, dynamic gain
	for _, tc := range []struct {
		name                                      string
		mux, static, mps, muxOff, staticOff, util float64
		want                                      string
	}{
		{"all met", 1.05, 1.3, 2.0, 0.6, 0.45, 0.3, "yes,yes,yes,yes,yes"},
		{"p99 over, worse than static", 1.4, 1.3, 2.0, 0.6, 0.45, 0.3, "no,yes,yes,no,no"},
		{"busy online: offline target n/a, baselines within target", 1.08, 1.05, 1.09, 0.1, 0.1, 0.7, "yes,n/a,n/a,n/a,no"},
		{"gain too small", 1.05, 1.05, 1.5, 0.5, 0.45, 0.3, "yes,yes,yes,n/a,no"},
	} {
		if got := met(targetsReport(tc.mux, tc.static, tc.mps, tc.muxOff, tc.staticOff, tc.util)); got != tc.want {
			t.Errorf("%s: met = %s, want %s", tc.name, got, tc.want)
		}
	}
	// Without a muxflow row nothing can be judged.
	r := &Report{Scenario: &Scenario{Name: "t"}, Passes: []Pass{{Results: []Result{{Strategy: OnlineAlone, ReqP99: 1}}}}}
	r.aggregate()
	if got := met(r); got != "n/a,n/a,n/a,n/a,n/a" {
		t.Errorf("no muxflow row: %s", got)
	}
	var b strings.Builder
	targetsReport(1.05, 1.3, 2.0, 0.6, 0.45, 0.3).WriteTargets(&b, true)
	if !strings.Contains(b.String(), "| muxflow p99 ≤ 1.10× alone | 1.05× | yes |") {
		t.Errorf("markdown:\n%s", b.String())
	}
}

// A strategy that fell behind in any pass is reported as such, not as a median with a
// zero in it.
func TestAggregateKeepsAFellBehindRow(t *testing.T) {
	ok := Pass{Results: []Result{{Strategy: OnlineAlone, ReqP99: 10}, {Strategy: PlainMPS, ReqP99: 30}}}
	behind := Pass{Results: []Result{{Strategy: OnlineAlone, ReqP99: 10}, {Strategy: PlainMPS, Skipped: "online did not finish"}}}
	r := &Report{Scenario: &Scenario{Name: "t"}, Passes: []Pass{ok, behind, ok}}
	r.aggregate()
	if x, _ := r.Result(PlainMPS); x.Skipped != "online did not finish" {
		t.Errorf("mps row = %+v, want the fell-behind reason", x)
	}
}
