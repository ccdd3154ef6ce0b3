package guard

import "github.com/muxflow/muxflow/muxd/procfs"

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
		st, err := procfs.Read(pid)
		if err != nil {
			return "", false
		}
		pid = st.PPID
	}
	return "", false
}
