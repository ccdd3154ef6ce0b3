package guard

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/monitor"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/evict"
	"github.com/muxflow/muxflow/policy"
)

type fakeMonitor struct {
	mu      sync.Mutex
	gpus    []monitor.GPUStatus
	cleared []string
	events  []string // "gpu container: text"
}

func (f *fakeMonitor) RecordContainerEvent(uuid, id, text string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, uuid+" "+id+": "+text)
	return nil
}

func (f *fakeMonitor) eventLog() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.events, "\n")
}

func (f *fakeMonitor) Snapshot() []monitor.GPUStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]monitor.GPUStatus(nil), f.gpus...)
}

func (f *fakeMonitor) ClearFault(uuid string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cleared = append(f.cleared, uuid)
	return nil
}

func (f *fakeMonitor) set(i int, st monitor.State, onlineUtil uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st == monitor.Faulted && f.gpus[i].LastFault == nil {
		f.gpus[i].LastFault = &monitor.Fault{Class: monitor.FaultReset, Xid: 79}
	}
	f.gpus[i].State = st
	f.gpus[i].AdmitsOffline = st.AdmitsOffline()
	u := onlineUtil
	f.gpus[i].Sample = &monitor.Sample{Processes: []monitor.ProcessSample{{PID: 100, SMUtilPercent: &u}}}
}

type list []api.Container

func (l list) AppendTo(dst []api.Container) []api.Container { return append(dst, l...) }

type fakeBlocks map[string]*ctlblock.Block

func (b fakeBlocks) Block(id string) *ctlblock.Block { return b[id] }

type recorder struct {
	mu      sync.Mutex
	stopped []string
}

func (r *recorder) Stop(_ context.Context, t evict.Target, _ time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = append(r.stopped, t.ID)
	return nil
}

func (r *recorder) ids() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.stopped, ",")
}

type fakeMPS struct{ restarts chan string }

func (f fakeMPS) Restart(reason string) { f.restarts <- reason }

func running(id string, class api.Class, pid int, gpus ...string) api.Container {
	return api.Container{RegisterRequest: api.RegisterRequest{ID: id, Class: class, GPUs: gpus}, State: api.StateRunning, PID: pid}
}

type fixture struct {
	g   *Guard
	mon *fakeMonitor
	rec *recorder
	mps fakeMPS
	blk fakeBlocks
}

func setup(t *testing.T, containers ...api.Container) *fixture {
	t.Helper()
	dir := t.TempDir()
	blk := fakeBlocks{}
	for _, c := range containers {
		b, err := ctlblock.Create(filepath.Join(dir, c.ID), ctlblock.Unlimited())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		blk[c.ID] = b
	}
	mon := &fakeMonitor{gpus: []monitor.GPUStatus{{Index: 0, UUID: "GPU-a", State: monitor.Healthy}, {Index: 1, UUID: "GPU-b", State: monitor.Healthy}}}
	mon.set(0, monitor.Healthy, 20)
	mon.set(1, monitor.Healthy, 0)
	rec := &recorder{}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f := &fixture{mon: mon, rec: rec, blk: blk, mps: fakeMPS{restarts: make(chan string, 4)}}
	p := policy.Default()
	f.g = &Guard{
		Monitor: mon, Containers: list(containers), Blocks: blk,
		Evictor: evict.NewEvictor(rec, log), MPS: f.mps,
		Policy: func() *policy.Policy { return p }, Log: log,
		Owner: func(pid int, inits map[int]string) (string, bool) { id, ok := inits[pid]; return id, ok },
	}
	return f
}

func (f *fixture) share(id string) (float64, bool) {
	l := f.blk[id].Limits()
	return float64(l.ShareBP) / ctlblock.ShareFull, l.Paused
}

func TestOfflineShareFollowsOnlineLoad(t *testing.T) {
	f := setup(t,
		running("svc", api.Online, 100, "0"),
		running("train", api.Offline, 200, "0"),
		running("batch", api.Offline, 300, "GPU-b"),
	)
	now := time.Now()
	f.mon.set(0, monitor.Healthy, 40)
	f.g.Step(context.Background(), now)
	if s, _ := f.share("train"); s < 0.49 || s > 0.51 {
		t.Errorf("online at 40%%: offline share %v, want 0.5 (1 - 0.4 - 10%% headroom)", s)
	}
	if s, _ := f.share("batch"); s < 0.69 || s > 0.71 {
		t.Errorf("GPU without online work: share %v, want the class ceiling 0.7", s)
	}
	if s, _ := f.share("svc"); s != 1 {
		t.Errorf("online container was throttled: %v", s)
	}
	f.mon.set(0, monitor.Healthy, 70)
	f.g.Step(context.Background(), now.Add(100*time.Millisecond))
	if s, _ := f.share("train"); s > 0.21 {
		t.Errorf("online rose to 70%%: offline share %v, want ≤ 0.2 at once", s)
	}
	f.mon.set(0, monitor.Throttled, 10)
	f.g.Step(context.Background(), now.Add(200*time.Millisecond))
	if s, p := f.share("train"); s > 0.051 || p {
		t.Errorf("throttled GPU: share %v paused %v, want the 5%% floor", s, p)
	}
}

func TestUnhealthyEvictsOfflineOnlyOnThatGPU(t *testing.T) {
	f := setup(t,
		running("svc", api.Online, 100, "0"),
		running("train", api.Offline, 200, "0"),
		running("batch", api.Offline, 300, "1"),
	)
	now := time.Now()
	f.g.Step(context.Background(), now)
	f.mon.set(0, monitor.Unhealthy, 20)
	f.g.Step(context.Background(), now.Add(100*time.Millisecond))
	if _, p := f.share("train"); !p {
		t.Error("offline work on an unhealthy GPU is not paused")
	}
	waitFor(t, func() bool { return f.rec.ids() == "train" })
	f.g.Step(context.Background(), now.Add(200*time.Millisecond))
	if got := f.rec.ids(); got != "train" {
		t.Errorf("evicted %q, want only train (once)", got)
	}
	if err := f.g.Admit([]string{"0"}); err == nil || !strings.Contains(err.Error(), "unhealthy") {
		t.Errorf("an unhealthy GPU admits offline work: %v", err)
	}
	if err := f.g.Admit([]string{"1"}); err != nil {
		t.Errorf("a healthy GPU refuses offline work: %v", err)
	}
	f.mon.set(0, monitor.Healthy, 20)
	if err := f.g.Admit([]string{"0"}); err == nil || !strings.Contains(err.Error(), "evicted offline work") {
		t.Errorf("no back-off after eviction: %v", err)
	}
	select {
	case r := <-f.mps.restarts:
		t.Errorf("MPS restarted for an unhealthy (not faulted) GPU: %s", r)
	default:
	}
}

func TestFaultEvictsRestartsMPSAndClears(t *testing.T) {
	f := setup(t, running("svc", api.Online, 100, "0"), running("train", api.Offline, 200, "all"))
	now := time.Now()
	f.g.Step(context.Background(), now)
	f.mon.set(0, monitor.Faulted, 20)
	f.g.Step(context.Background(), now.Add(100*time.Millisecond))
	select {
	case <-f.mps.restarts:
	case <-time.After(5 * time.Second):
		t.Fatal("MPS was not restarted after a fault")
	}
	waitFor(t, func() bool { f.mon.mu.Lock(); defer f.mon.mu.Unlock(); return len(f.mon.cleared) == 1 })
	if got := f.rec.ids(); got != "train" {
		t.Errorf("evicted %q, want train", got)
	}
}

func TestApplicationFaultKeepsMPS(t *testing.T) {
	f := setup(t, running("svc", api.Online, 100, "0"), running("train", api.Offline, 200, "0"))
	now := time.Now()
	f.g.Step(context.Background(), now)
	f.mon.gpus[0].LastFault = &monitor.Fault{Class: monitor.FaultApplication, Xid: 13}
	f.mon.set(0, monitor.Faulted, 20)
	f.g.Step(context.Background(), now.Add(100*time.Millisecond))
	waitFor(t, func() bool { f.mon.mu.Lock(); defer f.mon.mu.Unlock(); return len(f.mon.cleared) == 1 })
	if got := f.rec.ids(); got != "train" {
		t.Errorf("evicted %q, want train", got)
	}
	select {
	case r := <-f.mps.restarts:
		t.Errorf("MPS restarted for an application fault, which would take the online service down: %s", r)
	default:
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for i := 0; !ok(); i++ {
		if i > 500 {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestForgetsContainersThatAreGone(t *testing.T) {
	f := setup(t, running("svc", api.Online, 100, "0"), running("train", api.Offline, 200, "0"))
	now := time.Now()
	f.g.Step(context.Background(), now)
	if len(f.g.loop.trust.launches) != 2 || len(f.g.loop.sticky.last) != 2 {
		t.Fatalf("per-container state not kept: %v %v", f.g.loop.trust.launches, f.g.loop.sticky.last)
	}
	f.g.Containers = list{running("svc", api.Online, 100, "0")}
	f.g.Step(context.Background(), now.Add(100*time.Millisecond))
	if _, ok := f.g.loop.trust.launches["train"]; ok {
		t.Error("state of a container that is gone is kept")
	}
	if _, ok := f.g.loop.sticky.last["train"]; ok {
		t.Error("sticky count of a container that is gone is kept")
	}
}

// The guard rebuilds its set of live containers only when the registry's IDs change (or
// every forgetEvery periods): a container replaced by another (same count) is forgotten at
// once, and state left by one that came and went between two periods within forgetEvery.
func TestForgetsOnAnyChangeOfIDs(t *testing.T) {
	f := setup(t, running("svc", api.Online, 100, "0"), running("train", api.Offline, 200, "0"))
	now := time.Now()
	for range 3 {
		now = now.Add(100 * time.Millisecond)
		f.g.Step(context.Background(), now)
	}
	f.g.Containers = list{running("svc", api.Online, 100, "0"), running("train2", api.Offline, 300, "0")}
	now = now.Add(100 * time.Millisecond)
	f.g.Step(context.Background(), now)
	if _, ok := f.g.loop.trust.launches["train"]; ok {
		t.Error("state of a container replaced by another is kept")
	}
	f.g.loop.trust.rate["ghost"] = 1 // as if written for a container gone before the next period
	for range forgetEvery {
		now = now.Add(100 * time.Millisecond)
		f.g.Step(context.Background(), now)
	}
	if _, ok := f.g.loop.trust.rate["ghost"]; ok {
		t.Errorf("state of a container that was never listed is kept after %d periods", forgetEvery)
	}
}

func TestGPUType(t *testing.T) {
	for name, want := range map[string]string{
		"NVIDIA H100 80GB HBM3":  "H100",
		"NVIDIA  A100-SXM4-40GB": "A100-SXM4-40GB",
		"Tesla T4":               "Tesla",
		"H200\tNVL":              "H200",
		"NVIDIA ":                "unknown",
		"":                       "unknown",
	} {
		if got := GPUType(name); got != want {
			t.Errorf("GPUType(%q) = %q, want %q", name, got, want)
		}
	}
}

// A compressed day keeps a period in every bucket of the learned pattern.
func TestPatternBuckets(t *testing.T) {
	for _, tc := range []struct {
		day, period time.Duration
		want        int
	}{
		{24 * time.Hour, 100 * time.Millisecond, 96},
		{10 * time.Second, 100 * time.Millisecond, 96},
		{3 * time.Second, 100 * time.Millisecond, 30},
		{time.Second, 100 * time.Millisecond, 10},
		{50 * time.Millisecond, 100 * time.Millisecond, 1},
	} {
		if got := patternBuckets(tc.day, tc.period); got != tc.want {
			t.Errorf("patternBuckets(%v, %v) = %d, want %d", tc.day, tc.period, got, tc.want)
		}
	}
}
