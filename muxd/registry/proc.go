package registry

import "github.com/muxflow/muxflow/muxd/procfs"

// ProcFS checks processes through /proc.
type ProcFS struct{}

// StartTicks returns the process's start time (field 22 of /proc/PID/stat).
func (ProcFS) StartTicks(pid int) (uint64, error) {
	st, err := procfs.Read(pid)
	return st.StartTicks, err
}
