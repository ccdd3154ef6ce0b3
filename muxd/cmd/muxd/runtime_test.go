package main

import (
	"debug/elf"
	"os"
	"runtime"
	"runtime/debug"
	"testing"
)

func TestLoadBaseFindsTheExecutable(t *testing.T) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Skip(err)
	}
	if loadBase(exe) == 0 {
		t.Errorf("no mapping of %s at file offset 0 found in /proc/self/maps", exe)
	}
}

// dropRelocations must leave a running program intact (a PIE test binary drops its
// own table; any other returns without touching anything).
func TestDropRelocationsIsHarmless(t *testing.T) {
	dropRelocations()
	dropRelocations()
	runtime.GC()
	exe, _ := os.Readlink("/proc/self/exe")
	if f, err := elf.Open(exe); err == nil {
		t.Logf("test binary type %v", f.Type)
		f.Close()
	}
}

func TestTuneRuntimeCapsProcs(t *testing.T) {
	if _, set := os.LookupEnv("GOMAXPROCS"); set {
		t.Skip("GOMAXPROCS set in the environment")
	}
	if _, set := os.LookupEnv("GOGC"); set {
		t.Skip("GOGC set in the environment")
	}
	old := runtime.GOMAXPROCS(8)
	defer runtime.GOMAXPROCS(old)
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	tuneRuntime()
	if n := runtime.GOMAXPROCS(0); n != maxProcs {
		t.Errorf("GOMAXPROCS %d after tuneRuntime, want %d", n, maxProcs)
	}
	if p := debug.SetGCPercent(100); p != gcPercent {
		t.Errorf("GOGC %d after tuneRuntime, want %d", p, gcPercent)
	}
}
