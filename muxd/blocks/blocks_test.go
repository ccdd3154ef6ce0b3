package blocks

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/policy"
)

func ctr(id string, class api.Class, l api.Limits) api.Container {
	return api.Container{RegisterRequest: api.RegisterRequest{ID: id, Class: class, GPUs: []string{"0"}, Limits: l}}
}

func TestInitialLimits(t *testing.T) {
	p := policy.Default()
	capAll := func(v uint64) []uint64 {
		s := make([]uint64, ctlblock.MaxDevices)
		for i := range s {
			s[i] = v
		}
		return s
	}
	tests := []struct {
		name string
		c    api.Container
		want ctlblock.Limits
	}{
		{"online without annotations runs unthrottled", ctr("a", api.Online, api.Limits{}),
			ctlblock.Limits{ShareBP: ctlblock.ShareFull}},
		{"offline defaults to the class ceiling", ctr("b", api.Offline, api.Limits{}),
			ctlblock.Limits{ShareBP: 7000, MPSActiveThreadPercent: 70}},
		{"offline with annotations", ctr("c", api.Offline, api.Limits{GPUMemory: 8 << 30, SMPercent: 30}),
			ctlblock.Limits{ShareBP: 3000, MPSActiveThreadPercent: 30, MemoryBytes: capAll(8 << 30)}},
		{"online with an SM cap keeps its full time share", ctr("d", api.Online, api.Limits{SMPercent: 60}),
			ctlblock.Limits{ShareBP: ctlblock.ShareFull, MPSActiveThreadPercent: 60}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, InitialLimits(tc.c, p, nil)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	// Issue 14: a new offline container's first ceiling is its part of the GPU's
	// offline budget (sm_max 70%), shared with the offline containers already there.
	on := func(c api.Container, gpus ...string) api.Container { c.GPUs = gpus; return c }
	for _, tc := range []struct {
		name      string
		c         api.Container
		peers     []api.Container
		share     uint32
		mpsThread uint32
	}{
		{"second offline on the GPU gets half", ctr("f", api.Offline, api.Limits{}),
			[]api.Container{ctr("x", api.Offline, api.Limits{}), ctr("svc", api.Online, api.Limits{})}, 3500, 35},
		{"own sm-percent under its part", ctr("f", api.Offline, api.Limits{SMPercent: 20}),
			[]api.Container{ctr("x", api.Offline, api.Limits{})}, 2000, 20},
		{"a peer asking little leaves the rest", ctr("f", api.Offline, api.Limits{}),
			[]api.Container{ctr("x", api.Offline, api.Limits{SMPercent: 10})}, 6000, 60},
		{"three ways, rounded down", ctr("f", api.Offline, api.Limits{}),
			[]api.Container{ctr("x", api.Offline, api.Limits{}), on(ctr("y", api.Offline, api.Limits{}), "all")}, 2300, 23},
		{"a peer on another GPU does not count", ctr("f", api.Offline, api.Limits{}),
			[]api.Container{on(ctr("x", api.Offline, api.Limits{}), "1")}, 7000, 70},
		{"itself in the list does not count", ctr("f", api.Offline, api.Limits{}),
			[]api.Container{ctr("f", api.Offline, api.Limits{})}, 7000, 70},
	} {
		var peers []Peer
		for _, o := range tc.peers {
			peers = append(peers, Peer{Container: o})
		}
		got := InitialLimits(tc.c, p, nil, peers...)
		if got.ShareBP != tc.share || got.MPSActiveThreadPercent != tc.mpsThread {
			t.Errorf("%s: share %d bp, MPS %d%%; want %d bp, %d%%", tc.name, got.ShareBP, got.MPSActiveThreadPercent, tc.share, tc.mpsThread)
		}
	}
	// Where the GPU's budget fits its online kernels (50% here) and the new container's
	// part does not fit beside what a peer's processes may hold, it is offered the whole
	// budget for its turns (alloc.TurnOffer), its launch-gate share still its split.
	gpus := []api.GPU{{Index: 0, UUID: "GPU-0", OfflineMPS: 50, OfflineMPSFits: true}}
	for _, tc := range []struct {
		name      string
		c         api.Container
		peerHolds uint32
		fits      bool
		mpsThread uint32
	}{
		{"beside a peer holding the budget: all of it", ctr("f", api.Offline, api.Limits{}), 50, true, 50},
		{"beside a peer holding its split: the split", ctr("f", api.Offline, api.Limits{}), 25, true, 25},
		{"own sm-percent still binds", ctr("f", api.Offline, api.Limits{SMPercent: 40}), 50, true, 40},
		{"a budget that does not fit is split", ctr("f", api.Offline, api.Limits{}), 50, false, 25},
	} {
		gpus[0].OfflineMPSFits = tc.fits
		got := InitialLimits(tc.c, p, gpus, Peer{Container: ctr("x", api.Offline, api.Limits{}), HeldMPS: tc.peerHolds})
		if got.ShareBP != 2500 || got.MPSActiveThreadPercent != tc.mpsThread {
			t.Errorf("%s: share %d bp, MPS %d%%; want 2500 bp, %d%%", tc.name, got.ShareBP, got.MPSActiveThreadPercent, tc.mpsThread)
		}
	}
	q := policy.Default()
	q.Classes.Offline.MemoryLimit = 4 << 30
	q.Hook.FailClosed = true
	got := InitialLimits(ctr("e", api.Offline, api.Limits{}), q, nil)
	if got.MemoryBytes[0] != 4<<30 || got.FailPolicy != ctlblock.FailClosed {
		t.Errorf("class memory limit / fail policy not applied: %+v", got)
	}
}

func TestEnsureReopenRemove(t *testing.T) {
	run := t.TempDir()
	m, err := NewManager(run)
	if err != nil {
		t.Fatal(err)
	}
	p := policy.Default()
	c := ctr("job", api.Offline, api.Limits{SMPercent: 30})
	if err := m.Ensure(c, p); err != nil {
		t.Fatal(err)
	}
	paths := m.Paths("job")
	fi, err := os.Stat(paths.Limits)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("limits file: %v %v", fi, err)
	}
	// muxd restarts: a new manager reopens the same block with the limits it holds now.
	m.Block("job").SetLimits(ctlblock.Limits{ShareBP: 1234})
	m2, _ := NewManager(run)
	if err := m2.Ensure(c, p); err != nil {
		t.Fatal(err)
	}
	if got := m2.Block("job").Limits().ShareBP; got != 1234 {
		t.Errorf("reopened block share %d, want the live 1234 (not reset to the initial value)", got)
	}
	if u := m2.Usage("job"); u == nil || u.SharePercent != 12.34 {
		t.Errorf("usage: %+v", u)
	}
	// A damaged block is replaced rather than trusted.
	os.WriteFile(filepath.Join(run, "c", "bad"), nil, 0o644)
	os.MkdirAll(filepath.Join(run, "c", "junk"), 0o755)
	os.WriteFile(filepath.Join(run, "c", "junk", "limits"), []byte("garbage"), 0o644)
	if err := m2.Ensure(ctr("junk", api.Offline, api.Limits{}), p); err != nil {
		t.Errorf("damaged block not replaced: %v", err)
	}
	if err := m2.Ensure(ctr("bad", api.Offline, api.Limits{}), p); err == nil {
		t.Error("a file where the directory belongs was accepted")
	}
	if err := m2.Remove("job"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(paths.Dir); !os.IsNotExist(err) {
		t.Errorf("block left after Remove: %v", err)
	}
	if err := m2.Remove("../x"); err == nil {
		t.Error("Remove accepted a traversal id")
	}
}

// Issue 15, probes 4 and 5 at muxd's level: a muxd restart after the container zeroed its
// usage magic reattaches to the same inodes (the running job keeps getting muxd's limits),
// and huge reserved counters are not summed into a wrapped number.
func TestRestartReattachesToACorruptBlock(t *testing.T) {
	run := t.TempDir()
	m, err := NewManager(run)
	if err != nil {
		t.Fatal(err)
	}
	p := policy.Default()
	c := ctr("job", api.Offline, api.Limits{SMPercent: 30})
	if err := m.Ensure(c, p); err != nil {
		t.Fatal(err)
	}
	id := m.Block("job").Identity()
	dir := m.Paths("job").Dir
	r := ctlblock.NewRawUsage()
	for d := range ctlblock.MaxDevices {
		r.ReservedBytes[d] = 1 << 63
	}
	if err := ctlblock.WriteRawUsage(dir, r); err != nil {
		t.Fatal(err)
	}
	if got := m.Usage("job").ReservedBytes; got != ctlblock.MaxDevices*ctlblock.MaxPlausibleBytes {
		t.Errorf("16 × 2⁶³ reserved shown as %d, want the clamped, unwrapped sum", got)
	}
	r.Hdr.Magic = 0
	if err := ctlblock.WriteRawUsage(dir, r); err != nil {
		t.Fatal(err)
	}
	m2, _ := NewManager(run) // muxd restarts
	if err := m2.Ensure(c, p); err != nil {
		t.Fatalf("restart over a zeroed usage magic: %v", err)
	}
	if got := m2.Block("job").Identity(); got != id {
		t.Errorf("block identity %+v after restart, want %+v: a second block was created beside the running one", got, id)
	}
	m2.Block("job").SetLimits(ctlblock.Limits{ShareBP: 500})
	b, err := ctlblock.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Limits().ShareBP != 500 {
		t.Errorf("the running job's limits inode sees share %d, want 500", b.Limits().ShareBP)
	}
	if _, err := m2.Block("job").Snapshot(); err == nil {
		t.Error("a zeroed usage magic is not reported")
	}
}

// A new offline container's first limits follow its GPU's MPS budget as the guard last
// fitted it to the online kernels (MPS fixes the percentage when its first process
// creates its context, which can be before the guard's next period), and its block says
// it fits when the budget does; a GPU the guard has no figure for keeps sm_max.
func TestEnsureFollowsTheFittedBudget(t *testing.T) {
	p := policy.Default()
	for _, tc := range []struct {
		name     string
		gpus     []api.GPU
		mps, fit uint32
	}{
		{"no inventory", nil, 70, 0},
		{"no guard figure yet", []api.GPU{{Index: 0}}, 70, 0},
		{"fitted to half-GPU online kernels", []api.GPU{{Index: 0, OfflineMPS: 50, OfflineMPSFits: true}}, 50, 50},
		{"fitted budget, but not fitting now (burst, power cap)", []api.GPU{{Index: 0, OfflineMPS: 50}}, 50, 0},
		{"another GPU's budget does not count", []api.GPU{{Index: 0, OfflineMPS: 70, OfflineMPSFits: true}, {Index: 1, OfflineMPS: 40, OfflineMPSFits: true}}, 70, 70},
	} {
		m, err := NewManager(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		m.GPUs = func() []api.GPU { return tc.gpus }
		if err := m.Ensure(ctr("job", api.Offline, api.Limits{}), p); err != nil {
			t.Fatal(err)
		}
		l := m.Block("job").Limits()
		if l.MPSActiveThreadPercent != tc.mps || l.Signal.FitPercent != tc.fit {
			t.Errorf("%s: MPS %d%%, fit %d%%; want %d%% and %d%%", tc.name, l.MPSActiveThreadPercent, l.Signal.FitPercent, tc.mps, tc.fit)
		}
		m.Remove("job")
	}
}

// A second offline container registered beside one whose block already offers the whole
// fitted budget gets the whole budget too (they will take turns: alloc.TurnOffer), read
// from the first one's block; its launch-gate share is still its split.
func TestEnsureOffersTurnsBesideAHeldBudget(t *testing.T) {
	p := policy.Default()
	m, err := NewManager(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m.GPUs = func() []api.GPU { return []api.GPU{{Index: 0, OfflineMPS: 50, OfflineMPSFits: true}} }
	first, second := ctr("first", api.Offline, api.Limits{}), ctr("second", api.Offline, api.Limits{})
	registered := []api.Container{first}
	m.Peers = func() []api.Container { return registered }
	if err := m.Ensure(first, p); err != nil {
		t.Fatal(err)
	}
	registered = append(registered, second)
	if err := m.Ensure(second, p); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]uint32{"first": 50, "second": 50} {
		if l := m.Block(id).Limits(); l.MPSActiveThreadPercent != want {
			t.Errorf("%s: MPS %d%%, want %d%%", id, l.MPSActiveThreadPercent, want)
		}
	}
	if l := m.Block("second").Limits(); l.ShareBP != 2500 || l.Signal.FitPercent != 0 {
		t.Errorf("second: launch-gate share %d bp, fit %d%%; want its split, 2500, and 0 until its turn", l.ShareBP, l.Signal.FitPercent)
	}
}

// A confined container's report reaches the API as what it says, clamped by ctlblock; a
// container muxd never asked to confine shows nothing, and a report of a state libxcuda
// never writes reads as refused.
func TestUsageShowsConfinement(t *testing.T) {
	m, err := NewManager(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Ensure(ctr("job", api.Offline, api.Limits{}), policy.Default()); err != nil {
		t.Fatal(err)
	}
	dir := m.Paths("job").Dir
	if u := m.Usage("job"); u.Confine != "" || u.ConfinedSMs != 0 {
		t.Errorf("never confined: %q, %d SMs", u.Confine, u.ConfinedSMs)
	}
	l := m.Block("job").Limits()
	l.ConfinePercent = 50
	if err := m.Block("job").SetLimits(l); err != nil {
		t.Fatal(err)
	}
	if u := m.Usage("job"); u.Confine != "not confined" {
		t.Errorf("asked, nothing launched since: %q", u.Confine)
	}
	r := ctlblock.NewRawUsage()
	r.ConfineState, r.ConfinedSMs = uint32(ctlblock.ConfineOn), 72
	if err := ctlblock.WriteRawUsage(dir, r); err != nil {
		t.Fatal(err)
	}
	if u := m.Usage("job"); u.Confine != "confined" || u.ConfinedSMs != 72 {
		t.Errorf("confined: %q, %d SMs", u.Confine, u.ConfinedSMs)
	}
	r.ConfineState = 77
	if err := ctlblock.WriteRawUsage(dir, r); err != nil {
		t.Fatal(err)
	}
	if u := m.Usage("job"); u.Confine != "green context refused by the driver" || u.ConfinedSMs != 0 {
		t.Errorf("a forged state: %q, %d SMs", u.Confine, u.ConfinedSMs)
	}
}
