package calibration

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable prints one row a point: source, published ratio, gpusim's
// ratio and the error, and returns how many points are off by more than
// Tolerance.
func WriteTable(w io.Writer, rs []Result) int {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "point\tpublished\tgpusim\terror\t\tsource\t")
	bad := 0
	for _, r := range rs {
		verdict := "ok"
		if !r.OK() {
			verdict = "OFF"
			bad++
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%+.0f%%\t%s\t%s\t\n", r.ID, r.Published, r.Ratio, 100*r.Err, verdict, r.Source)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d of %d points within ±%.0f%%\n", len(rs)-bad, len(rs), 100*Tolerance)
	return bad
}
