package annotations

import (
	"errors"
	"strings"
	"testing"
)

func TestParseMemory(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
	}{
		{"8Gi", 8 << 30}, {"8GiB", 8 << 30}, {" 8 GiB ", 8 << 30}, {"512Mi", 512 << 20}, {"1.5Gi", 3 << 29},
		{"20GB", 20e9}, {"20G", 20e9}, {"500M", 500e6}, {"4096B", 4096}, {"1Ti", 1 << 40}, {"0", 0}, {"0Gi", 0},
	} {
		got, err := ParseMemory(GPUMemory, tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseMemory(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, msg string }{
		{"lots", `annotation muxflow.io/gpu-memory: "lots" is not a size like "8Gi", "8GiB" or "20GB"`},
		{"8", `annotation muxflow.io/gpu-memory: "8" needs a unit, like "8Gi" or "8GB"`},
		{"-1Gi", "is not a size"},
		{"8Xi", "is not a size"},
		{"0x10Gi", "is not a size"},
		{"NaNGi", "is not a size"},
		{"1e30TB", "too large"},
		{strings.Repeat("9", 5000), "5000 bytes long"},
	} {
		_, err := ParseMemory(GPUMemory, tc.in)
		var ae *Error
		if !errors.As(err, &ae) || ae.Key != GPUMemory || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("ParseMemory(%.20q) err = %v, want an *Error containing %q", tc.in, err, tc.msg)
		}
		if err != nil && len(err.Error()) > 200 {
			t.Errorf("ParseMemory(%.20q): message is %d bytes; it must stay one short sentence", tc.in, len(err.Error()))
		}
	}
}

func TestParseClassSMGPU(t *testing.T) {
	if c, err := ParseClass(Class, " offline "); c != "offline" || err != nil {
		t.Errorf("ParseClass = %q, %v", c, err)
	}
	if _, err := ParseClass("example.com/tier", "batch"); err == nil || !strings.Contains(err.Error(), `annotation example.com/tier: "batch" is not online or offline`) {
		t.Errorf("ParseClass(batch) err = %v", err)
	}
	for in, want := range map[string]int{"30": 30, "30%": 30, " 100 ": 100} {
		if n, err := ParseSMPercent(SMPercent, in); n != want || err != nil {
			t.Errorf("ParseSMPercent(%q) = %d, %v", in, n, err)
		}
	}
	for _, in := range []string{"0", "101", "0.3", "x"} {
		if _, err := ParseSMPercent(SMPercent, in); err == nil || !strings.Contains(err.Error(), "annotation muxflow.io/sm-percent") {
			t.Errorf("ParseSMPercent(%q) err = %v", in, err)
		}
	}
	// The range is the caller's: the node checks it against the container's class.
	for in, want := range map[string]int{"0": 0, "101%": 101, "-5": -5, " 30% ": 30} {
		if n, err := ParseWholePercent(SMPercent, in); n != want || err != nil {
			t.Errorf("ParseWholePercent(%q) = %d, %v", in, n, err)
		}
	}
	for _, in := range []string{"0.3", "x", "", "30%%", strings.Repeat("1", 65)} {
		if _, err := ParseWholePercent(SMPercent, in); err == nil || !strings.Contains(err.Error(), "annotation muxflow.io/sm-percent: ") || !strings.Contains(err.Error(), "is not a whole percentage") {
			t.Errorf("ParseWholePercent(%q) err = %v", in, err)
		}
	}
	for _, in := range []string{"0", "GPU-0a1b2c3d-0000-0000-0000-000000000000", "MIG-abc"} {
		if g, err := ParseGPU(GPU, in); g != in || err != nil {
			t.Errorf("ParseGPU(%q) = %q, %v", in, g, err)
		}
	}
	for _, in := range []string{"", "all", "GPU-../x", "gpu0", "99999999"} {
		if _, err := ParseGPU(GPU, in); err == nil || !strings.Contains(err.Error(), "annotation muxflow.io/gpu:") {
			t.Errorf("ParseGPU(%q) err = %v", in, err)
		}
	}
	if ts, _ := ParseGPUTypes(GPUType, "H200, ,A100"); len(ts) != 2 || ts[0] != "H200" || ts[1] != "A100" {
		t.Errorf("ParseGPUTypes = %q", ts)
	}
}
