// Package measure holds what the matcher's benchmark programs need to report timings
// honestly on a shared machine: the process's CPU time beside wall time, the load
// average at the time, and medians.
package measure

import (
	"os"
	"slices"
	"strings"
	"syscall"
	"time"
)

// CPUSeconds is the CPU time (user + system) this process has used so far.
func CPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// LoadAverage is the 1, 5 and 15 minute load averages, or "" when unknown.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// Median of x (the upper middle for an even count); x is not modified.
func Median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	return s[len(s)/2]
}
