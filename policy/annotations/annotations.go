// Package annotations names the muxflow.io/* pod and container annotations and parses their
// values, once, for every reader: the node (policy/classify, muxflow-runtime) and the
// scheduler extender (matcher/extender). Each parser takes the annotation's key so that its
// error is one sentence naming that annotation, meant for the person who wrote the pod.
package annotations

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The annotations. Class, GPUMemory and SMPercent are the node policy's defaults
// ([classify] in policy/default.toml may rename them on a node); the others are fixed.
const (
	Prefix = "muxflow.io/"
	// Class is "online" or "offline".
	Class = "muxflow.io/class"
	// GPUMemory caps the container's device memory per GPU: "8Gi", "8GiB", "20GB".
	GPUMemory = "muxflow.io/gpu-memory"
	// SMPercent is the container's SM share ceiling, a whole percentage: "30" or "30%".
	SMPercent = "muxflow.io/sm-percent"
	// Profile is an offline pod's solo profile, JSON (matcher/profile.Profile).
	Profile = "muxflow.io/profile"
	// GPUType lists the GPU models an offline pod accepts: "H200, A100".
	GPUType = "muxflow.io/gpu-type"
	// GPU is written by the scheduler extender when it binds an offline pod: the UUID of
	// the GPU the plan chose. On the node it makes the container a GPU container with
	// exactly that GPU.
	GPU = "muxflow.io/gpu"
	// PlanGeneration is written with GPU: the plan generation that chose it.
	PlanGeneration = "muxflow.io/plan-generation"
)

// MaxValueLen bounds any value read here; real ones are a few bytes (Profile a few hundred).
const MaxValueLen = 4096

// Error is an annotation whose value cannot be used. Its message is one sentence naming the
// annotation.
type Error struct {
	Key    string
	Reason string
}

func (e *Error) Error() string {
	return fmt.Sprintf("muxflow: annotation %s: %s", e.Key, e.Reason)
}

func bad(key, format string, args ...any) error {
	return &Error{Key: key, Reason: fmt.Sprintf(format, args...)}
}

// ParseClass reads "online" or "offline" (surrounding spaces ignored).
func ParseClass(key, v string) (string, error) {
	switch t := strings.TrimSpace(v); t {
	case "online", "offline":
		return t, nil
	}
	return "", bad(key, "%q is not online or offline", Truncate(v))
}

var memUnits = []struct {
	suffix string
	mult   float64
}{
	// Longest suffixes first. Ki/Mi/Gi/Ti are Kubernetes quantities' binary units, KiB.. the
	// same; K/M/G/T are Kubernetes' decimal units, KB.. the same.
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1e3}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
	{"B", 1},
}

// ParseMemory reads a device memory size in bytes. Binary units: Ki, Mi, Gi, Ti (as in
// Kubernetes resources) or KiB, MiB, GiB, TiB; decimal units: K, M, G, T (as in Kubernetes)
// or KB, MB, GB, TB; B for bytes. "8Gi" and "8GiB" are 8×2³⁰ bytes, "20G" and "20GB"
// 20×10⁹. A number without a unit is refused (the extender once read it as MiB and the node
// as bytes), except 0. The result may be 0; callers that need a cap refuse it.
func ParseMemory(key, v string) (uint64, error) {
	if len(v) > MaxValueLen {
		return 0, bad(key, "value is %d bytes long, not a size like \"8Gi\"", len(v))
	}
	t := strings.TrimSpace(v)
	mult, num, unit := 1.0, t, false
	for _, u := range memUnits {
		if strings.HasSuffix(t, u.suffix) {
			mult, num, unit = u.mult, strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), true
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) || strings.ContainsAny(num, "xXpP_") {
		return 0, bad(key, "%q is not a size like \"8Gi\", \"8GiB\" or \"20GB\"", Truncate(v))
	}
	if !unit && f != 0 {
		return 0, bad(key, "%q needs a unit, like \"%sGi\" or \"%sGB\"", Truncate(t), Truncate(t), Truncate(t))
	}
	b := f * mult
	if b >= 1<<62 {
		return 0, bad(key, "%q is too large", Truncate(v))
	}
	return uint64(math.Round(b)), nil
}

// ParseSMPercent reads a whole percentage between 1 and 100, "30" or "30%".
func ParseSMPercent(key, v string) (int, error) {
	n, err := ParseWholePercent(key, v)
	if err != nil || n < 1 || n > 100 {
		return 0, bad(key, "%q is not a whole percentage between 1 and 100", Truncate(v))
	}
	return n, nil
}

// ParseWholePercent reads a whole percentage, "30" or "30%", leaving its range to the
// caller (the node checks sm-percent against the container's class, policy/classify).
func ParseWholePercent(key, v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), "%"))
	if err != nil || len(v) > 64 {
		return 0, bad(key, "%q is not a whole percentage like \"30\" or \"30%%\"", Truncate(v))
	}
	return n, nil
}

// ParseGPUTypes reads a comma-separated list of GPU models; empty items are dropped.
func ParseGPUTypes(key, v string) ([]string, error) {
	if len(v) > MaxValueLen {
		return nil, bad(key, "value is %d bytes long", len(v))
	}
	var out []string
	for _, t := range strings.Split(v, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out, nil
}

// ParseGPU reads the GPU the extender chose: a GPU UUID ("GPU-…") or index ("0").
func ParseGPU(key, v string) (string, error) {
	t := strings.TrimSpace(v)
	if t == "" || len(t) > 128 {
		return "", bad(key, "%q is not a GPU UUID or index", Truncate(v))
	}
	if _, err := strconv.ParseUint(t, 10, 16); err == nil {
		return t, nil
	}
	if strings.HasPrefix(t, "GPU-") || strings.HasPrefix(t, "MIG-") {
		for _, c := range t[4:] {
			if !(c == '-' || c == '/' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
				return "", bad(key, "%q is not a GPU UUID or index", Truncate(v))
			}
		}
		return t, nil
	}
	return "", bad(key, "%q is not a GPU UUID or index", Truncate(v))
}

// Truncate shortens a value quoted in an error to 40 bytes.
func Truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
