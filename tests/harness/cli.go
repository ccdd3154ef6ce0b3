// Package harness is muxflow's experiment harness: it runs a scenario (a simulated GPU,
// an online service with its rate trace, offline training jobs, a duration and a time
// compression) on gpusim under each sharing strategy — online alone, time-sharing,
// priority time-sharing, plain MPS, muxflow with a static share, and muxflow with
// dynamic allocation through the real muxd and libxcuda — and prints one table of
// online latency, offline normalised throughput, GPU utilisation, SM activity, errors
// and evictions, plus a timeline plot of the muxflow run. The muxexp command
// (tests/harness/cmd/muxexp) is its front end.
package harness

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

const usage = `usage: muxexp run [flags] SCENARIO.toml...
       muxexp gen [--seed N] [--count N] DIR

run: runs each scenario under each strategy on a simulated GPU and prints one table per
scenario. Strategies: online-alone, time-sharing, priority-time-sharing, mps,
muxflow-static, muxflow (default: all).

gen: writes scenarios drawn at random into DIR (rand-SEED-INDEX.toml; the same seed
draws the same scenarios), to be run with muxexp run.

flags:
`

// Run is muxexp's entry point: args excludes the program name.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "gen" {
		return gen(args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "run" {
		fmt.Fprint(stderr, usage)
		return errors.New("the commands are `run` and `gen`")
	}
	fs := flag.NewFlagSet("muxexp run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	strategies := fs.String("strategies", "all", "comma-separated strategies to run, or all")
	duration := fs.Duration("duration", 0, "override each scenario's run duration (its days are kept, so time is compressed more)")
	plot := fs.String("plot", "", "write the muxflow run's timeline to this PNG (with several scenarios, -NAME is added before .png)")
	markdown := fs.Bool("markdown", false, "print Markdown tables")
	jsonOut := fs.String("json", "", "also write the full reports (with samples) as JSON to this file")
	logs := fs.String("logs", "", "keep each run's gpusimd and muxd logs under this directory")
	opTrace := fs.Bool("op-trace", false, "with --logs: also keep gpusimd's trace of every GPU operation (gpusim-ops.csv; slows gpusimd a little)")
	verbose := fs.Bool("v", false, "log progress to stderr")
	repeat := fs.Int("repeat", 1, "run every strategy this many times, in turn, and report medians")
	stallReruns := fs.Int("stall-reruns", 1, "run again, up to this many times, a run in which gpusimd fell behind real time for 1% of the window or more (the last run is reported, with a note)")
	files, err := parseAnyOrder(fs, args[1:])
	if err != nil {
		return err
	}
	if len(files) == 0 {
		fs.Usage()
		return errors.New("name at least one scenario file")
	}
	sts, err := ParseStrategies(*strategies)
	if err != nil {
		return err
	}
	if *repeat < 1 || *repeat > 20 {
		return fmt.Errorf("--repeat %d must be in 1..20", *repeat)
	}
	if *stallReruns < 0 || *stallReruns > 5 {
		return fmt.Errorf("--stall-reruns %d must be in 0..5", *stallReruns)
	}
	if *opTrace && *logs == "" {
		return errors.New("--op-trace needs --logs DIR: the trace is kept with each run's logs")
	}
	if *duration < 0 {
		return fmt.Errorf("--duration %v is negative", *duration)
	}
	var scenarios []*Scenario
	for _, f := range files {
		s, err := LoadScenario(f)
		if err != nil {
			return err
		}
		if *duration > 0 {
			if s, err = s.WithDuration(*duration); err != nil {
				return fmt.Errorf("scenario %s with --duration %v: %w", f, *duration, err)
			}
		}
		scenarios = append(scenarios, s)
	}
	art, err := FindArtifacts()
	if err != nil {
		return err
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	var reports []*Report
	for _, s := range scenarios {
		dir := ""
		if *logs != "" {
			dir = filepath.Join(*logs, s.Name)
		} else {
			d, err := os.MkdirTemp("", "muxexp-")
			if err != nil {
				return fmt.Errorf("create work directory: %w", err)
			}
			dir = d
		}
		r := &Runner{Scenario: s, Artifacts: art, Dir: dir, Log: log, Repeat: *repeat, StallReruns: *stallReruns, OpTrace: *opTrace}
		rep, err := r.Run(ctx, sts)
		if err != nil {
			// The error names logs under the work directory: keep it.
			return fmt.Errorf("scenario %s: %w", s.Name, err)
		}
		if *logs == "" {
			os.RemoveAll(dir)
		}
		reports = append(reports, rep)
		if *markdown {
			fmt.Fprintf(stdout, "### %s\n\n%s\n\n", s.Name, strings.TrimSpace(s.Description))
			rep.WriteMarkdown(stdout)
			fmt.Fprintln(stdout)
			rep.WriteTargets(stdout, true)
		} else {
			rep.WriteTable(stdout)
			fmt.Fprintln(stdout)
			rep.WriteTargets(stdout, false)
		}
		if *plot != "" {
			path := *plot
			if len(scenarios) > 1 {
				path = strings.TrimSuffix(path, ".png") + "-" + s.Name + ".png"
			}
			if err := writePlot(rep, path); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "timeline of the muxflow run: %s\n\n", path)
		}
	}
	if *jsonOut != "" {
		data, err := json.MarshalIndent(reportsJSON(reports), "", "  ")
		if err != nil {
			return fmt.Errorf("encode reports: %w", err)
		}
		if err := os.WriteFile(*jsonOut, data, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", *jsonOut, err)
		}
	}
	return nil
}

func writePlot(rep *Report, path string) error {
	panels, err := rep.TimelinePanels(Muxflow)
	if err != nil {
		return fmt.Errorf("plot %s: %w", rep.Scenario.Name, err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create plot: %w", err)
	}
	title := fmt.Sprintf("muxflow on a simulated %s - scenario %s (%s, %v)", strings.ToUpper(rep.Scenario.GPU), rep.Scenario.Name, rep.Scenario.RateSpec(), rep.Scenario.Duration.D())
	if err := WritePNG(f, title, panels); err != nil {
		f.Close()
		return fmt.Errorf("plot %s: %w", rep.Scenario.Name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write plot: %w", err)
	}
	return nil
}

// reportsJSON makes NaN-free copies (encoding/json refuses NaN).
func reportsJSON(reports []*Report) any {
	type sample struct {
		T                          float64  `json:"t_s"`
		OnlineQPS, OnlineGPUms     *float64 `json:",omitempty"`
		Util, SMActivity           float64
		OfflineShare, OnlineDemand *float64 `json:",omitempty"`
		Reason                     string   `json:",omitempty"`
	}
	type change struct {
		T                float64 `json:"t_s"`
		From, To, Demand float64
		Reason, Detail   string
	}
	type result struct {
		Result
		Samples []sample
		Changes []change `json:",omitempty"`
		Window  float64  `json:"window_s"`
	}
	type pass struct {
		OfflineAlone []float64
		Results      []result
	}
	type report struct {
		Scenario     *Scenario
		OfflineAlone []float64
		Results      []result
		Passes       []pass
		ElapsedS     float64
	}
	num := func(v float64) *float64 {
		if v != v {
			return nil
		}
		return &v
	}
	conv := func(rs []Result) []result {
		var out []result
		for _, x := range rs {
			y := result{Result: x, Window: x.Window.Seconds()}
			y.Result.Samples, y.Result.Changes = nil, nil
			for _, c := range x.Changes {
				y.Changes = append(y.Changes, change{T: c.T.Seconds(), From: c.From, To: c.To, Demand: c.Demand, Reason: c.Reason, Detail: c.Detail})
			}
			y.BusyPerRequest = 0
			if b := num(x.BusyPerRequest); b != nil {
				y.BusyPerRequest = *b
			}
			for _, s := range x.Samples {
				y.Samples = append(y.Samples, sample{T: s.T.Seconds(), OnlineQPS: num(s.OnlineQPS), OnlineGPUms: num(s.OnlineGPUms),
					Util: s.Util, SMActivity: s.SMActivity, OfflineShare: num(s.OfflineShare), OnlineDemand: num(s.OnlineDemand), Reason: s.Reason})
			}
			out = append(out, y)
		}
		return out
	}
	var out []report
	for _, r := range reports {
		rr := report{Scenario: r.Scenario, OfflineAlone: r.OfflineAlone, ElapsedS: r.Elapsed.Seconds(), Results: conv(r.Results)}
		if len(r.Passes) > 1 {
			for _, p := range r.Passes {
				rr.Passes = append(rr.Passes, pass{OfflineAlone: p.OfflineAlone, Results: conv(p.Results)})
			}
		}
		out = append(out, rr)
	}
	return out
}

// gen is `muxexp gen`: it writes --count random scenarios of --seed into a directory,
// refusing to replace a file that is already there.
func gen(args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("muxexp gen", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.Usage = func() { fmt.Fprint(stderr, usage); flags.PrintDefaults() }
	seed := flags.Uint64("seed", 1, "the sweep's seed: the same seed draws the same scenarios")
	count := flags.Int("count", 20, "how many scenarios to draw (1..1000)")
	dirs, err := parseAnyOrder(flags, args)
	if err != nil {
		return err
	}
	if len(dirs) != 1 {
		flags.Usage()
		return errors.New("name one directory to write the scenarios into")
	}
	if *count < 1 || *count > 1000 {
		return fmt.Errorf("--count %d must be in 1..1000", *count)
	}
	dir := dirs[0]
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	for i := 0; i < *count; i++ {
		text := RandomScenario(*seed, i)
		if _, err := ParseScenario([]byte(text)); err != nil {
			return fmt.Errorf("random scenario %d of seed %d does not validate (a bug in the generator): %w", i, *seed, err)
		}
		path := filepath.Join(dir, fmt.Sprintf("rand-%d-%03d.toml", *seed, i))
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s already exists: gen replaces no file (name an empty directory, or another seed)", path)
		}
		if err != nil {
			return fmt.Errorf("write scenario: %w", err)
		}
		_, werr := f.WriteString(text)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return fmt.Errorf("write %s: %w", path, werr)
		}
	}
	fmt.Fprintf(stdout, "wrote %d scenarios of seed %d to %s\n", *count, *seed, dir)
	return nil
}

// parseAnyOrder parses args with fs, flags before, between or after the operands, and
// returns the operands.
func parseAnyOrder(fs *flag.FlagSet, args []string) ([]string, error) {
	var operands []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return operands, nil
		}
		operands = append(operands, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
