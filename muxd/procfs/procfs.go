// Package procfs reads the little muxd needs to know about a host process from
// /proc/PID/stat: whether it still runs, its parent, and its start time (which tells a
// recycled pid from the process that was registered).
package procfs

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrGone is returned for a process that does not exist or has exited (a zombie: only
// its parent has not collected it yet).
var ErrGone = errors.New("process has exited")

// Stat is the part of /proc/PID/stat muxd uses.
type Stat struct {
	// State is the one-letter state (R, S, D, Z, ...).
	State byte
	// PPID is the parent's pid.
	PPID int
	// StartTicks is the start time in clock ticks since boot (field 22).
	StartTicks uint64
	// Flags are the kernel's PF_* flags (field 9).
	Flags uint64
}

// PFKthread is the flag of a kernel thread (include/linux/sched.h).
const PFKthread = 0x00200000

// KernelThread reports whether the process is a kernel thread.
func (s Stat) KernelThread() bool { return s.Flags&PFKthread != 0 }

// Read parses /proc/PID/stat. A missing or exited process gives ErrGone.
func Read(pid int) (Stat, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, fmt.Errorf("process %d: %w", pid, ErrGone)
	}
	return parse(pid, string(data))
}

func parse(pid int, s string) (Stat, error) {
	// The command name (field 2) is in parentheses and may hold spaces or ')'.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return Stat{}, fmt.Errorf("process %d: malformed stat", pid)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("process %d: malformed stat", pid)
	}
	st := Stat{State: f[0][0]}
	if st.State == 'Z' || st.State == 'X' {
		return Stat{}, fmt.Errorf("process %d: %w", pid, ErrGone)
	}
	ppid, err1 := strconv.Atoi(f[1])
	ticks, err2 := strconv.ParseUint(f[19], 10, 64)
	flags, err3 := strconv.ParseUint(f[6], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return Stat{}, fmt.Errorf("process %d: malformed stat: %w", pid, err)
	}
	st.PPID, st.StartTicks, st.Flags = ppid, ticks, flags
	return st, nil
}

// Alive reports whether pid exists and has not exited.
func Alive(pid int) bool {
	_, err := Read(pid)
	return err == nil
}
