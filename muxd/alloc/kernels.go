package alloc

import (
	"math"
	"time"

	"github.com/muxflow/muxflow/matcher/profile"
)

// Kernel and request lengths, measured for profile.KernelRisk.

const (
	// launchTimeDecay weighs the earlier readings of a LaunchTime at each new one (read
	// once a second: a memory of about five seconds).
	launchTimeDecay = 0.8
	// launchTimeMin is how many measured launches (weighted) a LaunchTime needs.
	launchTimeMin = 4
	// busySpanDecay weighs the earlier readings of a BusySpan at each new one (read every
	// period: a memory of about three seconds at the default 100 ms).
	busySpanDecay = 0.97
	// busySpanMin is how many busy periods (weighted) a BusySpan needs.
	busySpanMin = 8
)

// LaunchTime is an offline container's measured launches (ctlblock.Usage's GPUTime,
// GPUTimeSqUS2 and MeasuredLaunches since the last reading), as decayed sums so that a
// second with many short launches and one with a few long ones weigh by what they hold.
type LaunchTime struct {
	time, sq, n float64 // seconds of GPU time, its squares per launch (s²), launches
}

// Observe adds one reading: gpu measured over n launches, sqUS2 the sum of their GPU
// times squared in µs².
func (l *LaunchTime) Observe(gpu time.Duration, sqUS2, n uint64) {
	if n == 0 {
		return
	}
	w := float64(n)
	per := min(max(gpu, 0)/time.Duration(min(n, math.MaxInt64)), profile.MaxKernel).Seconds()
	// Σt² ≥ (Σt)²/n, and no launch is longer than MaxKernel: a container's own word is
	// kept within what its GPU time allows.
	sq := clamp(float64(sqUS2)*1e-12/w, per*per, per*profile.MaxKernel.Seconds())
	l.time = launchTimeDecay*l.time + per*w
	l.sq = launchTimeDecay*l.sq + sq*w
	l.n = launchTimeDecay*l.n + w
}

// Mean is the GPU time per launch, and met how long the launch in flight at a random
// moment runs (Σt² ÷ Σt: an online request arriving then waits for up to that); both 0
// until enough launches were measured.
func (l *LaunchTime) Mean() (perLaunch, met time.Duration) {
	if l.n < launchTimeMin || l.time <= 0 {
		return 0, 0
	}
	return seconds(l.time / l.n), seconds(l.sq / l.time)
}

// BusySpan is a GPU's online busy periods' mean length (the signal page's busy_ns and
// busy_spans since the last reading: from the launch that sets the slot to the
// synchronisation that clears it, a request for a service that synchronises once a
// request), as decayed sums.
type BusySpan struct {
	ns, n float64
}

// Observe adds one reading: busy over spans periods.
func (b *BusySpan) Observe(busy time.Duration, spans uint64) {
	if spans == 0 {
		return
	}
	w := float64(spans)
	per := min(max(busy, 0)/time.Duration(min(spans, math.MaxInt64)), profile.MaxKernel)
	b.ns = busySpanDecay*b.ns + float64(per)*w
	b.n = busySpanDecay*b.n + w
}

// Mean is the busy periods' mean length; 0 until enough were seen.
func (b *BusySpan) Mean() time.Duration {
	if b.n < busySpanMin {
		return 0
	}
	return time.Duration(b.ns / b.n)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
