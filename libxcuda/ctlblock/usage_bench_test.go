package ctlblock

import (
	"path/filepath"
	"testing"
)

// BenchmarkSnapshot is one guard read of one container's usage block: a pread of the
// page and its validation (issue 19: the guard does this for every running container
// every period). A sound page with one live process should not allocate beyond its
// per-device and per-process slices.
func BenchmarkSnapshot(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "c")
	blk, err := Create(dir, Unlimited())
	if err != nil {
		b.Fatal(err)
	}
	defer blk.Close()
	r := NewRawUsage()
	r.Launches = 12345
	r.Procs[0].PID, r.Procs[0].Launches = 4242, 12345
	if err := WriteRawUsage(dir, r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := blk.Snapshot(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSnapshotTotals is the guard's per-period read since issue 19's fourth round:
// the totals only, the part of the page before the process slots.
func BenchmarkSnapshotTotals(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "c")
	blk, err := Create(dir, Unlimited())
	if err != nil {
		b.Fatal(err)
	}
	defer blk.Close()
	r := NewRawUsage()
	r.Launches = 12345
	r.Procs[0].PID, r.Procs[0].Launches = 4242, 12345
	if err := WriteRawUsage(dir, r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := blk.SnapshotTotals(); err != nil {
			b.Fatal(err)
		}
	}
}
