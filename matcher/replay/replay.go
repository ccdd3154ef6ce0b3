// Package replay replays the Alibaba GPU cluster trace (cluster-trace-gpu-v2023)
// to compare pairing policies at cluster scale. Most of the trace's tasks
// live under an hour, so few overlap at any instant; like the trace's own
// scheduling studies, the replay packs tasks in creation order instead: the
// task list is cut into windows of consecutive creations, and in each window
// the latency-sensitive (LS) tasks become the online workloads on the
// cluster's GPUs and the best-effort (BE) tasks the offline jobs to pair.
// Matching, random and greedy pairing are scored by predicted offline
// throughput and GPU utilisation and, where the Lucid measurements cover a
// pair, by measured throughput.
//
// The trace has no per-task utilisation, so every task is given the solo
// profile of a Lucid job configuration, drawn from a seeded hash of its name;
// online (inference) tasks are scaled by their GPU share (gpu_milli), as a
// service sized to part of a GPU keeps it that much busy. This is stated
// wherever results are printed.
package replay

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/muxflow/muxflow/matcher/dataset"
	"github.com/muxflow/muxflow/matcher/plan"
	"github.com/muxflow/muxflow/matcher/predict"
	"github.com/muxflow/muxflow/matcher/profile"
)

// GPUMemoryMiB gives device memory per GPU type of the trace. P100, T4,
// V100 and A10 are NVIDIA's published sizes; G2 and G3 are Alibaba's
// internal names with no published size, taken as 24 GiB (an assumption).
var GPUMemoryMiB = map[string]float64{
	"P100": 16384, "T4": 15360, "V100M16": 16384, "V100M32": 32768, "A10": 24576, "G2": 24576, "G3": 24576,
}

// Config describes a replay.
type Config struct {
	TraceDir, LucidDir string
	// Windows cuts the trace into this many windows; 1 replays the whole
	// trace as one cluster-scale round.
	Windows   int
	Seed      uint64
	Predictor predict.Predictor
}

// Outcome is one pairing policy's result in one window.
type Outcome struct {
	Paired int
	// Tput is the summed predicted normalised throughput of paired jobs:
	// offline work done, in GPU-equivalents of solo speed.
	Tput float64
	// OnlineTput is the mean predicted online normalised throughput over
	// paired GPUs.
	OnlineTput float64
	// Util is the mean predicted GPU utilisation over GPUs with online work.
	Util float64
	// Measured is the mean measured offline throughput over pairs the
	// Lucid data covers; Covered counts them.
	Measured float64
	Covered  int
}

// Snapshot is one replayed window.
type Snapshot struct {
	// Time is the creation time of the window's first task (seconds).
	Time        int64
	OnlineGPUs  int
	OfflineJobs int
	Policies    map[string]Outcome
}

// Result is a whole replay.
type Result struct {
	Nodes, GPUs int
	Predictor   string
	Snapshots   []Snapshot
}

var policies = []string{"matching", "greedy", "random"}

type task struct {
	name             string
	numGPU, gpuMilli int
	qos              string
	created          int64
}

type node struct {
	name  string
	gpus  int
	model string
}

// Run replays the trace.
func Run(cfg Config) (*Result, error) {
	if cfg.Windows < 1 || cfg.Windows > 1000 {
		return nil, fmt.Errorf("replay: %d windows; want 1..1000", cfg.Windows)
	}
	if cfg.Predictor == nil {
		return nil, errors.New("replay: a predictor is required")
	}
	nodes, err := readNodes(filepath.Join(cfg.TraceDir, "openb_node_list_gpu_node.csv"))
	if err != nil {
		return nil, err
	}
	tasks, err := readTasks(filepath.Join(cfg.TraceDir, "openb_pod_list_default.csv"))
	if err != nil {
		return nil, err
	}
	lucid, err := dataset.LoadLucid(cfg.LucidDir)
	if err != nil {
		return nil, err
	}
	configs := make([]profile.Profile, 0, len(lucid.Solo))
	for _, p := range lucid.Solo {
		configs = append(configs, p)
	}
	slices.SortFunc(configs, func(a, b profile.Profile) int { return cmp.Compare(a.Name, b.Name) })
	measured := map[[2]string]float64{}
	for _, c := range lucid.Pairs {
		measured[[2]string{c.A.Name, c.B.Name}] = c.ANormTput
		measured[[2]string{c.B.Name, c.A.Name}] = c.BNormTput
	}
	res := &Result{Nodes: len(nodes), Predictor: cfg.Predictor.Name()}
	for _, n := range nodes {
		res.GPUs += n.gpus
	}
	slices.SortStableFunc(tasks, func(a, b task) int { return cmp.Compare(a.created, b.created) })
	for w := 0; w < cfg.Windows; w++ {
		win := tasks[len(tasks)*w/cfg.Windows : len(tasks)*(w+1)/cfg.Windows]
		if len(win) == 0 {
			continue
		}
		snap, err := replayWindow(cfg, win, nodes, configs, measured)
		if err != nil {
			return nil, fmt.Errorf("window %d: %w", w, err)
		}
		res.Snapshots = append(res.Snapshots, snap)
	}
	return res, nil
}

func pick(configs []profile.Profile, name string, seed uint64) profile.Profile {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", seed, name)
	return configs[h.Sum64()%uint64(len(configs))]
}

func replayWindow(cfg Config, tasks []task, nodes []node, configs []profile.Profile, measured map[[2]string]float64) (Snapshot, error) {
	snap := Snapshot{Time: tasks[0].created, Policies: map[string]Outcome{}}
	// Place the window's LS tasks on GPUs first-fit, one online workload per
	// GPU (the trace's own placement is not published).
	var reports []profile.NodeReport
	type slot struct{ node, gpu int }
	var free []slot
	for ni, n := range nodes {
		r := profile.NodeReport{Node: profile.NodeInfo{Name: n.name}}
		mem := GPUMemoryMiB[n.model]
		if mem == 0 {
			mem = 16384
		}
		for g := 0; g < n.gpus; g++ {
			r.GPUs = append(r.GPUs, profile.GPUReport{UUID: fmt.Sprintf("%s-gpu%d", n.name, g), Index: g, Type: n.model,
				MemoryTotalMiB: mem, MemoryFreeMiB: mem, Health: profile.Healthy})
			free = append(free, slot{ni, g})
		}
		reports = append(reports, r)
	}
	next := 0
	var jobs []plan.Job
	onlineName := map[string]string{}
	for _, t := range tasks {
		if t.numGPU < 1 {
			continue // CPU-only task
		}
		switch t.qos {
		case "LS":
			p := pick(configs, t.name, cfg.Seed)
			share := 1.0
			if t.numGPU == 1 && t.gpuMilli > 0 && t.gpuMilli < 1000 {
				share = float64(t.gpuMilli) / 1000
			}
			p.GPUUtil *= share
			p.MemBWUtil *= share
			for k := 0; k < t.numGPU && next < len(free); k++ {
				s := free[next]
				next++
				g := &reports[s.node].GPUs[s.gpu]
				g.Online = &profile.Workload{ID: "online/" + t.name, Profile: p}
				g.MemoryFreeMiB = math.Max(0, g.MemoryTotalMiB-p.MemoryMiB)
				onlineName[g.UUID] = p.Name
				snap.OnlineGPUs++
			}
		case "BE":
			jobs = append(jobs, plan.Job{ID: "offline/" + t.name, Profile: pick(configs, t.name, cfg.Seed)})
		}
	}
	// Offline work goes to online GPUs only: that is the sharing under test.
	for ri := range reports {
		var keep []profile.GPUReport
		for _, g := range reports[ri].GPUs {
			if g.Online != nil {
				keep = append(keep, g)
			}
		}
		reports[ri].GPUs = keep
	}
	snap.OfflineJobs = len(jobs)
	planner, err := plan.NewPlanner(plan.Config{Predictor: cfg.Predictor})
	if err != nil {
		return snap, err
	}
	pl, err := planner.Plan(reports, jobs)
	if err != nil {
		return snap, err
	}

	pairs := map[string][]pair{"matching": {}}
	for _, a := range pl.Assignments {
		pairs["matching"] = append(pairs["matching"], pair{job: a.Job, gpu: a.GPU})
	}
	pairs["greedy"] = greedy(cfg.Predictor, reports, jobs)
	pairs["random"] = random(reports, jobs, rand.New(rand.NewPCG(cfg.Seed, uint64(snap.Time))))
	gpus := map[string]*profile.GPUReport{}
	for ri := range reports {
		for gi := range reports[ri].GPUs {
			g := &reports[ri].GPUs[gi]
			gpus[g.UUID] = g
		}
	}
	jobByID := map[string]plan.Job{}
	for _, j := range jobs {
		jobByID[j.ID] = j
	}
	for _, pol := range policies {
		snap.Policies[pol] = score(cfg.Predictor, pairs[pol], gpus, jobByID, measured)
	}
	return snap, nil
}

type pair struct{ job, gpu string }

// eligible applies the planner's hard constraints and floors.
func eligible(p predict.Predictor, j plan.Job, g *profile.GPUReport) (float64, bool) {
	if j.Profile.MemoryMiB > g.MemoryFreeMiB {
		return 0, false
	}
	off := p.Predict(j.Profile, g.Online.Profile)
	on := p.Predict(g.Online.Profile, j.Profile)
	if off < 0.05 || on < 0.8 {
		return 0, false
	}
	return off, true
}

// greedy takes jobs in arrival order, each to the free GPU it is predicted
// to run fastest on: what a scheduler scoring nodes one pod at a time does.
func greedy(p predict.Predictor, reports []profile.NodeReport, jobs []plan.Job) []pair {
	taken := map[string]bool{}
	var out []pair
	for _, j := range jobs {
		best, bestW := "", -1.0
		for ri := range reports {
			for gi := range reports[ri].GPUs {
				g := &reports[ri].GPUs[gi]
				if taken[g.UUID] {
					continue
				}
				if w, ok := eligible(p, j, g); ok && w > bestW {
					best, bestW = g.UUID, w
				}
			}
		}
		if best != "" {
			taken[best] = true
			out = append(out, pair{j.ID, best})
		}
	}
	return out
}

// random gives each job, in arrival order, a random free GPU that satisfies
// the memory constraint: placement without interference awareness.
func random(reports []profile.NodeReport, jobs []plan.Job, r *rand.Rand) []pair {
	var gpus []*profile.GPUReport
	for ri := range reports {
		for gi := range reports[ri].GPUs {
			gpus = append(gpus, &reports[ri].GPUs[gi])
		}
	}
	r.Shuffle(len(gpus), func(i, j int) { gpus[i], gpus[j] = gpus[j], gpus[i] })
	taken := make([]bool, len(gpus))
	var out []pair
	for _, j := range jobs {
		for k, g := range gpus {
			if !taken[k] && j.Profile.MemoryMiB <= g.MemoryFreeMiB {
				taken[k] = true
				out = append(out, pair{j.ID, g.UUID})
				break
			}
		}
	}
	return out
}

func score(p predict.Predictor, pairs []pair, gpus map[string]*profile.GPUReport, jobs map[string]plan.Job, measured map[[2]string]float64) Outcome {
	var o Outcome
	paired := map[string]plan.Job{}
	for _, pr := range pairs {
		paired[pr.gpu] = jobs[pr.job]
	}
	utilSum, onSum, measSum := 0.0, 0.0, 0.0
	for id, g := range gpus {
		on := g.Online.Profile
		j, ok := paired[id]
		if !ok {
			utilSum += on.GPUUtil
			continue
		}
		toff := p.Predict(j.Profile, on)
		ton := p.Predict(on, j.Profile)
		o.Paired++
		o.Tput += toff
		onSum += ton
		// A workload busy u% of the time alone, running at normalised speed
		// t, keeps the GPU busy about u·t% of the time; overlap is bounded
		// by 100%.
		utilSum += math.Min(100, on.GPUUtil*ton+j.Profile.GPUUtil*toff)
		if m, ok := measured[[2]string{j.Profile.Name, on.Name}]; ok {
			measSum += m
			o.Covered++
		}
	}
	if o.Paired > 0 {
		o.OnlineTput = onSum / float64(o.Paired)
	}
	if len(gpus) > 0 {
		o.Util = utilSum / float64(len(gpus))
	}
	if o.Covered > 0 {
		o.Measured = measSum / float64(o.Covered)
	}
	return o
}

// Print writes the replay as a table, with totals over snapshots.
func (r *Result) Print(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "Alibaba GPU trace replay: %d nodes, %d GPUs, predictor %s; LS tasks online, BE tasks offline;\n", r.Nodes, r.GPUs, r.Predictor)
	fmt.Fprintln(w, "task profiles drawn from Lucid solo profiles (trace has none); utilisation and throughput are predicted.")
	fmt.Fprintln(tw, "window_start_s\tonline_gpus\toffline_jobs\tpolicy\tpaired\toffline_tput\tonline_tput\tgpu_util_%\tmeasured_tput(n)\t")
	tot := map[string]*Outcome{}
	for _, p := range policies {
		tot[p] = &Outcome{}
	}
	for _, s := range r.Snapshots {
		for _, p := range policies {
			o := s.Policies[p]
			fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%d\t%.1f\t%.3f\t%.1f\t%.3f(%d)\t\n", s.Time, s.OnlineGPUs, s.OfflineJobs, p, o.Paired, o.Tput, o.OnlineTput, o.Util, o.Measured, o.Covered)
			t := tot[p]
			t.Paired += o.Paired
			t.Tput += o.Tput
			t.Util += o.Util / float64(len(r.Snapshots))
			t.OnlineTput += o.OnlineTput / float64(len(r.Snapshots))
			t.Measured += o.Measured * float64(o.Covered)
			t.Covered += o.Covered
		}
	}
	for _, p := range policies {
		t := tot[p]
		if t.Covered > 0 {
			t.Measured /= float64(t.Covered)
		}
		fmt.Fprintf(tw, "all\t\t\t%s\t%d\t%.1f\t%.3f\t%.1f\t%.3f(%d)\t\n", p, t.Paired, t.Tput, t.OnlineTput, t.Util, t.Measured, t.Covered)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	m, g, rd := tot["matching"], tot["greedy"], tot["random"]
	if g.Tput > 0 && rd.Tput > 0 {
		fmt.Fprintf(w, "matching vs greedy: offline throughput ×%.3f; vs random: ×%.3f\n", m.Tput/g.Tput, m.Tput/rd.Tput)
	}
	return nil
}

func readCSV(path string) (map[string]int, [][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open trace: %w", err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(rows) == 0 {
		return nil, nil, fmt.Errorf("%s is empty", path)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[strings.TrimSpace(h)] = i
	}
	return col, rows[1:], nil
}

func need(col map[string]int, path string, names ...string) error {
	for _, n := range names {
		if _, ok := col[n]; !ok {
			return fmt.Errorf("%s lacks column %q", path, n)
		}
	}
	return nil
}

func readNodes(path string) ([]node, error) {
	col, rows, err := readCSV(path)
	if err != nil {
		return nil, err
	}
	if err := need(col, path, "sn", "gpu", "model"); err != nil {
		return nil, err
	}
	var out []node
	for i, r := range rows {
		g, err := strconv.Atoi(r[col["gpu"]])
		if err != nil || g < 0 || g > 64 {
			return nil, fmt.Errorf("%s line %d: gpu count %q", path, i+2, r[col["gpu"]])
		}
		out = append(out, node{name: r[col["sn"]], gpus: g, model: r[col["model"]]})
	}
	return out, nil
}

func readTasks(path string) ([]task, error) {
	col, rows, err := readCSV(path)
	if err != nil {
		return nil, err
	}
	if err := need(col, path, "name", "num_gpu", "gpu_milli", "qos", "creation_time"); err != nil {
		return nil, err
	}
	num := func(r []string, c string, line int) (int64, error) {
		s := strings.TrimSpace(r[col[c]])
		if s == "" {
			return -1, nil
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s line %d column %s: %q is not an integer", path, line, c, s)
		}
		return v, nil
	}
	var out []task
	for i, r := range rows {
		var vals [3]int64
		for k, c := range []string{"num_gpu", "gpu_milli", "creation_time"} {
			if vals[k], err = num(r, c, i+2); err != nil {
				return nil, err
			}
		}
		out = append(out, task{name: r[col["name"]], numGPU: int(vals[0]), gpuMilli: int(vals[1]), qos: r[col["qos"]], created: vals[2]})
	}
	return out, nil
}
