package api

import (
	"strings"
	"testing"
)

func TestValidateID(t *testing.T) {
	for _, ok := range []string{"a", "abc-DEF_1.2", "0", strings.Repeat("x", MaxIDLen), "k8s_POD_web-0_default_1234"} {
		if err := ValidateID(ok); err != nil {
			t.Errorf("ValidateID(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "../x", "a/b", "-a", "_a", ".a", "a b", "a\x00b", "a\n", strings.Repeat("x", MaxIDLen+1), "é"} {
		if err := ValidateID(bad); err == nil {
			t.Errorf("ValidateID(%q) accepted", bad)
		}
	}
}

func TestValidGPU(t *testing.T) {
	for _, ok := range []string{"all", "0", "7", "123", "GPU-5e9d0000-0000-4000-8000-00006a5e0000", "MIG-GPU-5e9d/1/0", "MIG-4f2a1c"} {
		if !ValidGPU(ok) {
			t.Errorf("ValidGPU(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", "1234", "-1", "GPU-", "GPU-xyz12345", "GPU-" + strings.Repeat("a", 65), "MIG-", "MIG-a b", "/dev/nvidia0", "All", "void"} {
		if ValidGPU(bad) {
			t.Errorf("ValidGPU(%q) = true", bad)
		}
	}
}
