package blocks

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/policy"
)

func TestSignalSlots(t *testing.T) {
	inv := []api.GPU{{Index: 0, UUID: "GPU-aaaa"}, {Index: 1, UUID: "GPU-bbbb"}, {Index: 3, UUID: "GPU-dddd"}}
	all := ^uint64(0)
	for _, tc := range []struct {
		list []string
		inv  []api.GPU
		want uint64
	}{
		{[]string{"0"}, inv, 1},
		{[]string{"3", "1"}, inv, 0b1010},
		{[]string{"GPU-bbbb"}, inv, 0b10},
		{[]string{"all"}, inv, 0b1011},
		{[]string{"all"}, nil, all},              // no inventory: every slot
		{[]string{"GPU-ffff"}, inv, all},         // unknown GPU: every slot
		{[]string{"MIG-GPU-aaaa/1/0"}, inv, all}, // MIG instance: every slot
		{[]string{"64"}, inv, all},               // beyond the page
	} {
		if got := SignalSlots(tc.list, tc.inv); got != tc.want {
			t.Errorf("SignalSlots(%v) = %#x, want %#x", tc.list, got, tc.want)
		}
	}
}

func TestSignalRoles(t *testing.T) {
	p := policy.Default()
	on := api.Container{RegisterRequest: api.RegisterRequest{ID: "on", Class: api.Online, GPUs: []string{"1"}}}
	off := api.Container{RegisterRequest: api.RegisterRequest{ID: "off", Class: api.Offline, GPUs: []string{"1"}}}
	if s := Signal(on, p, nil); s.Role != ctlblock.SignalPublish || s.GPUs != 0b10 {
		t.Errorf("online: %+v", s)
	}
	s := Signal(off, p, nil)
	if s.Role != ctlblock.SignalFollow || s.GPUs != 0b10 || s.HoldWindow != 10*time.Millisecond ||
		s.HoldPeriod != 200*time.Millisecond || s.HoldMaxBP != 8000 ||
		s.Queue != 300*time.Microsecond || s.Ahead != ctlblock.AheadOn || s.Linger != 500*time.Microsecond {
		t.Errorf("offline with the default policy: %+v", s)
	}
	p.Hold.Ahead = false
	p.Hold.Queue = policy.Duration(time.Millisecond)
	p.Hold.Linger = 0
	if s := Signal(off, p, nil); s.Ahead != ctlblock.AheadOff || s.Queue != time.Millisecond || s.Linger != ctlblock.NoLinger {
		t.Errorf("ahead = false, queue = 1ms, linger = 0s: %+v", s)
	}
	p.Hold.Max = 0
	if s := Signal(off, p, nil); s.Role != ctlblock.SignalNone {
		t.Errorf("hold.max 0%%: offline role %v, want none", s.Role)
	}
	p.Hold.Enabled = false
	if s := Signal(on, p, nil); s != (ctlblock.Signal{}) {
		t.Errorf("hold disabled: %+v", s)
	}
}

// TestEnsureWritesSignal: the page is created under run_dir and a container's block
// carries its role, slots and the hold policy; the guard's read-modify-write keeps them.
func TestEnsureWritesSignal(t *testing.T) {
	run := t.TempDir()
	m, err := NewManager(run)
	if err != nil {
		t.Fatal(err)
	}
	m.GPUs = func() []api.GPU { return []api.GPU{{Index: 2, UUID: "GPU-cccc"}} }
	if err := m.EnsureSignalPage(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(run, "gpu", ctlblock.SignalFile)); err != nil || st.Mode().Perm() != 0o666 {
		t.Fatalf("signal page: %v %v", st, err)
	}
	if st, err := os.Stat(filepath.Join(run, "gpu")); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("signal directory: %v %v", st, err)
	}
	if err := m.EnsureSignalPage(); err != nil { // again: kept
		t.Fatal(err)
	}
	c := api.Container{RegisterRequest: api.RegisterRequest{ID: "off1", Class: api.Offline, GPUs: []string{"GPU-cccc"}}}
	if err := m.Ensure(c, policy.Default()); err != nil {
		t.Fatal(err)
	}
	b := m.Block("off1")
	got := b.Limits().Signal
	if got.Role != ctlblock.SignalFollow || got.GPUs != 1<<2 || got.HoldMaxBP != 8000 || got.Linger != 500*time.Microsecond {
		t.Errorf("block signal limits %+v", got)
	}
	l := b.Limits()
	l.ShareBP = 4000
	if err := b.SetLimits(l); err != nil {
		t.Fatal(err)
	}
	if b.Limits().Signal != got {
		t.Errorf("a limits update lost the signal settings: %+v", b.Limits().Signal)
	}
	m.Remove("off1")

	// An online container killed with its slot set: removing it clears the slot.
	page, err := ctlblock.OpenSignalPage(ctlblock.SignalPagePath(run), 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer page.Close()
	on := api.Container{RegisterRequest: api.RegisterRequest{ID: "on1", Class: api.Online, GPUs: []string{"2"}}}
	if err := m.Ensure(on, policy.Default()); err != nil {
		t.Fatal(err)
	}
	page.SetOnline(2, 12345)
	page.SetOnline(5, 777) // another GPU's: untouched
	if err := m.Remove("on1"); err != nil {
		t.Fatal(err)
	}
	if page.Online(2) != 0 || page.Online(5) != 777 {
		t.Errorf("after removing the online container: slot 2 = %d (want 0), slot 5 = %d (want 777)", page.Online(2), page.Online(5))
	}
}

// TestFollowerCounts: the page says how many registered offline containers follow each
// GPU (online processes wake holders only there); online containers do not count, and
// a removal is counted out.
func TestFollowerCounts(t *testing.T) {
	run := t.TempDir()
	m, err := NewManager(run)
	if err != nil {
		t.Fatal(err)
	}
	m.GPUs = func() []api.GPU { return []api.GPU{{Index: 0}, {Index: 1}, {Index: 2}} }
	if err := m.EnsureSignalPage(); err != nil {
		t.Fatal(err)
	}
	page, err := ctlblock.OpenSignalPage(ctlblock.SignalPagePath(run), 0o666)
	if err != nil {
		t.Fatal(err)
	}
	defer page.Close()
	counts := func() [3]uint32 { return [3]uint32{page.Followers(0), page.Followers(1), page.Followers(2)} }
	register := func(id string, class api.Class, gpus ...string) {
		t.Helper()
		c := api.Container{RegisterRequest: api.RegisterRequest{ID: id, Class: class, GPUs: gpus}}
		if err := m.Ensure(c, policy.Default()); err != nil {
			t.Fatal(err)
		}
	}
	register("off-a", api.Offline, "1")
	register("off-b", api.Offline, "1", "2")
	register("on-a", api.Online, "0")
	if got, want := counts(), [3]uint32{0, 2, 1}; got != want {
		t.Errorf("followers per GPU %v, want %v", got, want)
	}
	if err := m.Remove("off-b"); err != nil {
		t.Fatal(err)
	}
	if got, want := counts(), [3]uint32{0, 1, 0}; got != want {
		t.Errorf("after removing off-b: followers per GPU %v, want %v", got, want)
	}
	if err := m.Remove("off-a"); err != nil {
		t.Fatal(err)
	}
	if got, want := counts(), [3]uint32{0, 0, 0}; got != want {
		t.Errorf("after removing both: followers per GPU %v, want %v", got, want)
	}
}
