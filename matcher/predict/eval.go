package predict

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/muxflow/muxflow/matcher/profile"
)

// Fixed is a Trainer that ignores its data: it lets the analytic model be
// evaluated like the trained ones.
type Fixed struct{ P Predictor }

// Fit implements Trainer.
func (f Fixed) Fit([]Sample) (Predictor, error) { return f.P, nil }

// Fold is one held-out model family's result.
type Fold struct {
	Held     string  `json:"held_out"`
	Train    int     `json:"train_samples"`
	Test     int     `json:"test_samples"`
	MAE      float64 `json:"mae"`
	Spearman float64 `json:"spearman"`
}

// Report summarises a cross-validation: per-fold results and metrics over
// all held-out predictions pooled.
type Report struct {
	Model string  `json:"model"`
	Folds []Fold  `json:"folds"`
	MAE   float64 `json:"mae"`
	// Spearman pools every held-out prediction; FoldSpearman averages the
	// folds' own (skipping folds where a side is constant), which is the
	// fairer view for models whose level shifts between folds.
	Spearman     float64 `json:"spearman"`
	FoldSpearman float64 `json:"fold_spearman"`
}

// LeaveOneModelOut trains once per model family with every co-location that
// involves the family held out, and tests on exactly those: it measures how
// the predictor does on workloads it has never seen, which is the case that
// matters when new jobs arrive. Records need Model set on both profiles.
func LeaveOneModelOut(recs []profile.Colocation, t Trainer) (Report, error) {
	fams := map[string]bool{}
	for i, c := range recs {
		if c.A.Model == "" || c.B.Model == "" {
			return Report{}, fmt.Errorf("co-location %d lacks a model family", i)
		}
		fams[c.A.Model], fams[c.B.Model] = true, true
	}
	names := make([]string, 0, len(fams))
	for f := range fams {
		names = append(names, f)
	}
	slices.Sort(names)
	var rep Report
	var allPred, allTrue []float64
	for _, held := range names {
		var train, test []profile.Colocation
		for _, c := range recs {
			if c.A.Model == held || c.B.Model == held {
				test = append(test, c)
			} else {
				train = append(train, c)
			}
		}
		if len(train) == 0 {
			continue // every record involves this family: nothing to learn from
		}
		p, err := t.Fit(Samples(train))
		if err != nil {
			return Report{}, fmt.Errorf("fold %s: %w", held, err)
		}
		if rep.Model == "" {
			rep.Model = p.Name()
		}
		var pred, truth []float64
		for _, s := range Samples(test) {
			pred = append(pred, p.Predict(s.A, s.B))
			truth = append(truth, s.Tput)
		}
		rep.Folds = append(rep.Folds, Fold{Held: held, Train: 2 * len(train), Test: len(pred), MAE: MAE(pred, truth), Spearman: Spearman(pred, truth)})
		allPred = append(allPred, pred...)
		allTrue = append(allTrue, truth...)
	}
	if len(allPred) == 0 {
		return Report{}, fmt.Errorf("no fold had both training and test data")
	}
	rep.MAE = MAE(allPred, allTrue)
	rep.Spearman = Spearman(allPred, allTrue)
	n := 0
	for _, f := range rep.Folds {
		if !math.IsNaN(f.Spearman) {
			rep.FoldSpearman += f.Spearman
			n++
		}
	}
	rep.FoldSpearman /= float64(n) // NaN when no fold has one
	return rep, nil
}

// MAE is the mean absolute error.
func MAE(pred, truth []float64) float64 {
	s := 0.0
	for i := range pred {
		s += math.Abs(pred[i] - truth[i])
	}
	return s / float64(len(pred))
}

// Spearman is the rank correlation (Pearson over ranks, ties averaged); NaN
// when either side is constant.
func Spearman(x, y []float64) float64 {
	return pearson(ranks(x), ranks(y))
}

func constant(x []float64) bool {
	for _, v := range x {
		if v != x[0] {
			return false
		}
	}
	return true
}

func ranks(x []float64) []float64 {
	idx := make([]int, len(x))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return x[idx[a]] < x[idx[b]] })
	r := make([]float64, len(x))
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && x[idx[j+1]] == x[idx[i]] {
			j++
		}
		avg := float64(i+j)/2 + 1
		for k := i; k <= j; k++ {
			r[idx[k]] = avg
		}
		i = j + 1
	}
	return r
}

func pearson(x, y []float64) float64 {
	if constant(x) || constant(y) {
		return math.NaN()
	}
	n := float64(len(x))
	var mx, my float64
	for i := range x {
		mx += x[i] / n
		my += y[i] / n
	}
	var sxy, sxx, syy float64
	for i := range x {
		dx, dy := x[i]-mx, y[i]-my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	if sxx == 0 || syy == 0 {
		return math.NaN()
	}
	return sxy / math.Sqrt(sxx*syy)
}

// TrainTest fits t on train and scores it on test: a model trained on one data set and
// judged on another (muxmatch eval --test). The report has one fold named held.
func TrainTest(train, test []profile.Colocation, t Trainer, held string) (Report, error) {
	if len(train) == 0 || len(test) == 0 {
		return Report{}, fmt.Errorf("need training and test co-locations (have %d and %d)", len(train), len(test))
	}
	p, err := t.Fit(Samples(train))
	if err != nil {
		return Report{}, err
	}
	var pred, truth []float64
	for _, s := range Samples(test) {
		pred = append(pred, p.Predict(s.A, s.B))
		truth = append(truth, s.Tput)
	}
	f := Fold{Held: held, Train: 2 * len(train), Test: len(pred), MAE: MAE(pred, truth), Spearman: Spearman(pred, truth)}
	return Report{Model: p.Name(), Folds: []Fold{f}, MAE: f.MAE, Spearman: f.Spearman, FoldSpearman: f.Spearman}, nil
}
