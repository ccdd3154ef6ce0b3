package guard

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/monitor"
	"github.com/muxflow/muxflow/muxd/api"
)

// writeUsage rewrites a container's usage page the way its own processes could.
func (f *fixture) writeUsage(t *testing.T, id string, edit func(r *ctlblock.RawUsage)) {
	t.Helper()
	dir := f.blk[id].Dir()
	r, err := ctlblock.ReadRawUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	edit(r)
	if err := ctlblock.WriteRawUsage(dir, r); err != nil {
		t.Fatal(err)
	}
}

// launch adds 100 launches to each container's usage block, as its libxcuda would.
func (f *fixture) launch(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		f.writeUsage(t, id, func(r *ctlblock.RawUsage) { r.Launches += 100 })
	}
}

func (f *fixture) noRestart(t *testing.T) {
	t.Helper()
	select {
	case r := <-f.mps.restarts:
		t.Errorf("MPS restarted: %s", r)
	default:
	}
}

// steps runs the guard every 100ms of fake time for d, starting at *now.
func (f *fixture) steps(now *time.Time, d time.Duration) {
	for end := now.Add(d); now.Before(end); {
		*now = now.Add(100 * time.Millisecond)
		f.g.Step(context.Background(), *now)
	}
}

// Issue 15, probe 3: adding 1 to the online container's sticky-error count made muxd
// evict the other offline containers and restart MPS twice. A report is now the
// container's word only: with no NVML fault and no other client confirming it, nothing
// happens to anyone else, and an event says so.
func TestForgedOnlineStickyReportChangesNothingForOthers(t *testing.T) {
	f := setup(t, running("svc", api.Online, 100, "0"), running("train", api.Offline, 200, "0"), running("batch", api.Offline, 300, "0"))
	now := time.Now()
	f.g.Step(context.Background(), now)
	f.steps(&now, time.Second)
	trainShare, _ := f.share("train")
	f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) { r.StickyErrors++; r.LastSticky = 806 })
	f.steps(&now, StickyWindow+time.Second)
	time.Sleep(50 * time.Millisecond) // an eviction would run asynchronously
	if got := f.rec.ids(); got != "" {
		t.Errorf("evicted %q on a forged online report, want nobody", got)
	}
	f.noRestart(t)
	if s, p := f.share("train"); s < trainShare || p {
		t.Errorf("train's share went from %v to %v (paused %v)", trainShare, s, p)
	}
	if err := f.g.Admit([]string{"0"}); err != nil {
		t.Errorf("GPU refuses offline work after a forged report: %v", err)
	}
	if ev := f.mon.eventLog(); !strings.Contains(ev, "svc") || !strings.Contains(ev, "nothing done to other containers") {
		t.Errorf("events %q, want one saying the report was not acted on", ev)
	}
	// The same forgery without a sticky error code is a corrupt block: the online
	// container is marked, still nobody is evicted.
	f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) { r.StickyErrors++; r.LastSticky = 0 })
	f.steps(&now, time.Second)
	time.Sleep(50 * time.Millisecond)
	if got := f.rec.ids(); got != "" {
		t.Errorf("evicted %q", got)
	}
	if f.g.Quarantined("svc") == "" {
		t.Error("a sticky count with no sticky error code did not mark the online container")
	}
	f.noRestart(t)
}

// A report confirmed by an NVML fault on the GPU runs the error handling: offline work
// evicted, MPS restarted once.
func TestOnlineStickyReportConfirmedByXid(t *testing.T) {
	f := setup(t, running("svc", api.Online, 100, "0"), running("train", api.Offline, 200, "0"), running("batch", api.Offline, 300, "1"))
	now := time.Now()
	f.g.Step(context.Background(), now)
	f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) { r.StickyErrors++; r.LastSticky = 806 })
	f.steps(&now, 300*time.Millisecond)
	f.noRestart(t)
	f.mon.mu.Lock()
	f.mon.gpus[0].LastFault = &monitor.Fault{Time: now, Kind: monitor.FaultXid, Xid: 43, Class: monitor.FaultApplication, Description: "GPU stopped processing"}
	f.mon.mu.Unlock()
	f.steps(&now, 200*time.Millisecond)
	select {
	case <-f.mps.restarts:
	case <-time.After(5 * time.Second):
		t.Fatal("MPS not restarted after a report confirmed by an Xid")
	}
	if got := f.rec.ids(); got != "train" {
		t.Errorf("evicted %q, want train (batch is on another GPU)", got)
	}
	f.steps(&now, StickyWindow)
	time.Sleep(50 * time.Millisecond)
	f.noRestart(t)
}

// Two clients of the GPU reporting dead contexts confirm each other.
func TestOnlineStickyReportConfirmedByAnotherClient(t *testing.T) {
	f := setup(t, running("svc", api.Online, 100, "0"), running("train", api.Offline, 200, "0"))
	now := time.Now()
	f.g.Step(context.Background(), now)
	f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) { r.StickyErrors++; r.LastSticky = 806 })
	f.writeUsage(t, "train", func(r *ctlblock.RawUsage) { r.StickyErrors++; r.LastSticky = 810 })
	f.steps(&now, OfflineUsagePeriod+100*time.Millisecond) // offline blocks are read every OfflineUsagePeriod
	select {
	case <-f.mps.restarts:
	case <-time.After(5 * time.Second):
		t.Fatal("MPS not restarted when two clients of the GPU reported dead contexts")
	}
}

// An offline container's report evicts it alone: the GPU keeps admitting offline work.
func TestOfflineStickyReportEvictsItAlone(t *testing.T) {
	f := setup(t, running("svc", api.Online, 100, "0"), running("train", api.Offline, 200, "0"), running("batch", api.Offline, 300, "0"))
	now := time.Now()
	f.g.Step(context.Background(), now)
	f.writeUsage(t, "train", func(r *ctlblock.RawUsage) { r.StickyErrors++; r.LastSticky = 700 })
	f.steps(&now, OfflineUsagePeriod+100*time.Millisecond)
	waitFor(t, func() bool { return f.rec.ids() == "train" })
	if err := f.g.Admit([]string{"0"}); err != nil {
		t.Errorf("one offline container's own fault put the GPU in back-off: %v", err)
	}
	f.steps(&now, StickyWindow+time.Second)
	f.noRestart(t)
	if got := f.rec.ids(); got != "train" {
		t.Errorf("evicted %q, want train only", got)
	}
}

// Issue 19: an offline container's block is read every OfflineUsagePeriod, not every
// period: its report is seen at the next read, not before.
func TestOfflineBlocksAreReadEveryOfflineUsagePeriod(t *testing.T) {
	f := setup(t, running("svc", api.Online, 100, "0"), running("train", api.Offline, 200, "0"))
	now := time.Now()
	f.g.Step(context.Background(), now)
	f.writeUsage(t, "train", func(r *ctlblock.RawUsage) { r.StickyErrors++; r.LastSticky = 700 })
	f.steps(&now, OfflineUsagePeriod-200*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	if got := f.rec.ids(); got != "" {
		t.Fatalf("evicted %q before the offline block was due to be read again", got)
	}
	f.steps(&now, 200*time.Millisecond)
	waitFor(t, func() bool { return f.rec.ids() == "train" })
}

// Between two reads an offline container's launch rate is the one its last read gave,
// so that the profiler sees it every period.
func TestOfflineRateCarriesBetweenReads(t *testing.T) {
	f := setup(t, running("svc", api.Online, 100, "0"), running("train", api.Offline, 200, "0"))
	now := time.Now()
	f.g.Step(context.Background(), now)
	f.writeUsage(t, "train", func(r *ctlblock.RawUsage) { r.Launches += 1000 })
	f.steps(&now, OfflineUsagePeriod) // read again: 1,000 launches in one OfflineUsagePeriod
	want := 1000 / OfflineUsagePeriod.Seconds()
	for range 3 {
		if got := f.g.loop.reads.rates["train"]; math.Abs(got-want) > 1 {
			t.Fatalf("offline launch rate %v, want %v/s in every period until the next read", got, want)
		}
		f.steps(&now, 100*time.Millisecond)
	}
}

// Issue 15, probe 1 at the guard: truncating an offline container's usage file killed
// muxd with SIGBUS inside Step. Now the container is evicted alone, with an event; the
// others keep running and their shares keep being set.
func TestTruncatedOfflineBlockEvictsOnlyItsContainer(t *testing.T) {
	f := setup(t, running("svc", api.Online, 100, "0"), running("train", api.Offline, 200, "0"), running("batch", api.Offline, 300, "0"))
	now := time.Now()
	f.g.Step(context.Background(), now)
	if err := os.Truncate(filepath.Join(f.blk["train"].Dir(), ctlblock.UsageFile), 0); err != nil {
		t.Fatal(err)
	}
	f.steps(&now, OfflineUsagePeriod+100*time.Millisecond) // a broken header is acted on at the first read
	waitFor(t, func() bool { return f.rec.ids() == "train" })
	if ev := f.mon.eventLog(); !strings.Contains(ev, "GPU-a train: offline container's usage block is corrupt") || !strings.Contains(ev, "truncated") {
		t.Errorf("events %q", ev)
	}
	if err := f.g.Admit([]string{"0"}); err != nil {
		t.Errorf("GPU in back-off after one container broke its own block: %v", err)
	}
	f.mon.set(0, monitor.Healthy, 70)
	f.steps(&now, 100*time.Millisecond)
	if s, _ := f.share("batch"); s > 0.21 {
		t.Errorf("batch's share %v: the guard stopped working for the others", s)
	}
	f.noRestart(t)
	time.Sleep(50 * time.Millisecond)
	if got := f.rec.ids(); got != "train" {
		t.Errorf("evicted %q, want train only", got)
	}
}

// A corrupt online block marks the online container: its reports are ignored, it is not
// evicted, nobody else is touched.
func TestCorruptOnlineBlockIsMarkedNotEvicted(t *testing.T) {
	f := setup(t, running("svc", api.Online, 100, "0"), running("train", api.Offline, 200, "0"))
	now := time.Now()
	f.g.Step(context.Background(), now)
	f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) { r.Hdr.Magic = 0 })
	f.steps(&now, 300*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	if got := f.rec.ids(); got != "" {
		t.Errorf("evicted %q", got)
	}
	if q := f.g.Quarantined("svc"); !strings.Contains(q, "magic") {
		t.Errorf("quarantine reason %q", q)
	}
	if ev := f.mon.eventLog(); !strings.Contains(ev, "online work is not evicted") {
		t.Errorf("events %q", ev)
	}
}

// Issue 15, probe 5: a fake online launch count cut the offline shares for 2 s. A rise
// no container can make is not used as demand, and marks the container.
func TestForgedLaunchCountDoesNotCutOfflineShares(t *testing.T) {
	f := setup(t, running("svc", api.Online, 100, "0"), running("train", api.Offline, 200, "0"))
	now := time.Now()
	f.g.Step(context.Background(), now)
	// A calm period with real launches teaches the allocator a launch rate and its cost.
	var n uint64
	for range 20 {
		n += 100
		f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) { r.Launches = n })
		f.steps(&now, 100*time.Millisecond)
	}
	before, _ := f.share("train")
	f.writeUsage(t, "svc", func(r *ctlblock.RawUsage) { r.Launches = 1 << 62 })
	for range 5 {
		f.steps(&now, 100*time.Millisecond)
		if s, _ := f.share("train"); s < before {
			t.Fatalf("a forged launch count cut the offline share from %v to %v", before, s)
		}
	}
	if q := f.g.Quarantined("svc"); !strings.Contains(q, "launch counter") {
		t.Errorf("quarantine reason %q", q)
	}
}
