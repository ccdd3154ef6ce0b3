package alloc

import (
	"math"
	"testing"
	"time"

	"github.com/muxflow/muxflow/matcher/profile"
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
	if m, w := h.Mean(); m < 0 || m > profile.MaxKernel || w < 0 || w > m {
		t.Errorf("hostile readings gave a mean of %v, %v of it wide", m, w)
	}
	var big LaunchTime
	big.Observe(time.Second, time.Second, math.MaxUint64)
	if m, w := big.Mean(); m != 0 || w != 0 {
		t.Errorf("a second over 2^64 launches gave %v a launch (%v wide), want 0", m, w)
	}
}
