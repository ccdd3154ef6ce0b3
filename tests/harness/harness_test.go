package harness

import (
	"bytes"
	"context"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
bw = 0.9
[muxflow]
headroom = "15%"
offline_sm_max = "70%"
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
		"--mem", "2147483648", "--graph"}
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
	for _, line := range []string{`mode = "dynamic"`, `day_length = "10s"`, `headroom = "15%"`, `period = "100ms"`} {
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
	for _, f := range files {
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
			{Strategy: OnlineAlone, GPUP50: 1, GPUP99: 2, BusyPerRequest: 1, Util: 0.2, SMActivity: 0.05, Samples: samples},
			{Strategy: PriorityTimeSharing, Skipped: "not simulated"},
			{Strategy: Muxflow, GPUP50: 1.1, GPUP99: 2.2, BusyPerRequest: 1.05, OfflineItPerS: []float64{60}, OfflineNorm: 0.6,
				Util: 0.7, SMActivity: 0.4, Errors: 1, Evictions: 2, Samples: samples, Notes: []string{"something odd"}},
		},
	}}}
	r.aggregate()
	return r
}

func TestAggregate(t *testing.T) {
	// Three passes: medians of figures, paired ratios, summed errors.
	r := &Report{}
	for _, k := range []float64{1, 3, 2} {
		r.Passes = append(r.Passes, Pass{OfflineAlone: []float64{100 * k}, Results: []Result{
			{Strategy: OnlineAlone, GPUP99: k, Util: 0.1 * k, BusyPerRequest: 1},
			{Strategy: PriorityTimeSharing, Skipped: "no"},
			{Strategy: Muxflow, GPUP99: 1.1 * k, Util: 0.5 * k, BusyPerRequest: 1, OfflineItPerS: []float64{60 * k}, OfflineNorm: 0.6,
				Errors: 1, Samples: []Sample{{T: time.Duration(k)}}},
		}})
	}
	r.aggregate()
	mux, _ := r.Result(Muxflow)
	if mux.GPUP99 != 2.2 || mux.Errors != 3 || mux.OfflineItPerS[0] != 120 || r.OfflineAlone[0] != 200 || mux.Samples[0].T != 2 {
		t.Errorf("aggregate: %+v, alone %v", mux, r.OfflineAlone)
	}
	if p, _ := r.Result(PriorityTimeSharing); p.Skipped == "" {
		t.Error("a skipped strategy lost its reason")
	}
	if got := r.ratio(Muxflow, func(x Result) float64 { return x.GPUP99 }); math.Abs(got-1.1) > 1e-9 {
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
	want := []Row{
		{"online-alone", "1.00", "2.00", "1.00×", "1.00×", "-", "20%", "1.00×", "0.05", "0", "0"},
		{"priority-time-sharing", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a"},
		{"muxflow", "1.10", "2.20", "1.10×", "1.05×", "0.60", "70%", "3.50×", "0.40", "1", "2"},
	}
	if d := cmp.Diff(want, testReport().Rows()); d != "" {
		t.Errorf("rows (-want +got):\n%s", d)
	}
	var b bytes.Buffer
	testReport().WriteTable(&b)
	for _, s := range []string{"p99 ÷ alone", "offline alone: job 100.0 it/s", "priority-time-sharing: n/a — not simulated", "muxflow: something odd"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, b.String())
		}
	}
	b.Reset()
	testReport().WriteMarkdown(&b)
	if !strings.Contains(b.String(), "| muxflow | 1.10 | 2.20 | 1.10× |") {
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

func TestLastJSON(t *testing.T) {
	o := parseInfer("warning: x\n{\"requests\":10,\"errors\":1,\"gpu_p99_ms\":2.5}\ntrailing noise\n")
	if !o.ok || o.Requests != 10 || o.Errors != 1 || o.GPUP99 != 2.5 {
		t.Errorf("parseInfer = %+v", o)
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
		{nil, "only command"},
		{[]string{"go"}, "only command"},
		{[]string{"run"}, "at least one scenario"},
		{[]string{"run", "--strategies", "best", bad}, "unknown strategy"},
		{[]string{"run", bad}, "duration"},
		{[]string{"run", filepath.Join(dir, "missing.toml")}, "read scenario"},
		{[]string{"run", "../scenarios/diurnal.toml", "--duration", "-1s"}, "negative"},
		{[]string{"run", "--nope"}, "not defined"},
		{[]string{"run", "--repeat", "0", "../scenarios/diurnal.toml"}, "--repeat"},
	} {
		var out, errb bytes.Buffer
		err := Run(context.Background(), tc.args, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%q) = %v, want an error about %q", tc.args, err, tc.want)
		}
	}
}

func TestParseTrace(t *testing.T) {
	reqs, err := ParseTrace(strings.NewReader("start_s,latency_ms,gpu_ms\n0.5,3,1\n1.5,4,2\n# comment\n1.7,9,3\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Request{{500 * time.Millisecond, 3, 1}, {1500 * time.Millisecond, 4, 2}, {1700 * time.Millisecond, 9, 3}}
	if d := cmp.Diff(want, reqs); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if _, err := ParseTrace(strings.NewReader("1,-2,3\n")); err == nil {
		t.Error("a negative latency was accepted")
	}
	p50, p99 := windowPercentiles(reqs, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second})
	if p50[0] != 1 || p99[0] != 1 || p50[1] != 2 || p99[1] != 3 || !math.IsNaN(p50[2]) {
		t.Errorf("window percentiles p50 %v p99 %v", p50, p99)
	}
	if got := percentile([]float64{5, 1, 4, 2, 3}, 50); got != 3 {
		t.Errorf("median of 1..5 = %v", got)
	}
	// With a trace, the latency panel shows per-period percentiles and the alone p99.
	r := testReport()
	r.Results[2].Trace = reqs
	panels, err := r.TimelinePanels(Muxflow)
	if err != nil {
		t.Fatal(err)
	}
	if got := panels[2].Series; len(got) != 3 || got[0].Name != "p99" || got[2].V[0] != 2 {
		t.Errorf("latency panel with a trace: %+v", got)
	}
}
