package gpucontainer

import "strings"

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
