package ctlblock

import (
	"path/filepath"
	"testing"
)

// BenchmarkSnapshot is one read of one container's usage block: a pread of the page and
// its validation. "whole" reads the page (muxctl, the API); "totals" the part before the
// process slots, which the guard reads for every online container every period and for
// every offline one every OfflineUsagePeriod (issue 19). A sound page with one live
// process should not allocate beyond its per-device and per-process slices.
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
	for _, bc := range []struct {
		name string
		read func() (Usage, error)
	}{{"whole", blk.Snapshot}, {"totals", blk.SnapshotTotals}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.read(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
