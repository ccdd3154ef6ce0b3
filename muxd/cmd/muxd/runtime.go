package main

import (
	"bufio"
	"debug/elf"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
)

// maxProcs caps GOMAXPROCS. muxd's work is one loop per period (sampling, then the
// guard's step) and short API calls; Go's default, one P per CPU, only makes its
// scheduler look for work on more Ps (and start more threads) on a large node. Two
// still let an API call run beside a long step (about 10 ms at 1,000 containers).
const maxProcs = 2

// gcPercent is muxd's GOGC. Its live heap is small (1 MiB idle, 5 MiB at 1,000
// containers) but the default (100) lets the heap grow to twice that, and to 4 MiB at
// least, between collections, all of it in the RSS; 75 takes 2.5 MiB off the RSS at
// 1,000 containers for a collection every 0.5 s instead of 0.7 s (about 0.05 % of a
// core at 8 GPUs x 16 containers on gpusim, within the measurements' noise).
const gcPercent = 75

// tuneRuntime applies maxProcs and gcPercent unless GOMAXPROCS or GOGC is set in the
// environment.
func tuneRuntime() {
	if _, set := os.LookupEnv("GOMAXPROCS"); !set && runtime.GOMAXPROCS(0) > maxProcs {
		runtime.GOMAXPROCS(maxProcs)
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}
}

// dropRelocations releases the pages of muxd's own dynamic relocation table (.rela.dyn,
// 2.6 MiB of a position-independent muxd): the dynamic loader reads it once, before
// main, to relocate the binary, and nothing reads it again; its pages are clean file
// pages that would otherwise stay counted in muxd's RSS until memory pressure. Should
// anything read them after all, they are read back from the file. Any failure leaves
// them as they are.
func dropRelocations() {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return
	}
	f, err := elf.Open(exe)
	if err != nil {
		return
	}
	sec := f.Section(".rela.dyn")
	var first *elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Off == 0 {
			first = p
			break
		}
	}
	f.Close()
	if sec == nil || first == nil || f.Type != elf.ET_DYN {
		return
	}
	mapped := loadBase(exe)
	if mapped == 0 {
		return
	}
	base := mapped - first.Vaddr // the load bias
	page := uint64(os.Getpagesize())
	start := (base + sec.Addr + page - 1) &^ (page - 1)
	end := (base + sec.Addr + sec.Size) &^ (page - 1)
	if end <= start {
		return
	}
	_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, uintptr(start), uintptr(end-start), uintptr(syscall.MADV_DONTNEED))
}

// loadBase is the address where exe's first segment (file offset 0) is mapped, read
// from /proc/self/maps; 0 when it is not found.
func loadBase(exe string) uint64 {
	m, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0
	}
	defer m.Close()
	sc := bufio.NewScanner(m)
	for sc.Scan() {
		// start-end perms offset dev inode path
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[5] != exe || f[2] != "00000000" || !strings.HasPrefix(f[1], "r") {
			continue
		}
		lo, _, _ := strings.Cut(f[0], "-")
		base, err := strconv.ParseUint(lo, 16, 64)
		if err != nil {
			return 0
		}
		return base
	}
	return 0
}
