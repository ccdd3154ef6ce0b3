package predict

import (
	"math"

	"github.com/muxflow/muxflow/matcher/profile"
)

// Analytic predicts without training, from how space sharing behaves: two
// workloads whose demands on the GPU's compute (utilisation) and memory
// bandwidth fit in one GPU barely slow each other; beyond that they share
// the contended resource in proportion to their demand, so each gets about
// 1/(total demand) of its solo speed. SM activity, when both sides report
// it, measures compute demand better than utilisation (a kernel can "run"
// on a few SMs), so it is used instead.
type Analytic struct {
	// Overhead is the slowdown of sharing itself (context switches, cache
	// interference) applied even when demands fit; 0.05 by default.
	Overhead float64
}

// Name implements Predictor.
func (Analytic) Name() string { return "analytic" }

// Predict implements Predictor.
func (m Analytic) Predict(a, b profile.Profile) float64 {
	over := m.Overhead
	if over == 0 {
		over = 0.05
	}
	ca, cb := a.GPUUtil, b.GPUUtil
	if a.SMActivity != nil && b.SMActivity != nil {
		ca, cb = *a.SMActivity, *b.SMActivity
	}
	compute := (ca + cb) / 100
	bw := (a.MemBWUtil + b.MemBWUtil) / 100
	demand := math.Max(1, math.Max(compute, bw))
	// A workload that barely uses the GPU is held back less by contention:
	// its kernels are a small part of its iteration time.
	share := ca / 100
	slow := 1 - share + share/demand
	return clampTput(slow * (1 - over*cb/100))
}
