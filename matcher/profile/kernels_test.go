package profile

import (
	"testing"
	"time"
)

func TestKernelRisk(t *testing.T) {
	for _, tc := range []struct {
		offline, online time.Duration
		risky           bool
	}{
		{3 * time.Millisecond, 240 * time.Microsecond, true},      // 12.5×: the random sweep's worst draw
		{500 * time.Microsecond, 100 * time.Microsecond, true},    // 5×
		{1006 * time.Microsecond, 471 * time.Microsecond, true},   // 2.1×: rand-1-002 as measured, 2.09× alone's p99
		{3107 * time.Microsecond, 2263 * time.Microsecond, false}, // 1.4×: rand-1-036 as measured, which held
		{time.Millisecond, 4500 * time.Microsecond, false},        // shorter than a request (h100-fill-long)
		{3 * time.Millisecond, 14400 * time.Microsecond, false},   // a fifth of a request (rand-1-006)
		{90 * time.Microsecond, 10 * time.Microsecond, false},     // 9×, but shorter than RiskMinKernel
		{time.Millisecond, 0, false},                              // online length not learned yet
		{0, 10 * time.Microsecond, false},                         // offline not measured
	} {
		ratio, risky := KernelRisk(tc.offline, tc.online)
		if risky != tc.risky {
			t.Errorf("KernelRisk(%v, %v) = %.2f, %v; want risky %v", tc.offline, tc.online, ratio, risky, tc.risky)
		}
	}
}

func TestDelaysOnline(t *testing.T) {
	job := Profile{KernelUS: 3000}
	for _, tc := range []struct {
		online Profile
		want   bool
	}{
		{Profile{RequestUS: 240, WidthPct: 100}, true},
		{Profile{RequestUS: 240, WidthPct: 60}, false},   // muxd fits the job beside narrower kernels
		{Profile{RequestUS: 2000, WidthPct: 100}, false}, // requests nearly as long
		{Profile{KernelUS: 40, WidthPct: 100}, false},    // the service's requests unknown
		{Profile{RequestUS: 240}, false},                 // its width unknown
	} {
		if got := job.DelaysOnline(tc.online); got != tc.want {
			t.Errorf("job of 3 ms kernels beside %+v: %v, want %v", tc.online, got, tc.want)
		}
	}
	if (Profile{}).DelaysOnline(Profile{RequestUS: 240, WidthPct: 100}) {
		t.Error("a job of unknown kernels is a risk")
	}
}
