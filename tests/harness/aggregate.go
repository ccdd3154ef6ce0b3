package harness

import (
	"fmt"
	"maps"
	"math"
	"slices"
)

// aggregate sets the report's results from its passes: medians of every figure, sums
// of errors and evictions, and the timeline of the pass whose online request p99 is the
// median.
func (r *Report) aggregate() {
	if len(r.Passes) == 0 {
		return
	}
	if len(r.Passes) == 1 {
		r.OfflineAlone, r.Results = r.Passes[0].OfflineAlone, r.Passes[0].Results
		return
	}
	r.OfflineAlone = nil
	for j := range r.Passes[0].OfflineAlone {
		r.OfflineAlone = append(r.OfflineAlone, median(r.Passes, func(p Pass) float64 { return p.OfflineAlone[j] }))
	}
	r.Results = nil
	for i, first := range r.Passes[0].Results {
		all := make([]Result, len(r.Passes))
		for k, p := range r.Passes {
			all[k] = p.Results[i]
		}
		if i := slices.IndexFunc(all, func(x Result) bool { return x.Skipped != "" }); i >= 0 {
			r.Results = append(r.Results, all[i])
			continue
		}
		m := func(f func(Result) float64) float64 { return median(all, f) }
		out := Result{
			Strategy: first.Strategy,
			ReqP50:   m(func(x Result) float64 { return x.ReqP50 }), ReqP99: m(func(x Result) float64 { return x.ReqP99 }),
			GPUP50: m(func(x Result) float64 { return x.GPUP50 }), GPUP99: m(func(x Result) float64 { return x.GPUP99 }),
			HostP50: m(func(x Result) float64 { return x.HostP50 }), HostP99: m(func(x Result) float64 { return x.HostP99 }),
			BusyPerRequest: m(func(x Result) float64 { return x.BusyPerRequest }),
			OfflineNorm:    m(func(x Result) float64 { return x.OfflineNorm }),
			Util:           m(func(x Result) float64 { return x.Util }), SMActivity: m(func(x Result) float64 { return x.SMActivity }),
		}
		for j := range first.OfflineItPerS {
			out.OfflineItPerS = append(out.OfflineItPerS, m(func(x Result) float64 { return x.OfflineItPerS[j] }))
		}
		// The timeline shown is a real pass: the one at the median request p99.
		byP99 := slices.Clone(all)
		slices.SortFunc(byP99, func(a, b Result) int { return cmpFloat(a.ReqP99, b.ReqP99) })
		mid := byP99[(len(byP99)-1)/2]
		out.Samples, out.Trace, out.Window, out.Changes = mid.Samples, mid.Trace, mid.Window, mid.Changes
		for k, x := range all {
			out.Errors += x.Errors
			out.Evictions += x.Evictions
			out.Requests += x.Requests
			out.SimStalls += x.SimStalls
			out.SimStalledMs += x.SimStalledMs
			for _, n := range x.Notes {
				out.Notes = append(out.Notes, fmt.Sprintf("pass %d: %s", k+1, n))
			}
			out.KernelRisks = noteRisks(out.KernelRisks, x.KernelRisks)
			if len(x.Confinement) > 0 {
				if out.Confinement == nil {
					out.Confinement = map[string]string{}
				}
				maps.Copy(out.Confinement, x.Confinement)
			}
		}
		r.Results = append(r.Results, out)
	}
}

// ratio is strategy st's figure f over online-alone's: the median of the ratios within
// each pass (each pair measured under the same machine load), NaN if either is missing.
func (r *Report) ratio(st Strategy, f func(Result) float64) float64 {
	var v []float64
	for _, p := range r.Passes {
		var x, base *Result
		for i := range p.Results {
			if p.Results[i].Strategy == st {
				x = &p.Results[i]
			}
			if p.Results[i].Strategy == OnlineAlone {
				base = &p.Results[i]
			}
		}
		if x == nil || base == nil || x.Skipped != "" || base.Skipped != "" {
			continue
		}
		if b := f(*base); b > 0 && !math.IsNaN(f(*x)) {
			v = append(v, f(*x)/b)
		}
	}
	if len(v) == 0 {
		return math.NaN()
	}
	return median(v, func(x float64) float64 { return x })
}

func median[T any](xs []T, f func(T) float64) float64 {
	var v []float64
	for _, x := range xs {
		if y := f(x); !math.IsNaN(y) {
			v = append(v, y)
		}
	}
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
