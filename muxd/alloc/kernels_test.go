package alloc

import (
	"math"
	"testing"
	"time"

	"github.com/muxflow/muxflow/matcher/profile"
)

func TestLaunchTime(t *testing.T) {
	var l LaunchTime
	if p, m := l.Mean(); p != 0 || m != 0 {
		t.Fatal("a LaunchTime with no readings has a mean")
	}
	l.Observe(3*time.Millisecond, 3000*3000, 1)
	if p, _ := l.Mean(); p != 0 {
		t.Fatalf("one launch measured gave a mean %v, want none until %d", p, launchTimeMin)
	}
	// Each second: nine 100 µs launches and one of 9.1 ms. Per launch 1 ms, but the launch
	// in flight at a random moment is the long one 91% of the time: 8.29 ms.
	for range 5 {
		l.Observe(10*time.Millisecond, 9*100*100+9100*9100, 10)
	}
	if p, m := l.Mean(); math.Abs(float64(p-time.Millisecond)) > float64(30*time.Microsecond) ||
		math.Abs(float64(m-8290*time.Microsecond)) > float64(250*time.Microsecond) {
		t.Errorf("a second of nine 100 µs launches and one of 9.1 ms: %v a launch, %v met; want 1ms and 8.29ms", p, m)
	}
	// A container's own word: nothing it writes makes a length negative, longer than
	// profile.MaxKernel, or met shorter than per launch; a reading of no launches changes
	// nothing, nor does one of more launches than there are nanoseconds.
	var h LaunchTime
	for range 10 {
		h.Observe(time.Duration(math.MaxInt64), math.MaxUint64, 1)
		h.Observe(-time.Hour, 0, 1)
		h.Observe(time.Millisecond, 0, 1)
		h.Observe(time.Hour, math.MaxUint64, 0)
	}
	if p, m := h.Mean(); p < 0 || p > profile.MaxKernel || m < p || m > profile.MaxKernel {
		t.Errorf("hostile readings gave %v a launch, %v met", p, m)
	}
	var big LaunchTime
	big.Observe(time.Second, math.MaxUint64, math.MaxUint64)
	if p, m := big.Mean(); p != 0 || m != 0 {
		t.Errorf("a second over 2^64 launches gave %v a launch (%v met), want 0", p, m)
	}
}

func TestBusySpan(t *testing.T) {
	var b BusySpan
	b.Observe(time.Millisecond, 4)
	if b.Mean() != 0 {
		t.Fatalf("4 busy periods gave a mean %v, want none until %d", b.Mean(), busySpanMin)
	}
	for range 10 {
		b.Observe(2*time.Millisecond, 8) // 250 µs each
	}
	if m := b.Mean(); math.Abs(float64(m-250*time.Microsecond)) > float64(time.Microsecond) {
		t.Errorf("busy periods of 250 µs: mean %v", m)
	}
	var h BusySpan
	for range 20 {
		h.Observe(time.Duration(math.MaxInt64), 1)
		h.Observe(-time.Hour, 1)
		h.Observe(time.Hour, 0)
	}
	if m := h.Mean(); m < 0 || m > profile.MaxKernel {
		t.Errorf("hostile readings gave a mean of %v", m)
	}
}
