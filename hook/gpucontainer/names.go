package gpucontainer

import "strings"

// validGPU accepts what muxd's API accepts as a GPU name: "all", an index of up to three
// digits, a GPU- UUID or a MIG- identifier. It is written out by hand rather than as a
// regular expression because muxflow-runtime runs on every runtime command, and compiling
// the expression at start-up costs more than the rest of the fast path.
func validGPU(s string) bool {
	switch {
	case s == "all":
		return true
	case len(s) >= 1 && len(s) <= 3 && allBytes(s, isDigit):
		return true
	case strings.HasPrefix(s, "GPU-"):
		rest := s[4:]
		return len(rest) >= 8 && len(rest) <= 64 && allBytes(rest, func(c byte) bool { return isHex(c) || c == '-' })
	case strings.HasPrefix(s, "MIG-"):
		rest := s[4:]
		return len(rest) >= 1 && len(rest) <= 80 && allBytes(rest, func(c byte) bool { return isAlnum(c) || c == '/' || c == '-' })
	}
	return false
}

// gpuIndexFromDevice returns N for "/dev/nvidiaN" (N of one to three digits).
func gpuIndexFromDevice(path string) (string, bool) {
	n, ok := strings.CutPrefix(path, "/dev/nvidia")
	if !ok || len(n) < 1 || len(n) > 3 || !allBytes(n, isDigit) {
		return "", false
	}
	return n, true
}

func allBytes(s string, f func(byte) bool) bool {
	for i := 0; i < len(s); i++ {
		if !f(s[i]) {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isHex(c byte) bool   { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
func isAlnum(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
