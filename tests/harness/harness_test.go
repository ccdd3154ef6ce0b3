package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/policy"
)

const minimal = `
duration = "10s"
[online]
rate = "diurnal"
min_qps = 10
max_qps = 100
[[offline]]
name = "job"
`

func TestParseScenario(t *testing.T) {
	s, err := ParseScenario([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	// Defaults fill what the file leaves out.
	if s.GPU != "h100" || s.Days != 1 || s.Online.Kernels != 4 || *s.Online.BW != 0.3 || s.Offline[0].Kernels != 10 || s.Muxflow.Period.D() != 100*time.Millisecond {
		t.Errorf("defaults not applied: %+v", s)
	}
	if got, want := s.RateSpec(), "diurnal:10:100:10"; got != want {
		t.Errorf("RateSpec = %q, want %q", got, want)
	}
	if c := s.Compression(); math.Abs(c-8640) > 1e-9 {
		t.Errorf("Compression = %v, want 8640 (a day in 10 s)", c)
	}
	// Trough at the start, peak half-way, as infer's diurnal trace.
	if a, b := s.RateAt(0), s.RateAt(5*time.Second); a != 10 || math.Abs(b-100) > 1e-9 {
		t.Errorf("RateAt(0), RateAt(5s) = %v, %v; want 10, 100", a, b)
	}
	short, err := s.WithDuration(4 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if short.RateSpec() != "diurnal:10:100:4" || s.Duration.D() != 10*time.Second {
		t.Errorf("WithDuration: %q (original now %v)", short.RateSpec(), s.Duration.D())
	}
	if _, err := s.WithDuration(time.Millisecond); err == nil {
		t.Error("WithDuration(1ms) accepted")
	}
}

func TestScenarioArgs(t *testing.T) {
	s, err := ParseScenario([]byte(`
duration = "20s"
days = 2
[online]
rate = "bursty"
min_qps = 50
max_qps = 500
burst_on = "200ms"
burst_every = "2s"
kernels = 2
grid = 1056
io_bytes = "1MiB"
[[offline]]
name = "a"
graph = true
mem = "2GiB"
batch = "1MiB"
bw = 0.9
[muxflow]
headroom = "15%"
offline_sm_max = "70%"
fit_min = "20%"
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--rate", "bursty:50:500:200:2000", "--duration", "20", "--kernels", "2", "--kernel-us", "250",
		"--grid", "1056", "--threads", "256", "--bw", "0.3", "--io-bytes", "1048576", "--seed", "1"}
	if d := cmp.Diff(want, s.InferArgs(20*time.Second)); d != "" {
		t.Errorf("InferArgs (-want +got):\n%s", d)
	}
	wantT := []string{"--duration", "3.5", "--kernels", "10", "--kernel-us", "500", "--big-share", "0.5", "--bw", "0.9",
		"--mem", "2147483648", "--batch", "1048576", "--graph"}
	if d := cmp.Diff(wantT, s.Offline[0].TrainArgs(3500*time.Millisecond)); d != "" {
		t.Errorf("TrainArgs (-want +got):\n%s", d)
	}
	if got := s.RateAt(100 * time.Millisecond); got != 500 {
		t.Errorf("in a burst RateAt = %v, want 500", got)
	}
	if got := s.RateAt(time.Second); got != 50 {
		t.Errorf("between bursts RateAt = %v, want 50", got)
	}
	if s.DayLength() != 10*time.Second {
		t.Errorf("DayLength = %v, want 10s (two days in 20s)", s.DayLength())
	}
	alloc := allocSection(s, false)
	for _, line := range []string{`mode = "dynamic"`, `day_length = "10s"`, `headroom = "15%"`, `period = "100ms"`, `fit_min = "20%"`} {
		if !strings.Contains(alloc, line) {
			t.Errorf("[alloc] lacks %s:\n%s", line, alloc)
		}
	}
	if !strings.Contains(allocSection(s, true), `mode = "static"`) {
		t.Error("static strategy does not set mode = static")
	}
}

func TestParseScenarioRejects(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"unknown key", minimal + "colour = 1\n", "unknown keys: offline.colour"},
		{"no duration", strings.Replace(minimal, `duration = "10s"`, "", 1), "duration"},
		{"bad gpu", "gpu = \"v100\"\n" + minimal, "not a gpusim profile"},
		{"bad rate", strings.Replace(minimal, `"diurnal"`, `"sine"`, 1), "online.rate"},
		{"min above max", strings.Replace(minimal, "min_qps = 10", "min_qps = 1000", 1), "above max_qps"},
		{"no offline", strings.Replace(minimal, "[[offline]]\nname = \"job\"\n", "", 1), "at least one"},
		{"bad name", strings.Replace(minimal, `name = "job"`, `name = "../x"`, 1), "name"},
		{"bw above 1", minimal + "bw = 1.5\n", "bw"},
		{"batch above mem", minimal + "mem = \"1MiB\"\nbatch = \"2MiB\"\n", "batch 2097152 bytes is larger than mem"},
		{"negative kernels", minimal + "kernels = -1\n", "kernels"},
		{"burst without bursty", strings.Replace(minimal, "max_qps = 100", "max_qps = 100\nburst_on = \"1s\"", 1), "bursty"},
		{"bursty without shape", strings.Replace(minimal, `"diurnal"`, `"bursty"`, 1), "burst_on"},
		{"percent without sign", minimal + "[muxflow]\nheadroom = \"10\"\n", "must end in %"},
		{"headroom too big", minimal + "[muxflow]\nheadroom = \"60%\"\n", "headroom"},
		{"bad duration", strings.Replace(minimal, `"10s"`, `"ten"`, 1), "duration"},
		{"zero days", "days = -1\n" + minimal, "days"},
		{"duplicate job", minimal + "[[offline]]\nname = \"job\"\n", "twice"},
		{"not toml", "duration = [", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseScenario([]byte(tc.text))
			if err == nil {
				t.Fatalf("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestShippedScenariosLoad(t *testing.T) {
	files, err := filepath.Glob("../scenarios/*.toml")
	if err != nil || len(files) < 3 {
		t.Fatalf("want at least three shipped scenarios, found %v (%v)", files, err)
	}
	probes, err := filepath.Glob("../scenarios/probes/*.toml")
	if err != nil || len(probes) == 0 {
		t.Fatalf("want the probe scenarios, found %v (%v)", probes, err)
	}
	for _, f := range append(files, probes...) {
		s, err := LoadScenario(f)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if s.Name != strings.TrimSuffix(filepath.Base(f), ".toml") {
			t.Errorf("%s: name %q differs from the file's", f, s.Name)
		}
	}
	if _, err := LoadScenario("no/such.toml"); err == nil {
		t.Error("a missing file loaded")
	}
}

func TestParseStrategies(t *testing.T) {
	got, err := ParseStrategies("muxflow, mps,muxflow")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]Strategy{Muxflow, PlainMPS}, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if all, _ := ParseStrategies("all"); len(all) != 6 {
		t.Errorf("all = %v", all)
	}
	if _, err := ParseStrategies("mps,fastest"); err == nil || !strings.Contains(err.Error(), "fastest") {
		t.Errorf("unknown strategy: %v", err)
	}
}

func testReport() *Report {
	s, _ := ParseScenario([]byte(minimal))
	s.Name = "t"
	nan := math.NaN()
	var samples []Sample
	for i := range 10 {
		samples = append(samples, Sample{T: time.Duration(i+1) * time.Second, OnlineQPS: float64(10 * i), OnlineGPUms: 1 + float64(i)/10,
			Util: 0.5, SMActivity: 0.2, OfflineShare: 80 - float64(5*i), OnlineDemand: float64(5 * i)})
	}
	samples[3].OnlineGPUms = nan
	r := &Report{Scenario: s, Passes: []Pass{{
		OfflineAlone: []float64{100},
		Results: []Result{
			{Strategy: OnlineAlone, ReqP50: 1.5, ReqP99: 3, GPUP50: 1, GPUP99: 2, BusyPerRequest: 1, Util: 0.2, SMActivity: 0.05, Samples: samples},
			{Strategy: PriorityTimeSharing, Skipped: "not simulated"},
			{Strategy: Muxflow, ReqP50: 2, ReqP99: 6, GPUP50: 1.1, GPUP99: 2.2, BusyPerRequest: 1.05, OfflineItPerS: []float64{60}, OfflineNorm: 0.6,
				Util: 0.7, SMActivity: 0.4, Errors: 1, Evictions: 2, Samples: samples, Notes: []string{"something odd"}},
		},
	}}}
	r.aggregate()
	return r
}

func TestAggregate(t *testing.T) {
	// Three passes: medians of figures, paired ratios, summed errors. The GPU-side p99s
	// rank the passes differently from the request p99s: the timeline must come from
	// the pass at the median request p99 (k = 2), not at the median GPU p99 (k = 1).
	r := &Report{}
	gpu := map[float64]float64{1: 5, 3: 1, 2: 9}
	for _, k := range []float64{1, 3, 2} {
		r.Passes = append(r.Passes, Pass{OfflineAlone: []float64{100 * k}, Results: []Result{
			{Strategy: OnlineAlone, ReqP99: k, GPUP99: 1, Util: 0.1 * k, BusyPerRequest: 1},
			{Strategy: PriorityTimeSharing, Skipped: "no"},
			{Strategy: Muxflow, ReqP50: k, ReqP99: 1.1 * k, GPUP99: gpu[k], Util: 0.5 * k, BusyPerRequest: 1, OfflineItPerS: []float64{60 * k}, OfflineNorm: 0.6,
				Errors: 1, Samples: []Sample{{T: time.Duration(k)}}},
		}})
	}
	r.aggregate()
	mux, _ := r.Result(Muxflow)
	if mux.ReqP99 != 2.2 || mux.ReqP50 != 2 || mux.GPUP99 != 5 || mux.Errors != 3 || mux.OfflineItPerS[0] != 120 || r.OfflineAlone[0] != 200 || mux.Samples[0].T != 2 {
		t.Errorf("aggregate: %+v, alone %v", mux, r.OfflineAlone)
	}
	if p, _ := r.Result(PriorityTimeSharing); p.Skipped == "" {
		t.Error("a skipped strategy lost its reason")
	}
	if got := r.ratio(Muxflow, func(x Result) float64 { return x.ReqP99 }); math.Abs(got-1.1) > 1e-9 {
		t.Errorf("paired p99 ratio = %v, want 1.1", got)
	}
	if got := r.ratio(Muxflow, func(x Result) float64 { return x.Util }); math.Abs(got-5) > 1e-9 {
		t.Errorf("paired util ratio = %v, want 5", got)
	}
	if got := r.ratio(PlainMPS, func(x Result) float64 { return x.Util }); !math.IsNaN(got) {
		t.Errorf("ratio of a strategy that did not run = %v", got)
	}
	if got := median([]float64{4, 1, 3, 2}, func(x float64) float64 { return x }); got != 2.5 {
		t.Errorf("median = %v", got)
	}
}

func TestRows(t *testing.T) {
	// p50/p99 and p99 ÷ alone are request latency; GPU p50/p99 follow.
	want := []Row{
		{"online-alone", "1.50", "3.00", "1.00×", "1.00", "2.00", "1.00×", "-", "20%", "1.00×", "0.05", "0", "0"},
		{"priority-time-sharing", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a"},
		{"muxflow", "2.00", "6.00", "2.00×", "1.10", "2.20", "1.05×", "0.60", "70%", "3.50×", "0.40", "1", "2"},
	}
	if d := cmp.Diff(want, testReport().Rows()); d != "" {
		t.Errorf("rows (-want +got):\n%s", d)
	}
	for _, row := range want {
		if len(row) != len(tableHeader) {
			t.Errorf("row %v has %d cells for %d columns", row[0], len(row), len(tableHeader))
		}
	}
	if tableHeader[colOfflineNorm] != "offline norm." {
		t.Errorf("colOfflineNorm points at %q", tableHeader[colOfflineNorm])
	}
	var b bytes.Buffer
	testReport().WriteTable(&b)
	for _, s := range []string{"p99 ÷ alone", "GPU p99 ms", "queueing included", "offline alone: job 100.0 it/s", "priority-time-sharing: n/a — not simulated", "muxflow: something odd"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, b.String())
		}
	}
	b.Reset()
	testReport().WriteMarkdown(&b)
	if !strings.Contains(b.String(), "| muxflow | 2.00 | 6.00 | 2.00× | 1.10 | 2.20 |") {
		t.Errorf("markdown table:\n%s", b.String())
	}
}

func TestPlot(t *testing.T) {
	r := testReport()
	panels, err := r.TimelinePanels(Muxflow)
	if err != nil {
		t.Fatal(err)
	}
	if len(panels) != 3 || len(panels[2].Series) != 2 {
		t.Fatalf("want 3 panels, the last with the online-alone baseline: %+v", panels)
	}
	var b bytes.Buffer
	if err := WritePNG(&b, "test", panels); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&b)
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds().Dx() != plotW {
		t.Errorf("width %d", img.Bounds().Dx())
	}
	if _, err := r.TimelinePanels(PlainMPS); err == nil {
		t.Error("plotted a strategy that did not run")
	}
	if _, err := r.TimelinePanels(PriorityTimeSharing); err == nil {
		t.Error("plotted a skipped strategy")
	}
	if err := WritePNG(&b, "empty", nil); err == nil {
		t.Error("plotted nothing without an error")
	}
}

// TestPlotCeilingChanges: with muxd's ceiling changes, the shares panel draws the
// ceiling as steps through every change and marks each change with its reason.
func TestPlotCeilingChanges(t *testing.T) {
	r := testReport()
	for i := range r.Results {
		if r.Results[i].Strategy == Muxflow {
			r.Results[i].Changes = []CeilingChange{
				{T: 300 * time.Millisecond, From: 70, To: 30, Demand: 60, Reason: "burst"},
				{T: 700 * time.Millisecond, From: 30, To: 70, Demand: 8, Reason: "burst over"},
				{T: 900 * time.Millisecond, From: 70, To: 60, Demand: 20, Reason: "calm/fallback"},
			}
		}
	}
	panels, err := r.TimelinePanels(Muxflow)
	if err != nil {
		t.Fatal(err)
	}
	p := panels[1]
	if !strings.Contains(p.Title, "reason") || len(p.Markers) != 3 {
		t.Fatalf("shares panel: %+v", p)
	}
	var labels []string
	for _, m := range p.Markers {
		labels = append(labels, m.Label)
	}
	if d := cmp.Diff([]string{"burst", "burst over", "fallback"}, labels); d != "" {
		t.Errorf("marker labels (-want +got):\n%s", d)
	}
	ceil := p.Series[0]
	if ceil.Name != "offline ceiling" || ceil.V[0] != 70 || !slices.Contains(ceil.V, 30) || ceil.V[len(ceil.V)-1] != 60 {
		t.Errorf("ceiling steps %v", ceil.V)
	}
	var b bytes.Buffer
	if err := WritePNG(&b, "changes", panels); err != nil {
		t.Fatal(err)
	}
}

func TestLastJSON(t *testing.T) {
	o := parseInfer("warning: x\n{\"requests\":10,\"errors\":1,\"req_p50_ms\":4,\"req_p99_ms\":900.5,\"p99_ms\":950,\"gpu_p99_ms\":2.5}\ntrailing noise\n")
	if !o.ok || o.Requests != 10 || o.Errors != 1 || o.GPUP99 != 2.5 || o.P99 != 950 ||
		o.ReqP50 == nil || *o.ReqP50 != 4 || o.ReqP99 == nil || *o.ReqP99 != 900.5 {
		t.Errorf("parseInfer = %+v", o)
	}
	// An infer that does not print request latency is told apart from one that
	// measured 0 ms.
	if o := parseInfer(`{"requests":10,"gpu_p99_ms":2.5}`); !o.ok || o.ReqP50 != nil || o.ReqP99 != nil {
		t.Errorf("parseInfer without req_*: %+v", o)
	}
	if parseTrain("no json here").ok {
		t.Error("parsed JSON from plain text")
	}
}

func TestRunCommandLine(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("duration = \"1ms\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "the commands are `run` and `gen`"},
		{[]string{"go"}, "the commands are"},
		{[]string{"gen", "--seed", "x", dir}, "invalid value"},
		{[]string{"run"}, "at least one scenario"},
		{[]string{"run", "--strategies", "best", bad}, "unknown strategy"},
		{[]string{"run", bad}, "duration"},
		{[]string{"run", filepath.Join(dir, "missing.toml")}, "read scenario"},
		{[]string{"run", "../scenarios/diurnal.toml", "--duration", "-1s"}, "negative"},
		{[]string{"run", "--nope"}, "not defined"},
		{[]string{"run", "--repeat", "0", "../scenarios/diurnal.toml"}, "--repeat"},
		{[]string{"run", "--stall-reruns", "-1", "../scenarios/diurnal.toml"}, "--stall-reruns"},
		{[]string{"run", "--stall-reruns", "6", "../scenarios/diurnal.toml"}, "--stall-reruns"},
		{[]string{"run", "--op-trace", "../scenarios/diurnal.toml"}, "--op-trace needs --logs"},
	} {
		var out, errb bytes.Buffer
		err := Run(context.Background(), tc.args, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%q) = %v, want an error about %q", tc.args, err, tc.want)
		}
	}
}

func TestParseTrace(t *testing.T) {
	reqs, err := ParseTrace(strings.NewReader("start_s,latency_ms,gpu_ms,req_ms\n0.5,3,1,1\n1.5,4,2,2.5\n# comment\n1.7,9,3,7\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Request{{500 * time.Millisecond, 3, 1, 1}, {1500 * time.Millisecond, 4, 2, 2.5}, {1700 * time.Millisecond, 9, 3, 7}}
	if d := cmp.Diff(want, reqs); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	for _, bad := range []string{"1,2,3,-4\n", "1,2,3\n", "1,2,x,4\n"} {
		if _, err := ParseTrace(strings.NewReader(bad)); err == nil {
			t.Errorf("trace %q was accepted", bad)
		}
	}
	ends := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}
	p50, p99 := windowPercentiles(reqs, ends, func(q Request) float64 { return q.ReqMs })
	if p50[0] != 1 || p99[0] != 1 || p50[1] != 2.5 || p99[1] != 7 || !math.IsNaN(p50[2]) {
		t.Errorf("window percentiles of request latency p50 %v p99 %v", p50, p99)
	}
	if _, g99 := windowPercentiles(reqs, ends, func(q Request) float64 { return q.GPUMs }); g99[1] != 3 {
		t.Errorf("window p99 of GPU time %v", g99)
	}
	if got := percentile([]float64{5, 1, 4, 2, 3}, 50); got != 3 {
		t.Errorf("median of 1..5 = %v", got)
	}
	// With a trace, the latency panel shows per-period percentiles of request latency,
	// the GPU-side p99 beside them, and the alone request p99.
	r := testReport()
	r.Results[2].Trace = reqs
	panels, err := r.TimelinePanels(Muxflow)
	if err != nil {
		t.Fatal(err)
	}
	got := panels[2].Series
	if len(got) != 4 || got[0].Name != "p99" || got[0].V[1] != 7 || got[2].Name != "GPU-side p99" || got[2].V[1] != 3 ||
		!got[3].Dashed || got[3].V[0] != 3 {
		t.Errorf("latency panel with a trace: %+v", got)
	}
}

// requestLatencies rebuilds each request's latency from its scheduled arrival and its
// GPU-side time as infer is documented to (a FIFO single server: f_i = max(a_i,
// f_{i-1}) + g_i, latency f_i − a_i), in ms; requests in arrival order.
func requestLatencies(reqs []Request) []float64 {
	out := make([]float64, len(reqs))
	var finish float64 // seconds
	for i, r := range reqs {
		a := r.Start.Seconds()
		finish = math.Max(a, finish) + r.GPUMs/1000
		out[i] = (finish - a) * 1000
	}
	return out
}

func TestRequestLatencies(t *testing.T) {
	ms := time.Millisecond
	// Service 4 ms; arrivals at 0, 1, 2 ms queue up (4, 7, 10 ms); one at 20 ms finds
	// the server idle (4 ms); one at 21 ms with 1 ms of service waits 3 ms (4 ms).
	reqs := []Request{{Start: 0, GPUMs: 4}, {Start: ms, GPUMs: 4}, {Start: 2 * ms, GPUMs: 4}, {Start: 20 * ms, GPUMs: 4}, {Start: 21 * ms, GPUMs: 1}}
	got := requestLatencies(reqs)
	want := []float64{4, 7, 10, 4, 4}
	if d := cmp.Diff(want, got, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-9 })); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// Every compressed day a scenario may ask for gives muxd a policy it accepts: a day too
// short to learn from is given as a real one (muxexp once stopped with "muxd exited
// during start-up" on two days in a 6 s run).
func TestAllocSectionShortDays(t *testing.T) {
	for _, days := range []string{"1", "2", "30", "1000"} {
		s, err := ParseScenario([]byte("days = " + days + "\n" + minimal))
		if err != nil {
			t.Fatal(err)
		}
		if s, err = s.WithDuration(6 * time.Second); err != nil {
			t.Fatal(err)
		}
		for _, static := range []bool{false, true} {
			text := fmt.Sprintf(muxdPolicy, "/state", "/run", "/run/muxd.sock", "/bin/mps", "/pipe", "/log", allocSection(s, static), "")
			p, err := policy.Parse([]byte(text), "policy.toml")
			if err != nil {
				t.Errorf("days = %s: muxd refuses the policy: %v", days, err)
				continue
			}
			want := s.DayLength()
			if want < policy.MinDayLength(100*time.Millisecond) {
				want = 24 * time.Hour
			}
			if got := p.Alloc.DayLength.D(); got != want {
				t.Errorf("days = %s: day_length %v, want %v", days, got, want)
			}
		}
	}
}

// gpusimd's own stalls are noted from 1% of the window: not for a stall now and then.
func TestStallNote(t *testing.T) {
	w := 12 * time.Second
	for _, tc := range []struct {
		stalls    int
		stalledMs float64
		want      bool
	}{
		{0, 0, false},
		{1, 3, false},    // one 3 ms stall in 12 s: noise
		{20, 119, false}, // just under 1%
		{43, 674, true},  // the h100-six probe before gpusimd got faster
	} {
		n := stallNote(tc.stalls, tc.stalledMs, 75, w)
		if (n != "") != tc.want {
			t.Errorf("%d stalls, %.0f ms in 12 s: note %q, want one: %v", tc.stalls, tc.stalledMs, n, tc.want)
		}
		if n != "" && !strings.Contains(n, fmt.Sprintf("stalled %d times", tc.stalls)) {
			t.Errorf("note %q does not give the count", n)
		}
	}
}

func TestRerunStalled(t *testing.T) {
	w := 12 * time.Second
	stalled := Result{ReqP99: 9, SimStalls: 36, SimStalledMs: 127, Window: w}
	clean := Result{ReqP99: 2, SimStalls: 1, SimStalledMs: 3, Window: w}
	boom := errors.New("node did not start")
	for _, tc := range []struct {
		name   string
		first  Result
		err    error
		reruns int
		runs   []Result // what each re-run returns
		runErr error
		want   float64 // the reported run's p99
		calls  int
		note   string
	}{
		{"clean run kept", clean, nil, 1, []Result{stalled}, nil, 2, 0, ""},
		{"stalled run replaced", stalled, nil, 1, []Result{clean}, nil, 2, 1, "run 2 times"},
		{"reruns off", stalled, nil, 0, []Result{clean}, nil, 9, 0, ""},
		// The last run is kept even when it stalled too: a strategy that always stalls
		// the simulator must still say so.
		{"stalled again", stalled, nil, 1, []Result{stalled}, nil, 9, 1, "run 1 stalled gpusimd 36 times (127 ms)"},
		{"second rerun clean", stalled, nil, 2, []Result{stalled, clean}, nil, 2, 2, "run 3 times"},
		{"first run failed", stalled, boom, 1, []Result{clean}, nil, 9, 0, ""},
		{"rerun failed", stalled, nil, 1, []Result{clean}, boom, 2, 1, ""},
	} {
		calls := 0
		got, err := rerunStalled(tc.first, tc.err, tc.reruns, func(k int) (Result, error) {
			calls++
			if k != calls {
				t.Errorf("%s: re-run numbered %d, want %d", tc.name, k, calls)
			}
			return tc.runs[k-1], tc.runErr
		})
		if calls != tc.calls || got.ReqP99 != tc.want {
			t.Errorf("%s: %d re-runs reporting p99 %v, want %d reporting %v", tc.name, calls, got.ReqP99, tc.calls, tc.want)
		}
		if wantErr := tc.err != nil || tc.runErr != nil; (err != nil) != wantErr {
			t.Errorf("%s: error %v", tc.name, err)
		}
		notes := strings.Join(got.Notes, "\n")
		if tc.note == "" && notes != "" || !strings.Contains(notes, tc.note) {
			t.Errorf("%s: notes %q, want one containing %q", tc.name, notes, tc.note)
		}
	}
}

func TestPolicySectionsParse(t *testing.T) {
	s, err := ParseScenario([]byte(minimal + `[muxflow]
offline_sm_max = "60%"
hold_queue = "200us"
hold_linger = "1ms"
hold_period = "50ms"
hold_max = "90%"
kernel_risk = "30s"
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse([]byte(policySections(s)), "scenario")
	if err != nil {
		t.Fatalf("the scenario's policy sections do not parse: %v\n%s", err, policySections(s))
	}
	got := []any{float64(p.Classes.Offline.SMMax), p.Hold.Queue.D(), p.Hold.Linger.D(),
		p.Hold.Period.D(), float64(p.Hold.Max), p.Evict.KernelRisk.D(), p.Evict.ContainerdAddress}
	want := []any{60.0, 200 * time.Microsecond, time.Millisecond, 50 * time.Millisecond, 90.0, 30 * time.Second, ""}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("policy (-want +got):\n%s", d)
	}
}

// The containers muxd named as a kernel risk in any pass reach the table, once each with
// their latest report.
func TestKernelRisksInTable(t *testing.T) {
	risk := func(ms float64) api.KernelRisk {
		return api.KernelRisk{ID: "j0", OfflineKernel: time.Duration(ms * 1e6), OfflinePerLaunch: time.Duration(ms * 1e6), OnlineRequest: 240 * time.Microsecond, Ratio: ms / 0.24}
	}
	s, _ := ParseScenario([]byte(minimal))
	r := &Report{Scenario: s}
	for _, rs := range [][]api.KernelRisk{{risk(2)}, nil, {risk(3)}} {
		r.Passes = append(r.Passes, Pass{OfflineAlone: []float64{100}, Results: []Result{
			{Strategy: OnlineAlone, ReqP99: 1},
			{Strategy: Muxflow, ReqP99: 3, OfflineItPerS: []float64{50}, KernelRisks: rs},
		}})
	}
	r.aggregate()
	var out strings.Builder
	r.WriteTable(&out)
	if n := strings.Count(out.String(), "at risk: offline j0"); n != 1 || !strings.Contains(out.String(), "muxflow: muxd said the online requests are at risk: offline j0: a request that meets one of its kernels waits for up to 3ms") {
		t.Errorf("%d risk lines, want one with the latest report:\n%s", n, out.String())
	}
}
