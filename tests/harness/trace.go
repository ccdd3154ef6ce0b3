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
// ("start_s,latency_ms,gpu_ms": scheduled arrival since the run began, arrival to
// completion, and time on the GPU from the request's events). When the built infer has
// it, the timeline plots per-period latency percentiles; otherwise the online
// service's kernel time per request from gpusim's counters.
const TraceFlag = "--trace"

// TraceSupported reports whether the built infer program knows TraceFlag (its usage
// text names every option).
func (a Artifacts) TraceSupported() bool {
	data, err := os.ReadFile(a.Infer)
	return err == nil && bytes.Contains(data, []byte(TraceFlag+" "))
}

// Request is one completed online request from a trace.
type Request struct {
	Start     time.Duration
	LatencyMs float64
	GPUMs     float64
}

// ParseTrace reads infer's per-request trace; lines that are not three numbers (a
// header, a comment) are skipped, values that make no sense are errors.
func ParseTrace(r io.Reader) ([]Request, error) {
	var out []Request
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		f := strings.Split(strings.TrimSpace(sc.Text()), ",")
		if len(f) < 3 {
			continue
		}
		var v [3]float64
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
			continue
		}
		for _, x := range v {
			if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
				return nil, fmt.Errorf("trace line %d: %q has a negative or non-finite value", line, sc.Text())
			}
		}
		out = append(out, Request{Start: time.Duration(v[0] * float64(time.Second)), LatencyMs: v[1], GPUMs: v[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	return out, nil
}

// windowPercentiles returns, for each sample period (ending at ends[i]), the p50 and
// p99 of the GPU-side latency of requests that arrived in it (NaN when none did).
func windowPercentiles(reqs []Request, ends []time.Duration) (p50, p99 []float64) {
	p50, p99 = make([]float64, len(ends)), make([]float64, len(ends))
	var prev time.Duration
	for i, end := range ends {
		var v []float64
		for _, r := range reqs {
			if r.Start >= prev && r.Start < end {
				v = append(v, r.GPUMs)
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
