package harness

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Row is one strategy's line of the comparison table, already formatted.
type Row []string

// tableHeader names the columns. p50/p99 (and p99 ÷ alone) are the online service's
// request latency, arrival to completion with queueing included; GPU p50/p99 its
// GPU-side time per request alone.
var tableHeader = Row{"strategy", "p50 ms", "p99 ms", "p99 ÷ alone", "GPU p50 ms", "GPU p99 ms", "busy ÷ alone", "offline norm.", "GPU util", "util ÷ alone", "SM activity", "errors", "evictions"}

// colOfflineNorm is the index of "offline norm." in tableHeader.
const colOfflineNorm = 7

// Rows formats the report's results; ratios are against online-alone, taken within
// each pass (medians over passes when repeated).
func (r *Report) Rows() []Row {
	var rows []Row
	f := func(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	ratio := func(st Strategy, g func(Result) float64) string {
		v := r.ratio(st, g)
		if math.IsNaN(v) {
			return "-"
		}
		return f(v, 2) + "×"
	}
	for _, x := range r.Results {
		if x.Skipped != "" {
			row := Row{string(x.Strategy)}
			for range tableHeader[1:] {
				row = append(row, "n/a")
			}
			rows = append(rows, row)
			continue
		}
		row := Row{string(x.Strategy), f(x.ReqP50, 2), f(x.ReqP99, 2),
			ratio(x.Strategy, func(y Result) float64 { return y.ReqP99 }),
			f(x.GPUP50, 2), f(x.GPUP99, 2),
			ratio(x.Strategy, func(y Result) float64 { return y.BusyPerRequest }), "-",
			f(100*x.Util, 0) + "%", ratio(x.Strategy, func(y Result) float64 { return y.Util }),
			f(x.SMActivity, 2), strconv.Itoa(x.Errors), strconv.Itoa(x.Evictions)}
		if len(x.OfflineItPerS) > 0 && len(r.OfflineAlone) == len(x.OfflineItPerS) {
			row[colOfflineNorm] = f(x.OfflineNorm, 2)
		}
		rows = append(rows, row)
	}
	return rows
}

// WriteTable prints the comparison as an aligned text table with a short legend.
func (r *Report) WriteTable(w io.Writer) {
	s := r.Scenario
	fmt.Fprintf(w, "scenario %s: %s on a simulated %s, %v per run, %s, 1 s = %.0f s of a day\n\n",
		s.Name, s.Online.Rate, strings.ToUpper(s.GPU), s.Duration.D(), s.RateSpec(), s.Compression())
	rows := append([]Row{tableHeader}, r.Rows()...)
	width := make([]int, len(tableHeader))
	for _, row := range rows {
		for i, c := range row {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	for k, row := range rows {
		var b strings.Builder
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			if i == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString("  " + pad + c)
			}
		}
		fmt.Fprintln(w, b.String())
		if k == 0 {
			fmt.Fprintln(w, strings.Repeat("-", len([]rune(b.String()))))
		}
	}
	fmt.Fprintln(w)
	r.writeLegend(w, "")
}

// WriteMarkdown prints the comparison as a Markdown table with the same legend.
func (r *Report) WriteMarkdown(w io.Writer) {
	fmt.Fprintln(w, "| "+strings.Join(tableHeader, " | ")+" |")
	sep := make([]string, len(tableHeader))
	for i := range sep {
		sep[i] = "---:"
	}
	sep[0] = "---"
	fmt.Fprintln(w, "|"+strings.Join(sep, "|")+"|")
	for _, row := range r.Rows() {
		fmt.Fprintln(w, "| "+strings.Join(row, " | ")+" |")
	}
	fmt.Fprintln(w)
	r.writeLegend(w, "- ")
}

func (r *Report) writeLegend(w io.Writer, bullet string) {
	var alone []string
	for i, v := range r.OfflineAlone {
		alone = append(alone, fmt.Sprintf("%s %.1f it/s", r.Scenario.Offline[i].Name, v))
	}
	if len(alone) > 0 {
		fmt.Fprintf(w, "%soffline alone: %s (the normaliser of \"offline norm.\")\n", bullet, strings.Join(alone, ", "))
	}
	fmt.Fprintf(w, "%sp50/p99: the online service's request latency, arrival to completion with queueing included (a FIFO queue rebuilt from scheduled arrivals and GPU-side times, free of host noise); GPU p50/p99: GPU-side time per request alone (its events; waits for SMs or time slices included, queueing not); busy: its mean kernel time per request (gpusim counters)\n", bullet)
	var host []string
	for _, x := range r.Results {
		if x.Skipped == "" {
			host = append(host, fmt.Sprintf("%s %.1f/%.1f", x.Strategy, x.HostP50, x.HostP99))
		}
	}
	if len(host) > 0 {
		fmt.Fprintf(w, "%shost-clock p50/p99 ms (arrival to completion by the client's wall clock: queueing plus this machine's CPU contention and the fake driver's round trips): %s\n", bullet, strings.Join(host, ", "))
	}
	for _, x := range r.Results {
		if x.Skipped != "" {
			fmt.Fprintf(w, "%s%s: n/a — %s\n", bullet, x.Strategy, x.Skipped)
		}
		for _, n := range x.Notes {
			fmt.Fprintf(w, "%s%s: %s\n", bullet, x.Strategy, n)
		}
		for _, k := range x.KernelRisks {
			its := ""
			if c, ok := x.Confinement[k.ID]; ok {
				its = "; its libxcuda: " + c
			}
			fmt.Fprintf(w, "%s%s: muxd said the online requests are at risk: offline %s: %s%s\n", bullet, x.Strategy, k.ID, k, its)
		}
	}
	if len(r.Passes) > 1 {
		fmt.Fprintf(w, "%smedians of %d passes (ratios: median of each pass's ratio to its own online-alone run); errors and evictions: totals\n", bullet, len(r.Passes))
	}
	fmt.Fprintf(w, "%sall runs took %v\n", bullet, r.Elapsed.Round(time.Second))
}
