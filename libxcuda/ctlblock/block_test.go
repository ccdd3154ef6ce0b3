package ctlblock

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestLimitsValidate(t *testing.T) {
	tests := []struct {
		name    string
		l       Limits
		wantErr bool
	}{
		{"unlimited", Unlimited(), false},
		{"typical", Limits{MemoryBytes: []uint64{8 << 30}, ShareBP: 3000, MaxInFlight: 2, MPSActiveThreadPercent: 50}, false},
		{"zero share", Limits{ShareBP: 0}, false},
		{"share too big", Limits{ShareBP: 10001}, true},
		{"too many devices", Limits{MemoryBytes: make([]uint64, MaxDevices+1)}, true},
		{"too many pinned", Limits{MPSPinnedMemBytes: make([]uint64, MaxDevices+1)}, true},
		{"inflight too big", Limits{MaxInFlight: MaxInFlightCap + 1}, true},
		{"negative burst", Limits{Burst: -time.Millisecond}, true},
		{"burst too big", Limits{Burst: 2 * time.Second}, true},
		{"mps pct too big", Limits{MPSActiveThreadPercent: 101}, true},
		{"bad policy", Limits{FailPolicy: 7}, true},
		{"confined", Limits{ConfinePercent: 50}, false},
		{"confined above the GPU", Limits{ConfinePercent: 101}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.l.Validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("Validate() = %v, wantErr %v", err, tt.wantErr)
			}
		})
	}
}

func TestCreateSetReadRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c", "abc")
	first := Limits{MemoryBytes: []uint64{1 << 30, 0, 2 << 30}, ShareBP: ShareFull, FailPolicy: FailClosed}
	b, err := Create(dir, first)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	defer b.Close()
	if diff := cmp.Diff(first, b.Limits()); diff != "" {
		t.Errorf("limits after Create (-want +got):\n%s", diff)
	}
	next := Limits{
		MemoryBytes: []uint64{512 << 20}, ShareBP: 3000, Paused: true, MaxInFlight: 2,
		Burst: 5 * time.Millisecond, MPSActiveThreadPercent: 40, MPSPinnedMemBytes: []uint64{1 << 30},
		ConfinePercent: 50,
	}
	if err := b.SetLimits(next); err != nil {
		t.Fatalf("SetLimits: %v", err)
	}
	if diff := cmp.Diff(next, b.Limits()); diff != "" {
		t.Errorf("limits after SetLimits (-want +got):\n%s", diff)
	}
	// A second mapping (muxctl, libxcuda) sees the change.
	b2, err := Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer b2.Close()
	if diff := cmp.Diff(next, b2.Limits()); diff != "" {
		t.Errorf("limits through second mapping (-want +got):\n%s", diff)
	}
	if err := b.SetLimits(Limits{ShareBP: 20000}); err == nil {
		t.Error("SetLimits accepted a share above 100%")
	}
	if diff := cmp.Diff(next, b.Limits()); diff != "" {
		t.Errorf("rejected SetLimits changed limits (-want +got):\n%s", diff)
	}
	if g := b.lim.Generation; g != 2 {
		t.Errorf("generation = %d after one update, want 2", g)
	}
	fi, err := os.Stat(filepath.Join(dir, LimitsFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("limits file mode %v, want 0644", fi.Mode().Perm())
	}
	fi, err = os.Stat(filepath.Join(dir, UsageFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("usage file mode %v, want 0600 (writable by its owner only)", fi.Mode().Perm())
	}
	// Nothing but the two files: no temporary file left behind.
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{LimitsFile, UsageFile}, names); diff != "" {
		t.Errorf("control directory after Create (-want +got):\n%s", diff)
	}
}

func TestUsageSnapshot(t *testing.T) {
	dir := t.TempDir()
	b, err := Create(dir, Unlimited())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// Simulate what libxcuda writes.
	r := NewRawUsage()
	r.Launches = 42
	r.ReservedBytes[1] = 100
	r.PeakBytes[1] = 150
	r.OOMDenials = 3
	r.Procs[5].PID = 77
	r.Procs[5].Flags = procDraining
	r.Procs[5].Launches = 40
	r.Procs[5].ReservedBytes[1] = 100
	if err := WriteRawUsage(dir, r); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(b.Usage(), mustRead(t, dir)); diff != "" {
		t.Errorf("Block.Usage and ReadUsage differ:\n%s", diff)
	}
	got, err := ReadUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := Usage{
		Launches: 42, OOMDenials: 3,
		ReservedBytes: []uint64{0, 100}, PeakBytes: []uint64{0, 150},
		Procs: []ProcUsage{{PID: 77, Draining: true, Launches: 40, ReservedBytes: []uint64{0, 100}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
}

func TestCreateAndOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Create(dir, Limits{ShareBP: 99999}); err == nil {
		t.Error("Create accepted invalid limits")
	}
	b, err := Create(dir, Unlimited())
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := Create(dir, Unlimited()); err == nil {
		t.Error("Create over an existing block succeeded")
	}
	if _, err := Open(filepath.Join(dir, "missing")); err == nil {
		t.Error("Open of a missing block succeeded")
	}
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, LimitsFile), make([]byte, 4096), 0o644)
	os.WriteFile(filepath.Join(bad, UsageFile), make([]byte, 1<<16), 0o666)
	if _, err := Open(bad); !errors.Is(err, ErrInvalid) {
		t.Errorf("Open of zeroed files: err = %v, want ErrInvalid", err)
	}
	short := t.TempDir()
	os.WriteFile(filepath.Join(short, LimitsFile), make([]byte, 8), 0o644)
	if _, err := Open(short); !errors.Is(err, ErrInvalid) {
		t.Errorf("Open of a short file: err = %v, want ErrInvalid", err)
	}
}

func TestRemove(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "x")
	b, err := Create(dir, Unlimited())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("block directory still there: %v", err)
	}
}

func mustRead(t *testing.T, dir string) Usage {
	t.Helper()
	u, err := ReadUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
