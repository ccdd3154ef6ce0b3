package ctlblock

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Issue 15, probe 1: the container truncates its own usage file. muxd used to map it and
// died of SIGBUS on the next read; now the read is a pread and the block is just corrupt.
func TestTruncatedUsageIsCorruptNotSIGBUS(t *testing.T) {
	dir := t.TempDir()
	b, err := Create(dir, Unlimited())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Snapshot(); err != nil {
		t.Fatalf("fresh block: %v", err)
	}
	for _, size := range []int64{0, 8, int64(UsageSize) - 1} {
		if err := os.Truncate(filepath.Join(dir, UsageFile), size); err != nil {
			t.Fatal(err)
		}
		_, err := b.Snapshot() // the old code dies here of SIGBUS
		var ce *CorruptError
		if !errors.As(err, &ce) || !ce.Header || !errors.Is(err, ErrCorrupt) {
			t.Errorf("usage truncated to %d bytes: err = %v, want a header ErrCorrupt", size, err)
		}
		if u := b.Usage(); u.Launches != 0 || u.Procs != nil {
			t.Errorf("truncated block gave usage %+v", u)
		}
	}
	// Limits stay readable and writable (muxd's own file).
	if err := b.SetLimits(Limits{ShareBP: 500}); err != nil || b.Limits().ShareBP != 500 {
		t.Errorf("limits after the usage file was truncated: %v %+v", err, b.Limits())
	}
}

// mustCreate creates an unlimited block in dir, closed when the test ends.
func mustCreate(t *testing.T, dir string) *Block {
	t.Helper()
	b, err := Create(dir, Unlimited())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// The guard's per-period read (SnapshotTotals) reads only the totals before the process
// slots: a file cut short of them is corrupt as for a whole read; one cut within the
// slots still gives the totals (nothing it reads is missing), while a whole read says it
// is truncated. Out-of-range totals are clamped and reported the same way.
func TestTotalsReadValidatesWhatItReads(t *testing.T) {
	dir := t.TempDir()
	b := mustCreate(t, dir)
	r := NewRawUsage()
	r.Launches, r.StickyErrors, r.LastSticky = 77, 1, 999 // 999 is not a sticky error
	r.Procs[0].PID, r.Procs[0].Launches = 4242, 77
	if err := WriteRawUsage(dir, r); err != nil {
		t.Fatal(err)
	}
	whole, werr := b.Snapshot()
	tot, terr := b.SnapshotTotals()
	if werr == nil || terr == nil || werr.Error() != terr.Error() {
		t.Errorf("a bad last sticky error: whole read %v, totals read %v; want the same error", werr, terr)
	}
	if tot.Launches != 77 || tot.Procs != nil || len(whole.Procs) != 1 {
		t.Errorf("totals read: launches %d, %d process(es); whole read %d process(es); want 77, 0, 1", tot.Launches, len(tot.Procs), len(whole.Procs))
	}
	for _, tc := range []struct {
		size          int64
		totalsCorrupt bool
	}{{0, true}, {int64(usageTotalsSize) - 1, true}, {int64(usageTotalsSize), false}, {int64(UsageSize) - 1, false}} {
		r.LastSticky = 700 // an illegal address: sticky
		if err := WriteRawUsage(dir, r); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(filepath.Join(dir, UsageFile), tc.size); err != nil {
			t.Fatal(err)
		}
		var ce *CorruptError
		_, err := b.SnapshotTotals()
		if got := errors.As(err, &ce) && ce.Header; got != tc.totalsCorrupt || (!got && err != nil) {
			t.Errorf("usage cut to %d bytes: totals read err = %v, want header corrupt %v", tc.size, err, tc.totalsCorrupt)
		}
		if _, err := b.Snapshot(); !errors.As(err, &ce) || !ce.Header {
			t.Errorf("usage cut to %d bytes: whole read err = %v, want a header ErrCorrupt", tc.size, err)
		}
	}
}

// Issue 15, probe 5: 16 devices × 2⁶³ reserved bytes summed to 0. Values are clamped and
// reported; the sum cannot wrap.
func TestHugeCountersAreClampedAndReported(t *testing.T) {
	dir := t.TempDir()
	b := mustCreate(t, dir)
	r := NewRawUsage()
	for d := range MaxDevices {
		r.ReservedBytes[d] = 1 << 63
	}
	r.InFlight = math.MaxUint32
	r.ThrottledNS = math.MaxUint64
	r.HeartbeatNS = math.MaxUint64
	r.Procs[0].PID = math.MaxInt32
	r.Procs[1].PID = 10
	r.Procs[1].Flags = 0xf0
	if err := WriteRawUsage(dir, r); err != nil {
		t.Fatal(err)
	}
	u, err := b.Snapshot()
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Header {
		t.Fatalf("err = %v, want a value ErrCorrupt", err)
	}
	if got, want := u.TotalReserved(), uint64(MaxDevices)*MaxPlausibleBytes; got != want {
		t.Errorf("total reserved %d, want the clamped %d (not a wrapped sum)", got, want)
	}
	if u.InFlight != MaxPlausibleInFlight || u.Throttled != MaxPlausibleDuration || u.Throttled < 0 {
		t.Errorf("not clamped: inflight %d throttled %v", u.InFlight, u.Throttled)
	}
	if u.Heartbeat.After(time.Now().Add(time.Second)) {
		t.Errorf("heartbeat in the future kept: %v", u.Heartbeat)
	}
	if len(u.Procs) != 1 || u.Procs[0].PID != 10 {
		t.Errorf("procs %+v, want only the slot with a possible pid", u.Procs)
	}
	if len(ce.Reasons) < 5 {
		t.Errorf("reasons %q, want each problem named", ce.Reasons)
	}
}

func TestForgedStickyCountIsCorrupt(t *testing.T) {
	r := NewRawUsage()
	r.StickyErrors = 1 // no error code: not something libxcuda writes
	if _, err := ParseUsage(r.Bytes(), time.Now()); !errors.Is(err, ErrCorrupt) {
		t.Errorf("sticky count without a sticky CUresult: err = %v", err)
	}
	r.LastSticky = 806
	if _, err := ParseUsage(r.Bytes(), time.Now()); err != nil {
		t.Errorf("a well-formed sticky report: %v", err)
	}
}

// Issue 15, probe 4: zero the usage magic, restart muxd: the old muxd saw an invalid block,
// deleted it and created a new one, while the running job kept the deleted files (and the
// old limits). Attach keeps the inodes; the corruption is reported instead.
func TestAttachKeepsTheBlockARunningProcessHas(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "c1")
	b, err := Attach(dir, Unlimited())
	if err != nil {
		t.Fatal(err)
	}
	id := b.Identity()
	b.Close()
	r := NewRawUsage()
	r.Hdr.Magic = 0
	if err := WriteRawUsage(dir, r); err != nil {
		t.Fatal(err)
	}
	b2, err := Attach(dir, Limits{ShareBP: 500})
	if err != nil {
		t.Fatalf("reattach to a block with a zeroed usage magic: %v", err)
	}
	defer b2.Close()
	if b2.Identity() != id {
		t.Errorf("identity %+v after reattach, want %+v (same inodes)", b2.Identity(), id)
	}
	if _, err := b2.Snapshot(); !errors.Is(err, ErrCorrupt) {
		t.Errorf("zeroed magic: err = %v, want ErrCorrupt", err)
	}
	// The limits muxd sets reach the inode the job has mapped.
	if err := b2.SetLimits(Limits{ShareBP: 500}); err != nil {
		t.Fatal(err)
	}
	old, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if old.Limits().ShareBP != 500 || old.Identity() != id {
		t.Errorf("limits %d through the original inode", old.Limits().ShareBP)
	}
	// A limits file whose header root destroyed is repaired in place.
	os.WriteFile(filepath.Join(dir, LimitsFile)+".junk", nil, 0o644)
	f, _ := os.OpenFile(filepath.Join(dir, LimitsFile), os.O_WRONLY, 0)
	f.WriteAt(make([]byte, 8), 0)
	f.Close()
	b3, err := Attach(dir, Limits{ShareBP: 700})
	if err != nil {
		t.Fatalf("attach with a broken limits header: %v", err)
	}
	defer b3.Close()
	if b3.Identity() != id || b3.Limits().ShareBP != 700 {
		t.Errorf("limits repair: identity %+v share %d", b3.Identity(), b3.Limits().ShareBP)
	}
}

func TestSetUsageOwner(t *testing.T) {
	dir := t.TempDir()
	b, err := Create(dir, Unlimited())
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	os.Chmod(filepath.Join(dir, UsageFile), 0o666)
	if err := SetUsageOwner(dir, os.Getuid(), os.Getgid()); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(filepath.Join(dir, UsageFile))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v after SetUsageOwner, want 0600", fi.Mode().Perm())
	}
	if os.Getuid() != 0 {
		if err := SetUsageOwner(dir, os.Getuid()+1, os.Getgid()); err == nil {
			t.Error("a non-root muxd gave a file away")
		}
	}
	os.Symlink("/etc/passwd", filepath.Join(dir, "link"))
	if _, err := openRegular(filepath.Join(dir, "link"), os.O_RDONLY); err == nil {
		t.Error("a symlink was followed")
	}
}

// FuzzParseUsage: whatever a container writes into its usage file, the reader neither
// panics nor returns values that overflow a sum or a duration.
func FuzzParseUsage(f *testing.F) {
	good := NewRawUsage()
	good.Launches, good.ReservedBytes[0], good.Procs[0].PID = 5, 1<<30, 42
	f.Add(good.Bytes())
	f.Add([]byte{})
	f.Add(make([]byte, UsageSize))
	huge := NewRawUsage()
	for d := range MaxDevices {
		huge.ReservedBytes[d] = 1 << 63
	}
	f.Add(huge.Bytes())
	now := time.Unix(1_700_000_000, 0)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) >= 16 && len(data) < UsageSize {
			// Mostly explore values: keep a valid header, pad to the page.
			page := NewRawUsage().Bytes()
			copy(page[16:], data[16:])
			data = page
		}
		u, err := ParseUsage(data, now)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error %v is not ErrCorrupt", err)
		}
		if u.TotalReserved() > MaxDevices*MaxPlausibleBytes {
			t.Fatalf("total %d above the bound", u.TotalReserved())
		}
		if u.Throttled < 0 || u.GPUTime < 0 || u.Throttled > MaxPlausibleDuration {
			t.Fatalf("durations %v %v", u.Throttled, u.GPUTime)
		}
		if u.InFlight > MaxPlausibleInFlight || len(u.Procs) > MaxProcs {
			t.Fatalf("inflight %d procs %d", u.InFlight, len(u.Procs))
		}
		if u.Heartbeat.After(now.Add(FutureSlack)) {
			t.Fatalf("heartbeat %v", u.Heartbeat)
		}
		for _, p := range u.Procs {
			if p.PID <= 0 || p.PID >= MaxPID {
				t.Fatalf("pid %d", p.PID)
			}
		}
	})
}

// A container writes its confinement report: a state libxcuda never writes, or an SM
// count no device has, is corrupt and clamped; a sound report reads back as written.
func TestForgedConfinementIsCorrupt(t *testing.T) {
	r := NewRawUsage()
	r.ConfineState, r.ConfinedSMs = 9, 66
	u, err := ParseUsage(r.Bytes(), time.Now())
	if !errors.Is(err, ErrCorrupt) || u.Confine != ConfineFailed || u.ConfinedSMs != 0 {
		t.Errorf("unknown state: err %v, read %v with %d SMs, want corrupt, %v, 0", err, u.Confine, u.ConfinedSMs, ConfineFailed)
	}
	r.ConfineState, r.ConfinedSMs = uint32(ConfineOn), math.MaxUint32
	if u, err = ParseUsage(r.Bytes(), time.Now()); !errors.Is(err, ErrCorrupt) || u.ConfinedSMs != MaxPlausibleSMs {
		t.Errorf("huge SM count: err %v, read %d, want corrupt and %d", err, u.ConfinedSMs, MaxPlausibleSMs)
	}
	r.ConfinedSMs = 66
	if u, err = ParseUsage(r.Bytes(), time.Now()); err != nil || u.Confine != ConfineOn || u.ConfinedSMs != 66 {
		t.Errorf("sound report: err %v, read %v with %d SMs", err, u.Confine, u.ConfinedSMs)
	}
}
