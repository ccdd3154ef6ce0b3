package harness

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// The online-protection targets a scenario's report is checked against (issue 14):
// medians of the passes, ratios to online-alone in the same pass.
const (
	// TargetP99 is the most muxflow's online request p99 may be, as a multiple of alone.
	TargetP99 = 1.10
	// TargetOffline is the least offline normalised throughput muxflow must give where
	// the online service alone uses at most TargetOfflineUtil of the GPU.
	TargetOffline     = 0.40
	TargetOfflineUtil = 0.50
	// TargetDynamicGain is how much more offline throughput dynamic allocation must
	// give than the static share, at equal or better p99.
	TargetDynamicGain = 0.25
)

// Check is one target applied to one report.
type Check struct {
	Target string
	// Value is the measured figure, formatted; Met is "yes", "no" or "n/a" (the target
	// does not apply, or a strategy it needs did not run).
	Value, Met string
}

// Targets checks the report against the targets above. A target that needs a strategy
// the report lacks is "n/a".
func (r *Report) Targets() []Check {
	res := func(s Strategy) (Result, bool) {
		x, ok := r.Result(s)
		return x, ok && x.Skipped == ""
	}
	p99 := func(s Strategy) float64 { return r.ratio(s, func(x Result) float64 { return x.ReqP99 }) }
	yes := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "no"
	}
	var out []Check
	mux, haveMux := res(Muxflow)
	muxP99 := p99(Muxflow)
	if haveMux && !math.IsNaN(muxP99) {
		out = append(out, Check{fmt.Sprintf("muxflow p99 ≤ %.2f× alone", TargetP99),
			fmt.Sprintf("%.2f×", muxP99), yes(muxP99 <= TargetP99)})
	} else {
		out = append(out, Check{fmt.Sprintf("muxflow p99 ≤ %.2f× alone", TargetP99), "-", "n/a"})
	}
	alone, haveAlone := res(OnlineAlone)
	c := Check{Target: fmt.Sprintf("muxflow offline ≥ %.2f where alone uses ≤ %.0f%%", TargetOffline, 100*TargetOfflineUtil), Value: "-", Met: "n/a"}
	if haveMux && haveAlone {
		c.Value = fmt.Sprintf("%.2f (alone %.0f%%)", mux.OfflineNorm, 100*alone.Util)
		if alone.Util <= TargetOfflineUtil {
			c.Met = yes(mux.OfflineNorm >= TargetOffline)
		}
	}
	out = append(out, c)
	for _, base := range []Strategy{PlainMPS, StaticShare} {
		c := Check{Target: fmt.Sprintf("muxflow p99 below %s's where that exceeds %.2f×", base, TargetP99), Value: "-", Met: "n/a"}
		bp := p99(base)
		if _, ok := res(base); ok && haveMux && !math.IsNaN(bp) && !math.IsNaN(muxP99) {
			c.Value = fmt.Sprintf("%.2f× vs %.2f×", muxP99, bp)
			if bp > TargetP99 {
				c.Met = yes(muxP99 < bp)
			}
		}
		out = append(out, c)
	}
	c = Check{Target: fmt.Sprintf("dynamic ≥ +%.0f%% offline over static at equal or better p99", 100*TargetDynamicGain), Value: "-", Met: "n/a"}
	if st, ok := res(StaticShare); ok && haveMux && st.OfflineNorm > 0 {
		gain := mux.OfflineNorm/st.OfflineNorm - 1
		sp := p99(StaticShare)
		c.Value = fmt.Sprintf("%+.0f%%, p99 %.2f× vs %.2f×", 100*gain, muxP99, sp)
		// "Equal" p99 within the noise a median of passes leaves: 5% of alone.
		c.Met = yes(gain >= TargetDynamicGain && muxP99 <= sp+0.05)
	}
	out = append(out, c)
	return out
}

// WriteTargets prints the checks as a Markdown table (markdown) or aligned text.
func (r *Report) WriteTargets(w io.Writer, markdown bool) {
	checks := r.Targets()
	if markdown {
		fmt.Fprintln(w, "| target | measured | met |")
		fmt.Fprintln(w, "|---|---|---|")
		for _, c := range checks {
			fmt.Fprintf(w, "| %s | %s | %s |\n", c.Target, c.Value, c.Met)
		}
		fmt.Fprintln(w)
		return
	}
	width := 0
	for _, c := range checks {
		width = max(width, len([]rune(c.Target)))
	}
	fmt.Fprintln(w, "targets:")
	for _, c := range checks {
		pad := strings.Repeat(" ", width-len([]rune(c.Target)))
		fmt.Fprintf(w, "  %s%s  %-4s %s\n", c.Target, pad, c.Met, c.Value)
	}
	fmt.Fprintln(w)
}
