// Package predict estimates how fast a workload runs when it shares a GPU
// with another: the normalised throughput (speed shared / speed alone) that
// weighs each edge of the cluster matching. A small neural network learns it
// from the co-locations a cluster records; an analytic model needs no
// training and is the fallback; mean and linear-regression baselines exist to
// judge both.
package predict

import (
	"math"

	"github.com/muxflow/muxflow/matcher/profile"
)

// Predictor estimates the normalised throughput of a when co-located with b.
type Predictor interface {
	Predict(a, b profile.Profile) float64
	// Name says which model this is, for logs and reports.
	Name() string
}

// Trainer fits a predictor to samples.
type Trainer interface {
	Fit(samples []Sample) (Predictor, error)
}

// Sample is one training example: the throughput of A next to B.
type Sample struct {
	A, B profile.Profile
	Tput float64
}

// Samples turns co-location records into examples, two per record (each job
// seen as the one whose throughput is predicted).
func Samples(recs []profile.Colocation) []Sample {
	out := make([]Sample, 0, 2*len(recs))
	for _, c := range recs {
		out = append(out, Sample{A: c.A, B: c.B, Tput: c.ANormTput}, Sample{A: c.B, B: c.A, Tput: c.BNormTput})
	}
	return out
}

// FeatureNames lists the model inputs in order; model files record them so a
// file trained on other features is refused rather than misread.
var FeatureNames = []string{
	"a_gpu_util", "a_mem_bw_util", "a_memory", "a_amp", "a_log_batch", "a_sm_activity", "a_sm_known",
	"b_gpu_util", "b_mem_bw_util", "b_memory", "b_amp", "b_log_batch", "b_sm_activity", "b_sm_known",
	"sum_gpu_util", "sum_mem_bw_util", "sum_memory", "analytic_tput",
}

// memoryScale normalises memory to about the size of a data-centre GPU.
const memoryScale = 32768.0

// Features maps a pair of solo profiles to the model inputs. Utilisations
// become fractions; unknown SM activity is 0 with its "known" flag 0, so a
// model can tell "unmeasured" from "idle". The analytic model's estimate is
// an input too: learning a correction to a sound prior generalises better
// from a few hundred co-locations than learning the whole curve.
func Features(a, b profile.Profile) []float64 {
	f := make([]float64, 0, len(FeatureNames))
	f = appendProfile(f, a)
	f = appendProfile(f, b)
	return append(f, (a.GPUUtil+b.GPUUtil)/100, (a.MemBWUtil+b.MemBWUtil)/100, (a.MemoryMiB+b.MemoryMiB)/memoryScale,
		Analytic{}.Predict(a, b))
}

func appendProfile(f []float64, p profile.Profile) []float64 {
	amp, lb, sm, known := 0.0, 0.0, 0.0, 0.0
	if p.AMP {
		amp = 1
	}
	if p.BatchSize > 0 {
		lb = math.Log2(float64(p.BatchSize)) / 10
	}
	if p.SMActivity != nil {
		sm, known = *p.SMActivity/100, 1
	}
	return append(f, p.GPUUtil/100, p.MemBWUtil/100, p.MemoryMiB/memoryScale, amp, lb, sm, known)
}

// clampTput keeps predictions in the range measurements can take.
func clampTput(x float64) float64 {
	if math.IsNaN(x) {
		return 0
	}
	return math.Max(0, math.Min(profile.MaxNormTput, x))
}
