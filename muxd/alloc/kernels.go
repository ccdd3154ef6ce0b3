package alloc

import (
	"math"
	"time"

	"github.com/muxflow/muxflow/matcher/profile"
)

// An offline container's kernel lengths, measured for profile.KernelRisk.

const (
	// launchTimeDecay weighs the earlier readings of a LaunchTime at each new one (read
	// once a second: a memory of about five seconds).
	launchTimeDecay = 0.8
	// launchTimeMin is how many measured launches (weighted) a LaunchTime needs.
	launchTimeMin = 4
)

// LaunchTime is an offline container's GPU time per launch as its libxcuda measured it
// (ctlblock.Usage's GPUTime over MeasuredLaunches), and the part of it its wide launches
// (at least half the SMs: WideGPUTime) took, as ratios of decayed sums so that a second
// with many short launches and one with a few long ones weigh by their launches.
type LaunchTime struct {
	time, wide, n float64 // decayed sums: seconds of GPU time, of it wide, measured launches
}

// Observe adds one reading: gpu measured over n launches since the last one, wide of it
// in wide launches.
func (l *LaunchTime) Observe(gpu, wide time.Duration, n uint64) {
	if n == 0 {
		return
	}
	per := min(max(gpu, 0)/time.Duration(min(n, math.MaxInt64)), profile.MaxKernel)
	perWide := min(max(wide, 0)/time.Duration(min(n, math.MaxInt64)), per)
	w := float64(n)
	l.time = launchTimeDecay*l.time + per.Seconds()*w
	l.wide = launchTimeDecay*l.wide + perWide.Seconds()*w
	l.n = launchTimeDecay*l.n + w
}

// Mean is the GPU time per launch, and wide the part of it in wide launches; both 0
// until enough launches were measured.
func (l *LaunchTime) Mean() (all, wide time.Duration) {
	if l.n < launchTimeMin {
		return 0, 0
	}
	return time.Duration(l.time / l.n * float64(time.Second)), time.Duration(l.wide / l.n * float64(time.Second))
}

// LaunchCost is the GPU time per online launch the allocator learned in calm periods
// (NVML's utilisation of the online processes over their launch rate); 0 until learned.
func (g *GPU) LaunchCost() time.Duration {
	return time.Duration(g.costAvg * float64(time.Second))
}
