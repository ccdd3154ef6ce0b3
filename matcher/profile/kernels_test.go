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
		{3 * time.Millisecond, 40 * time.Microsecond, true},     // 75×: the random sweep's worst draw
		{500 * time.Microsecond, 100 * time.Microsecond, true},  // 5×
		{250 * time.Microsecond, 53 * time.Microsecond, false},  // 4.7×: rand-1-005 as measured, which held
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

func TestDelaysOnline(t *testing.T) {
	job := Profile{KernelUS: 3000}
	for _, tc := range []struct {
		online Profile
		want   bool
	}{
		{Profile{KernelUS: 40, WidthPct: 100}, true},
		{Profile{KernelUS: 40, WidthPct: 60}, false},    // muxd fits the job beside narrower kernels
		{Profile{KernelUS: 2000, WidthPct: 100}, false}, // kernels nearly as long
		{Profile{WidthPct: 100}, false},                 // the service's length unknown
		{Profile{KernelUS: 40}, false},                  // its width unknown
	} {
		if got := job.DelaysOnline(tc.online); got != tc.want {
			t.Errorf("3 ms job beside %+v: %v, want %v", tc.online, got, tc.want)
		}
	}
	if (Profile{}).DelaysOnline(Profile{KernelUS: 40, WidthPct: 100}) {
		t.Error("a job of unknown kernels is a risk")
	}
}
