// Package procfs reads the little muxd needs to know about a host process from
// /proc/PID/stat: whether it still runs, its parent, and its start time (which tells a
// recycled pid from the process that was registered).
package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"syscall"
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

// Read reads /proc/PID/stat. A process that does not exist or is a zombie is ErrGone.
// muxd reads every registered container's stat every few seconds (and the MPS control
// daemon's twice a second), so this takes three plain system calls (os.ReadFile would
// also register the file with the poller and back) into a buffer on the stack.
func Read(pid int) (Stat, error) {
	var buf [2048]byte
	fd, err := syscall.Open("/proc/"+strconv.Itoa(pid)+"/stat", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return Stat{}, fmt.Errorf("process %d: %w", pid, ErrGone)
	}
	n, err := syscall.Read(fd, buf[:])
	syscall.Close(fd)
	if err != nil || n <= 0 {
		return Stat{}, fmt.Errorf("process %d: %w", pid, ErrGone)
	}
	return parse(pid, buf[:n])
}

func parse(pid int, s []byte) (Stat, error) {
	// The command name (field 2) is in parentheses and may hold spaces or ')'.
	i := bytes.LastIndexByte(s, ')')
	if i < 0 {
		return Stat{}, fmt.Errorf("process %d: malformed stat", pid)
	}
	// Fields from 3 (state) on, by number: 3 state, 4 ppid, 9 flags, 22 start time.
	var state []byte
	var ppid, flags, ticks uint64
	var bad bool
	field, rest := 2, s[i+1:]
	for field < 22 {
		rest = bytes.TrimLeft(rest, " \n")
		if len(rest) == 0 {
			break
		}
		j := bytes.IndexAny(rest, " \n")
		if j < 0 {
			j = len(rest)
		}
		f := rest[:j]
		rest = rest[j:]
		field++
		switch field {
		case 3:
			state = f
		case 4:
			ppid, bad = parseUint(f, bad)
		case 9:
			flags, bad = parseUint(f, bad)
		case 22:
			ticks, bad = parseUint(f, bad)
		}
	}
	if field < 22 || len(state) != 1 {
		return Stat{}, fmt.Errorf("process %d: malformed stat", pid)
	}
	if state[0] == 'Z' || state[0] == 'X' || state[0] == 'x' {
		return Stat{}, fmt.Errorf("process %d: %w", pid, ErrGone)
	}
	if bad || ppid > math.MaxInt32 {
		return Stat{}, fmt.Errorf("process %d: malformed stat: a number field is not a number", pid)
	}
	return Stat{State: state[0], PPID: int(ppid), StartTicks: ticks, Flags: flags}, nil
}

// parseUint parses a decimal field; bad stays set once a field failed.
func parseUint(f []byte, bad bool) (uint64, bool) {
	var v uint64
	if len(f) == 0 || len(f) > 20 {
		return 0, true
	}
	for _, c := range f {
		if c < '0' || c > '9' || v > (math.MaxUint64-9)/10 {
			return 0, true
		}
		v = v*10 + uint64(c-'0')
	}
	return v, bad
}

// Alive reports whether pid exists and has not exited.
func Alive(pid int) bool {
	_, err := Read(pid)
	return err == nil
}
