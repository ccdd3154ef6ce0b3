package alloc

import (
	"math"
	"testing"
	"time"
)

func TestLaunchTime(t *testing.T) {
	var l LaunchTime
	if m, w := l.Mean(); m != 0 || w != 0 {
		t.Fatal("a LaunchTime with no readings has a mean")
	}
	l.Observe(3*time.Millisecond, 3*time.Millisecond, 1)
	if m, _ := l.Mean(); m != 0 {
		t.Fatalf("one launch measured gave a mean %v, want none until %d", m, launchTimeMin)
	}
	for range 5 {
		l.Observe(40*time.Millisecond, 10*time.Millisecond, 10) // a quarter of it wide
	}
	if m, w := l.Mean(); m < 3*time.Millisecond || m > 4*time.Millisecond || w < 900*time.Microsecond || w > 1100*time.Microsecond {
		t.Errorf("readings of 4 ms a launch, 1 ms of it wide, gave %v and %v", m, w)
	}
	// Readings weigh by their launches: a second of many short launches moves the mean
	// more than one long launch does.
	l.Observe(time.Millisecond, 0, 100)
	if m, _ := l.Mean(); m > time.Millisecond {
		t.Errorf("100 launches of 10 µs after 4 ms ones: mean %v, want under 1 ms", m)
	}
	// A container's own word: nothing it writes makes a mean above the bound or below 0,
	// a wide part above the whole, and a reading of no launches changes nothing.
	var h LaunchTime
	for range 10 {
		h.Observe(time.Duration(math.MaxInt64), time.Duration(math.MaxInt64), 1)
		h.Observe(-time.Hour, -time.Hour, 1)
		h.Observe(time.Millisecond, time.Hour, 1)
		h.Observe(time.Hour, time.Hour, 0)
	}
	if m, w := h.Mean(); m < 0 || m > maxLaunchTime || w < 0 || w > m {
		t.Errorf("hostile readings gave a mean of %v, %v of it wide", m, w)
	}
	var big LaunchTime
	big.Observe(time.Second, time.Second, math.MaxUint64)
	if m, w := big.Mean(); m != 0 || w != 0 {
		t.Errorf("a second over 2^64 launches gave %v a launch (%v wide), want 0", m, w)
	}
}

func TestKernelRisk(t *testing.T) {
	for _, tc := range []struct {
		offline, online time.Duration
		risky           bool
	}{
		{3 * time.Millisecond, 40 * time.Microsecond, true},     // 75×: the random sweep's worst draw
		{500 * time.Microsecond, 100 * time.Microsecond, true},  // 5×: h100-short-fill
		{time.Millisecond, 1500 * time.Microsecond, false},      // shorter than the online kernels (h100-fill-long)
		{400 * time.Microsecond, 300 * time.Microsecond, false}, // 1.33×: held on every draw
		{90 * time.Microsecond, 10 * time.Microsecond, false},   // 9×, but shorter than RiskMinKernel
		{time.Millisecond, 0, false},                            // online length not learned yet
		{0, 10 * time.Microsecond, false},                       // offline not measured
	} {
		ratio, risky := KernelRisk(tc.offline, tc.online)
		if risky != tc.risky {
			t.Errorf("KernelRisk(%v, %v) = %.2f, %v; want risky %v", tc.offline, tc.online, ratio, risky, tc.risky)
		}
	}
}
