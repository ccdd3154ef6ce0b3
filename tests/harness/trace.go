package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// TraceFlag is the infer option that writes one line per completed request
// ("start_s,latency_ms,gpu_ms,req_ms": scheduled arrival since the run began, arrival
// to completion by the host clock, time on the GPU from the request's events, and
// request latency — arrival to completion with queueing, rebuilt from the arrivals and
// GPU times). When the built infer has it, the timeline plots per-period percentiles of
// request latency; otherwise the online service's kernel time per request from
// gpusim's counters.
const TraceFlag = "--trace"

// TraceSupported reports whether the built infer program knows TraceFlag (its usage
// text names every option).
func (a Artifacts) TraceSupported() bool {
	data, err := os.ReadFile(a.Infer)
	return err == nil && bytes.Contains(data, []byte(TraceFlag+" "))
}

// Request is one completed online request from a trace.
type Request struct {
	Start time.Duration // scheduled arrival
	// LatencyMs is arrival to completion by the host clock; GPUMs the request's
	// GPU-side time; ReqMs its request latency (queueing included, free of host noise).
	LatencyMs float64
	GPUMs     float64
	ReqMs     float64
}

// ParseTrace reads infer's per-request trace; lines that do not start with a number (a
// header, a comment) are skipped; a line of numbers must have all four, with values
// that make sense.
func ParseTrace(r io.Reader) ([]Request, error) {
	var out []Request
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		f := strings.Split(strings.TrimSpace(sc.Text()), ",")
		if _, err := strconv.ParseFloat(strings.TrimSpace(f[0]), 64); err != nil {
			continue
		}
		if len(f) < 4 {
			return nil, fmt.Errorf("trace line %d: %q is not start_s,latency_ms,gpu_ms,req_ms", line, sc.Text())
		}
		var v [4]float64
		ok := true
		for i := range v {
			x, err := strconv.ParseFloat(strings.TrimSpace(f[i]), 64)
			if err != nil {
				ok = false
				break
			}
			v[i] = x
		}
		if !ok {
			return nil, fmt.Errorf("trace line %d: %q is not start_s,latency_ms,gpu_ms,req_ms", line, sc.Text())
		}
		for _, x := range v {
			if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
				return nil, fmt.Errorf("trace line %d: %q has a negative or non-finite value", line, sc.Text())
			}
		}
		out = append(out, Request{Start: time.Duration(v[0] * float64(time.Second)), LatencyMs: v[1], GPUMs: v[2], ReqMs: v[3]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	return out, nil
}

// windowPercentiles returns, for each sample period (ending at ends[i]), the p50 and
// p99 of figure f (a latency) of the requests that arrived in it (NaN when none did).
func windowPercentiles(reqs []Request, ends []time.Duration, f func(Request) float64) (p50, p99 []float64) {
	p50, p99 = make([]float64, len(ends)), make([]float64, len(ends))
	var prev time.Duration
	for i, end := range ends {
		var v []float64
		for _, r := range reqs {
			if r.Start >= prev && r.Start < end {
				v = append(v, f(r))
			}
		}
		p50[i], p99[i] = percentile(v, 50), percentile(v, 99)
		prev = end
	}
	return p50, p99
}

// percentile is the nearest-rank percentile (NaN for no values).
func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(k, len(s)-1))]
}
