package registry

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ProcFS checks processes through /proc.
type ProcFS struct{ Root string }

// StartTicks reads field 22 (starttime) of /proc/PID/stat.
func (p ProcFS) StartTicks(pid int) (uint64, error) {
	root := p.Root
	if root == "" {
		root = "/proc"
	}
	data, err := os.ReadFile(root + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("process %d does not exist", pid)
	}
	// The command name (field 2) is in parentheses and may contain spaces or ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("process %d: malformed stat", pid)
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state); starttime is field 22.
	if len(fields) < 20 {
		return 0, fmt.Errorf("process %d: malformed stat", pid)
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return 0, fmt.Errorf("process %d has exited", pid)
	}
	v, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("process %d: malformed starttime: %w", pid, err)
	}
	return v, nil
}
