package guard

import (
	"os"
	"strconv"
	"strings"
)

// ProcOwner finds the container a process belongs to by following its parent links in
// /proc up to a registered init pid (container processes descend from their init).
func ProcOwner(pid int, inits map[int]string) (string, bool) {
	for range 64 { // bounded: a pid chain is never this deep
		if id, ok := inits[pid]; ok {
			return id, true
		}
		if pid <= 1 {
			return "", false
		}
		ppid, ok := parent(pid)
		if !ok {
			return "", false
		}
		pid = ppid
	}
	return "", false
}

func parent(pid int) (int, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}
