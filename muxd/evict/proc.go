package evict

import (
	"os"
	"strconv"
	"strings"
)

// alive reports whether pid exists and is not a zombie (a zombie has exited; only its
// parent has not collected it yet).
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	state := s[i+2]
	return state != 'Z' && state != 'X'
}
