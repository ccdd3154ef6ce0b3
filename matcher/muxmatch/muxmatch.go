// Package muxmatch implements the muxmatch command: training and evaluating
// the interference predictor, one-shot planning, the planning service with
// its kube-scheduler extender, and the cluster replay.
package muxmatch

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/muxflow/muxflow/matcher/dataset"
	"github.com/muxflow/muxflow/matcher/extender"
	"github.com/muxflow/muxflow/matcher/plan"
	"github.com/muxflow/muxflow/matcher/predict"
	"github.com/muxflow/muxflow/matcher/profile"
	"github.com/muxflow/muxflow/matcher/replay"
)

const usage = `usage: muxmatch <command> [flags]

commands:
  train DATA.csv -o MODEL     train the throughput predictor on co-location records
  eval [DATA.csv] [--test F]  leave-one-model-out evaluation against baselines, or
                              train on DATA.csv and score on the test file F
  import-lucid -o DATA.csv    convert the Lucid co-location data to the training CSV
  plan --reports F --jobs F   compute one pairing plan and print it
  serve                       plan every interval and serve the plan and extender
  replay                      cluster replay on the Alibaba GPU trace

muxmatch <command> --help prints the command's usage and flags. Commands that read the
Lucid or Alibaba data take --data DIR, the folder holding lucid-colocation/ and
alibaba-gpu-v2023/ (default: ../shared/data next to the repository).
`

// commandUsage is each command's synopsis and description, printed by --help above its
// flags.
var commandUsage = map[string]string{
	"train": `usage: muxmatch train DATA.csv [-o MODEL] [flags]

Trains the throughput predictor (an MLP correcting the analytic model) on co-location
records in the training CSV (see import-lucid for the format) and writes the model file.`,
	"eval": `usage: muxmatch eval [DATA.csv] [--test TEST.csv] [--data DIR | --lucid DIR] [flags]

Without --test: leave-one-model-out cross-validation of the mean, linear, analytic and
MLP predictors on DATA.csv (default: the Lucid co-location data). With --test: each
predictor is trained on DATA.csv (or the Lucid data) and scored on TEST.csv.`,
	"import-lucid": `usage: muxmatch import-lucid [-o DATA.csv] [--data DIR | --dir DIR]

Converts the Lucid co-location measurements to the training CSV.`,
	"plan": `usage: muxmatch plan --reports REPORTS.json --jobs JOBS.json [flags]

Computes one pairing plan of offline jobs onto GPUs from node reports and prints it.`,
	"serve": `usage: muxmatch serve (--nodes SOCKETS|URLS | --reports FILE) [flags]

Plans every interval and serves the plan (GET /v1/plan) and the kube-scheduler extender
verbs (POST /filter, /prioritize and, with --bind, /bind, which records the planned GPU
on the pod as muxflow.io/gpu before binding it).`,
	"replay": `usage: muxmatch replay [--data DIR | --dir DIR --lucid DIR] [flags]

Replays the Alibaba GPU trace on a simulated cluster under the matcher and baselines.`,
}

// helpError is a command's --help: Run prints the usage and succeeds.
type helpError struct{ fs *flag.FlagSet }

func (helpError) Error() string { return "help requested" }

func printHelp(w io.Writer, cmd string, fs *flag.FlagSet) {
	fmt.Fprintln(w, commandUsage[cmd])
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintln(w, "\nflags:")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
}

// Run runs muxmatch with args (without the program name), writing results to
// stdout.
func Run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	cmd, rest := args[0], args[1:]
	err := runCommand(ctx, cmd, rest, stdout)
	if he, ok := err.(helpError); ok {
		printHelp(stdout, cmd, he.fs)
		return nil
	}
	return err
}

func runCommand(ctx context.Context, cmd string, rest []string, stdout io.Writer) error {
	switch cmd {
	case "train":
		return runTrain(rest, stdout)
	case "eval":
		return runEval(rest, stdout)
	case "import-lucid":
		return runImportLucid(rest, stdout)
	case "plan":
		return runPlan(ctx, rest, stdout)
	case "serve":
		return runServe(ctx, rest)
	case "replay":
		return runReplay(rest, stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	return fmt.Errorf("unknown command %q\n%s", cmd, usage)
}

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("muxmatch "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parse parses flags that may come before or after positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, helpError{fs}
			}
			return nil, fmt.Errorf("%s: %w", fs.Name(), err)
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%q is not a comma-separated list of integers", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// trainerFlags registers the MLP settings shared by train and eval.
func trainerFlags(fs *flag.FlagSet) func() (predict.MLPTrainer, error) {
	hidden := fs.String("hidden", "64,64,64,64", "hidden layer widths")
	epochs := fs.Int("epochs", 40, "training epochs")
	lr := fs.Float64("lr", 1e-3, "Adam learning rate")
	wd := fs.Float64("weight-decay", 1e-2, "L2 weight decay")
	seed := fs.Uint64("seed", 1, "random seed")
	plain := fs.Bool("plain", false, "learn throughput directly instead of a correction to the analytic model")
	return func() (predict.MLPTrainer, error) {
		h, err := parseInts(*hidden)
		if err != nil {
			return predict.MLPTrainer{}, fmt.Errorf("--hidden: %w", err)
		}
		return predict.MLPTrainer{Hidden: h, Epochs: *epochs, LearningRate: *lr, WeightDecay: *wd, Seed: *seed, Plain: *plain}, nil
	}
}

func readColocations(path string) ([]profile.Colocation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open training data: %w", err)
	}
	defer f.Close()
	recs, err := profile.ReadCSV(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return recs, nil
}

func runTrain(args []string, stdout io.Writer) error {
	fs := newFlags("train")
	out := fs.String("o", "model.json", "model file to write")
	trainer := trainerFlags(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("train: give exactly one DATA.csv (see muxmatch import-lucid for the format)")
	}
	t, err := trainer()
	if err != nil {
		return err
	}
	recs, err := readColocations(pos[0])
	if err != nil {
		return err
	}
	m, losses, err := t.Train(predict.Samples(recs))
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	meta := predict.ModelMeta{TrainedAt: time.Now().UTC(), Samples: 2 * len(recs), Epochs: len(losses), Source: pos[0]}
	if len(losses) > 0 {
		meta.FinalLoss = losses[len(losses)-1]
	}
	if err := predict.SaveFile(*out, m, meta); err != nil {
		return err
	}
	first := 0.0
	if len(losses) > 0 {
		first = losses[0]
	}
	fmt.Fprintf(stdout, "trained %s on %d samples: loss %.5f → %.5f over %d epochs; wrote %s\n", m.Name(), meta.Samples, first, meta.FinalLoss, len(losses), *out)
	return nil
}

func runEval(args []string, stdout io.Writer) error {
	fs := newFlags("eval")
	lucid := fs.String("lucid", "", "Lucid data folder (default <data>/lucid-colocation when no DATA.csv is given)")
	data := fs.String("data", "", "folder holding the data sets (default ../shared/data next to the repository)")
	testFile := fs.String("test", "", "score on this co-location CSV after training on DATA.csv (or the Lucid data) instead of cross-validating")
	asJSON := fs.Bool("json", false, "print the reports as JSON")
	trainer := trainerFlags(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	t, err := trainer()
	if err != nil {
		return err
	}
	var recs []profile.Colocation
	switch {
	case len(pos) == 1:
		if recs, err = readColocations(pos[0]); err != nil {
			return err
		}
	case len(pos) == 0:
		dir := *lucid
		if dir == "" {
			if dir, err = dataset.DataDir(*data, "lucid-colocation"); err != nil {
				return err
			}
		}
		l, err := dataset.LoadLucid(dir)
		if err != nil {
			return err
		}
		recs = l.Pairs
	default:
		return errors.New("eval: give at most one DATA.csv")
	}
	var test []profile.Colocation
	if *testFile != "" {
		if test, err = readColocations(*testFile); err != nil {
			return err
		}
	}
	var reports []predict.Report
	for _, tr := range []predict.Trainer{predict.MeanTrainer{}, predict.LinearTrainer{}, predict.Fixed{P: predict.Analytic{}}, t} {
		start := time.Now()
		var r predict.Report
		var err error
		if test != nil {
			r, err = predict.TrainTest(recs, test, tr, *testFile)
		} else {
			r, err = predict.LeaveOneModelOut(recs, tr)
		}
		if err != nil {
			return fmt.Errorf("eval: %w", err)
		}
		slog.Debug("evaluated", "model", r.Model, "seconds", time.Since(start).Seconds())
		reports = append(reports, r)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(reports)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if test != nil {
		fmt.Fprintf(tw, "trained on %d co-locations, scored on %d from %s\n", len(recs), len(test), *testFile)
	} else {
		fmt.Fprintf(tw, "leave-one-model-out over %d co-locations (%d samples)\n", len(recs), 2*len(recs))
	}
	fmt.Fprintln(tw, "model\tMAE\tSpearman(pooled)\tSpearman(fold mean)\tper held-out family (MAE / Spearman)")
	for _, r := range reports {
		var parts []string
		for _, f := range r.Folds {
			parts = append(parts, fmt.Sprintf("%s %.3f/%.2f", f.Held, f.MAE, f.Spearman))
		}
		fmt.Fprintf(tw, "%s\t%.4f\t%.3f\t%.3f\t%s\n", r.Model, r.MAE, r.Spearman, r.FoldSpearman, strings.Join(parts, "  "))
	}
	return tw.Flush()
}

func runImportLucid(args []string, stdout io.Writer) error {
	fs := newFlags("import-lucid")
	dir := fs.String("dir", "", "Lucid data folder (default <data>/lucid-colocation)")
	data := fs.String("data", "", "folder holding the data sets (default ../shared/data next to the repository)")
	out := fs.String("o", "-", "CSV file to write (- for stdout)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	d := *dir
	if d == "" {
		var err error
		if d, err = dataset.DataDir(*data, "lucid-colocation"); err != nil {
			return err
		}
	}
	l, err := dataset.LoadLucid(d)
	if err != nil {
		return err
	}
	if *out == "-" {
		return profile.WriteCSV(stdout, l.Pairs)
	}
	f, err := os.Create(*out)
	if err != nil {
		return fmt.Errorf("create %s: %w", *out, err)
	}
	if err := profile.WriteCSV(f, l.Pairs); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// plannerFlags registers predictor and planner settings.
func plannerFlags(fs *flag.FlagSet) func() (plan.Config, error) {
	model := fs.String("model", "", "trained model file (default: the analytic predictor)")
	mode := fs.String("mode", "auto", "solver: auto, exact or topk")
	k := fs.Int("k", 64, "candidates per job in top-k mode")
	onlineWeight := fs.Float64("online-weight", 0, "weight of the online workload's predicted throughput in each edge")
	minOnline := fs.Float64("min-online-tput", 0.8, "refuse pairs predicted to leave online work below this normalised throughput")
	allowRisk := fs.Bool("allow-kernel-risk", false, "allow pairs whose job's kernels are at least twice the requests of a service whose kernels fill the GPU (refused by default: no share keeps its requests from waiting for them)")
	return func() (plan.Config, error) {
		var p predict.Predictor = predict.Analytic{}
		if *model != "" {
			m, meta, err := predict.LoadFile(*model)
			if err != nil {
				return plan.Config{}, err
			}
			slog.Info("loaded predictor", "model", m.Name(), "file", *model, "trained_at", meta.TrainedAt, "samples", meta.Samples)
			p = m
		}
		return plan.Config{Predictor: p, Mode: plan.Mode(*mode), K: *k, OnlineWeight: *onlineWeight, MinOnlineTput: *minOnline, AllowKernelRisk: *allowRisk}, nil
	}
}

func runPlan(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("plan")
	reports := fs.String("reports", "", "JSON file of node reports (required)")
	jobs := fs.String("jobs", "", "JSON file of pending offline jobs (required)")
	cfgf := plannerFlags(fs)
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *reports == "" || *jobs == "" {
		return errors.New("plan: --reports and --jobs are required")
	}
	cfg, err := cfgf()
	if err != nil {
		return err
	}
	p, err := plan.NewPlanner(cfg)
	if err != nil {
		return err
	}
	rs, err := FileSource{Path: *reports}.Reports(ctx)
	if err != nil {
		return err
	}
	js, err := readJobs(*jobs)
	if err != nil {
		return err
	}
	pl, err := p.Plan(rs, js)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(pl)
}

func runServe(ctx context.Context, args []string) error {
	fs := newFlags("serve")
	listen := fs.String("listen", ":8888", "address for the plan API and the scheduler extender")
	nodes := fs.String("nodes", "", "comma-separated muxd endpoints (unix socket paths or http URLs)")
	reports := fs.String("reports", "", "JSON file of node reports, re-read every round (instead of --nodes)")
	jobs := fs.String("jobs", "", "JSON file of offline jobs to plan besides the pods the extender sees")
	interval := fs.Duration("interval", 10*time.Second, "planning interval")
	wait := fs.Bool("wait-for-plan", true, "hold unplanned offline pods instead of letting them land anywhere")
	record := fs.String("record", "", "append the co-locations nodes report to this training CSV (for muxmatch train)")
	measuredPath := fs.String("measured", "", "keep the profiles nodes measured of offline pods, by controller, in this file across restarts")
	bindVerb := fs.Bool("bind", false, "serve kube-scheduler's bind verb: write the planned GPU on each offline pod (muxflow.io/gpu) and bind it; needs Kubernetes API access")
	kubeServer := fs.String("kube-server", "", "Kubernetes API server URL for --bind (default: the in-cluster service account's)")
	kubeToken := fs.String("kube-token-file", "", "bearer token file for --kube-server (default: the service account token)")
	kubeCA := fs.String("kube-ca", "", "CA certificate file for --kube-server (default: the service account's ca.crt)")
	cfgf := plannerFlags(fs)
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if (*nodes == "") == (*reports == "") {
		return errors.New("serve: give exactly one of --nodes and --reports")
	}
	if *interval < 100*time.Millisecond {
		return fmt.Errorf("serve: --interval %v is too short", *interval)
	}
	cfg, err := cfgf()
	if err != nil {
		return err
	}
	planner, err := plan.NewPlanner(cfg)
	if err != nil {
		return err
	}
	var src Source = FileSource{Path: *reports}
	if *nodes != "" {
		src = NodeSource{Endpoints: strings.Split(*nodes, ",")}
	}
	var rec *recorder
	if *record != "" {
		if rec, err = newRecorder(*record); err != nil {
			return err
		}
	}
	log := slog.Default()
	srv := extender.NewServer(log)
	srv.WaitForPlan = *wait
	if *measuredPath != "" {
		if err := srv.LoadMeasured(*measuredPath); err != nil {
			return fmt.Errorf("serve --measured: %w", err)
		}
	}
	if *bindVerb {
		if srv.Kube, err = extender.NewKube(*kubeServer, *kubeToken, *kubeCA); err != nil {
			return fmt.Errorf("serve --bind: %w", err)
		}
	}
	var saved time.Time // when the measured profiles were last written
	round := func() {
		rs, err := src.Reports(ctx)
		if err != nil {
			log.Error("planning round skipped", "err", err)
			return
		}
		if rec != nil {
			if n, err := rec.add(rs); err != nil {
				log.Error("recording co-locations", "err", err)
			} else if n > 0 {
				log.Info("recorded co-locations", "new", n, "file", *record)
			}
		}
		srv.ResolveJobs(ctx, time.Now())
		srv.Learn(rs, time.Now())
		// The profiles move a little every round: written at most once a minute, and
		// at shutdown.
		if *measuredPath != "" && time.Since(saved) >= time.Minute {
			saved = time.Now()
			if err := srv.SaveMeasured(*measuredPath); err != nil {
				log.Error("keeping measured profiles", "err", err)
			}
		}
		js := srv.PendingJobs(time.Now())
		if *jobs != "" {
			fj, err := readJobs(*jobs)
			if err != nil {
				log.Error("planning round skipped", "err", err)
				return
			}
			js = mergeJobs(fj, js)
		}
		pl, err := planner.Plan(rs, js)
		if err != nil {
			log.Error("planning round failed", "err", err)
			return
		}
		srv.SetPlan(pl, rs)
		srv.Requeue(ctx)
		log.Info("plan published", "generation", pl.Generation, "mode", pl.Mode, "jobs", pl.Stats.Jobs,
			"gpus", pl.Stats.EligibleGPUs, "assigned", len(pl.Assignments), "weight", pl.Stats.TotalWeight, "solve_s", pl.Stats.SolveSeconds)
	}
	hs := &http.Server{Addr: *listen, Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.ListenAndServe() }()
	log.Info("muxmatch serving", "listen", *listen, "interval", *interval, "predictor", cfg.Predictor.Name())
	round()
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			hs.Shutdown(sctx)
			if *measuredPath != "" {
				// owners the filter verb learnt since the last round
				if err := srv.SaveMeasured(*measuredPath); err != nil {
					return err
				}
			}
			return nil
		case err := <-errc:
			return fmt.Errorf("serve: %w", err)
		case <-tick.C:
			round()
		}
	}
}

// mergeJobs unions two job lists, the first winning on duplicate ids.
func mergeJobs(a, b []plan.Job) []plan.Job {
	seen := map[string]bool{}
	out := make([]plan.Job, 0, len(a)+len(b))
	for _, l := range [][]plan.Job{a, b} {
		for _, j := range l {
			if !seen[j.ID] {
				seen[j.ID] = true
				out = append(out, j)
			}
		}
	}
	return out
}

func runReplay(args []string, stdout io.Writer) error {
	fs := newFlags("replay")
	dir := fs.String("dir", "", "Alibaba trace folder (default <data>/alibaba-gpu-v2023)")
	lucid := fs.String("lucid", "", "Lucid folder for workload profiles (default <data>/lucid-colocation)")
	data := fs.String("data", "", "folder holding the data sets (default ../shared/data next to the repository)")
	windows := fs.Int("windows", 1, "cut the trace into this many windows of consecutive task creations (1: the whole trace at once)")
	seed := fs.Uint64("seed", 1, "random seed for profiles and the random baseline")
	model := fs.String("model", "", "trained model file (default: the analytic predictor)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	var p predict.Predictor = predict.Analytic{}
	if *model != "" {
		m, _, err := predict.LoadFile(*model)
		if err != nil {
			return err
		}
		p = m
	}
	var err error
	d, l := *dir, *lucid
	if d == "" {
		if d, err = dataset.DataDir(*data, "alibaba-gpu-v2023"); err != nil {
			return err
		}
	}
	if l == "" {
		if l, err = dataset.DataDir(*data, "lucid-colocation"); err != nil {
			return err
		}
	}
	res, err := replay.Run(replay.Config{TraceDir: d, LucidDir: l, Windows: *windows, Seed: *seed, Predictor: p})
	if err != nil {
		return err
	}
	return res.Print(stdout)
}
