package alloc

import (
	"math"
	"time"
)

// Kernel lengths: the one pairing no offline share protects. No hold removes an offline
// block that is already running, so where the offline kernels may hold SMs the online
// kernels need, every online kernel that arrives while one runs waits for it. When the
// offline kernels are several times as long as the online ones, that wait is several
// online kernels long on every request that meets one, however small the offline share:
// only confining the job's SMs (muxflow.io/sm-percent) or pairing it with another
// service helps. muxd says so (KernelRisk) instead of promising what no share can give.

const (
	// RiskRatio is how many times as long as the online kernels an offline container's
	// measured kernels must be to be reported. On gpusim's random scenarios
	// (docs/results.md, *Random scenarios*), GPU-filling online kernels beside offline
	// kernels at most 1.33 times as long held the p99 line on every draw, and beside
	// kernels 5 to 300 times as long missed it on every draw.
	RiskRatio = 3
	// RiskMinKernel: shorter offline kernels are never reported; waiting for one costs
	// less than an online request's own launches and synchronisation.
	RiskMinKernel = 100 * time.Microsecond
	// launchTimeDecay weighs the earlier readings of a LaunchTime at each new one (read
	// once a second: a memory of about five seconds).
	launchTimeDecay = 0.8
	// launchTimeMin is how many measured launches (weighted) a LaunchTime needs.
	launchTimeMin = 4
	// maxLaunchTime bounds one reading's time per launch: a container's usage block is
	// its own word, and no kernel runs for minutes.
	maxLaunchTime = 10 * time.Second
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
	per := min(max(gpu, 0)/time.Duration(min(n, math.MaxInt64)), maxLaunchTime)
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

// KernelRisk says whether offline kernels of length offline delay the online kernels of
// length online (both GPU time per launch; 0: unknown) past what any offline share can
// prevent; ratio is offline ÷ online. Where the offline blocks may hold SMs the online
// kernels need, offline is the GPU time of its wide launches per launch (a job of long
// but narrow kernels leaves the online ones most of the SMs); where the two overfill the
// memory bus, all of it.
func KernelRisk(offline, online time.Duration) (ratio float64, risky bool) {
	if offline <= 0 || online <= 0 {
		return 0, false
	}
	ratio = float64(offline) / float64(online)
	return ratio, offline >= RiskMinKernel && ratio >= RiskRatio
}
