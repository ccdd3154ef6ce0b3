package registry

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/policy"
	"github.com/muxflow/muxflow/policy/classify"
)

type fakeProcs map[int]uint64

func (f fakeProcs) StartTicks(pid int) (uint64, error) {
	if t, ok := f[pid]; ok {
		return t, nil
	}
	return 0, fmt.Errorf("process %d does not exist", pid)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func req(id string) classify.Registration {
	return registration(api.RegisterRequest{ID: id, Class: api.Offline, GPUs: []string{"0"}, Limits: api.Limits{SMPercent: 30}})
}

func registration(r api.RegisterRequest) classify.Registration {
	reg, err := classify.Request(r, policy.Default())
	if err != nil {
		panic(err)
	}
	return reg
}

func TestLifecyclePersists(t *testing.T) {
	dir := t.TempDir()
	procs := fakeProcs{100: 7}
	r, err := Open(dir, procs, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if _, created, err := r.Add(req("a"), api.ControlPaths{Dir: "/run/muxflow/c/a"}); err != nil || !created {
		t.Fatalf("Add: created=%v err=%v", created, err)
	}
	if _, created, err := r.Add(req("a"), api.ControlPaths{}); err != nil || created {
		t.Fatalf("identical re-Add: created=%v err=%v, want idempotent", created, err)
	}
	other := registration(api.RegisterRequest{ID: "a", Class: api.Online, GPUs: []string{"0"}, Limits: api.Limits{SMPercent: 60}})
	if _, _, err := r.Add(other, api.ControlPaths{}); !errors.Is(err, ErrConflict) {
		t.Fatalf("conflicting re-Add: %v, want ErrConflict", err)
	}
	if _, err := r.Start("a", 100); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Start("missing", 100); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Start unknown: %v", err)
	}
	if _, err := r.Start("a", 555); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("Start with a pid that does not exist: %v", err)
	}
	if _, _, err := r.Add(req("b"), api.ControlPaths{}); err != nil {
		t.Fatal(err)
	}
	want := r.List()

	// A fresh registry over the same directory sees exactly the same containers.
	r2, err := Open(dir, procs, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, r2.List()); diff != "" {
		t.Errorf("reopened registry differs (-want +got):\n%s", diff)
	}
	if err := r2.Remove("b"); err != nil {
		t.Fatal(err)
	}
	if err := r2.Remove("b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Remove: %v", err)
	}
	r3, _ := Open(dir, procs, quiet)
	if r3.Len() != 1 {
		t.Errorf("after Remove and reopen: %d containers, want 1", r3.Len())
	}
}

func TestHostileInputChangesNothing(t *testing.T) {
	dir := t.TempDir()
	r, _ := Open(dir, fakeProcs{}, quiet)
	for _, id := range []string{"", "../x", "a/b", ".hidden", "x\x00y", string(make([]byte, 300))} {
		// No Registration can carry such an id.
		if _, err := classify.Request(api.RegisterRequest{ID: id, Class: api.Offline, GPUs: []string{"0"}}, policy.Default()); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("classify.Request(%q): %v, want ErrInvalid", id, err)
		}
		if err := r.Remove(id); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("Remove(%q): %v, want ErrInvalid", id, err)
		}
	}
	if _, _, err := r.Add(classify.Registration{}, api.ControlPaths{}); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("Add of the zero Registration: %v, want ErrInvalid", err)
	}
	files, _ := os.ReadDir(dir)
	if len(files) != 0 {
		t.Errorf("hostile ids left files: %v", files)
	}
	parent, _ := os.ReadDir(filepath.Dir(dir))
	for _, f := range parent {
		if f.Name() == "x.json" {
			t.Errorf("a file was written outside the registry directory")
		}
	}
}

func TestOpenSkipsDamageAndTempFiles(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "bad.json"), []byte("{not json"), 0o600)
	os.WriteFile(filepath.Join(dir, "wrong.json"), []byte(`{"id":"other"}`), 0o600)
	os.WriteFile(filepath.Join(dir, ".tmp-a-123"), []byte("partial"), 0o600)
	r, err := Open(dir, fakeProcs{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 0 {
		t.Errorf("damaged entries loaded: %v", r.List())
	}
	if _, err := os.Stat(filepath.Join(dir, "bad.json")); err != nil {
		t.Errorf("an unreadable entry was deleted; it must be kept for the operator")
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-a-123")); !os.IsNotExist(err) {
		t.Errorf("interrupted temp file not cleaned: %v", err)
	}
}

func TestReconcile(t *testing.T) {
	dir := t.TempDir()
	procs := fakeProcs{11: 10, 12: 20, 13: 30}
	r, _ := Open(dir, procs, quiet)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }
	for i, id := range []string{"alive", "exited", "reused"} {
		r.Add(req(id), api.ControlPaths{})
		if _, err := r.Start(id, 11+i); err != nil {
			t.Fatal(err)
		}
	}
	r.Add(req("fresh"), api.ControlPaths{})
	now = now.Add(StaleCreated - time.Minute)
	r.Add(req("old-created"), api.ControlPaths{})
	now = now.Add(2 * time.Minute) // "fresh" is now stale, "old-created" is not
	delete(procs, 12)
	procs[13] = 31 // pid 13 was recycled by another process
	got := r.Reconcile()
	if diff := cmp.Diff([]string{"exited", "fresh", "reused"}, got); diff != "" {
		t.Errorf("dropped (-want +got):\n%s", diff)
	}
	var left []string
	for _, c := range r.List() {
		left = append(left, c.ID)
	}
	if diff := cmp.Diff([]string{"alive", "old-created"}, left); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
}

func TestProcFS(t *testing.T) {
	ticks, err := ProcFS{}.StartTicks(os.Getpid())
	if err != nil || ticks == 0 {
		t.Fatalf("own process: %d, %v", ticks, err)
	}
	if _, err := (ProcFS{}).StartTicks(1 << 30); err == nil {
		t.Error("nonexistent pid reported alive")
	}
}

func TestStartAgainAfterTheProcessHasGone(t *testing.T) {
	procs := fakeProcs{100: 7, 200: 9}
	r, err := Open(t.TempDir(), procs, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Add(req("a"), api.ControlPaths{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Start("a", 100); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Start("a", 200); !errors.Is(err, ErrConflict) {
		t.Fatalf("second process while the first runs: %v, want ErrConflict", err)
	}
	// The first process exits and the id starts again (docker restart) before muxd has
	// noticed: the new process takes over.
	delete(procs, 100)
	c, err := r.Start("a", 200)
	if err != nil || c.PID != 200 {
		t.Fatalf("restart: %+v %v", c, err)
	}
}

// RemoveStale re-checks under the lock: an entry started again since Stale listed it stays.
func TestRemoveStaleRechecks(t *testing.T) {
	procs := fakeProcs{100: 7}
	r, _ := Open(t.TempDir(), procs, quiet)
	r.Add(req("a"), api.ControlPaths{})
	if _, err := r.Start("a", 100); err != nil {
		t.Fatal(err)
	}
	delete(procs, 100)
	stale := r.Stale()
	if len(stale) != 1 || stale[0].ID != "a" || stale[0].Reason != "pid 100 has exited" {
		t.Fatalf("Stale: %+v", stale)
	}
	procs[200] = 9
	if _, err := r.Start("a", 200); err != nil { // started again before the drop
		t.Fatal(err)
	}
	if why, err := r.RemoveStale("a"); why != "" || err != nil {
		t.Fatalf("RemoveStale of a restarted entry: %q %v, want it kept", why, err)
	}
	delete(procs, 200)
	if why, err := r.RemoveStale("a"); why != "pid 200 has exited" || err != nil {
		t.Fatalf("RemoveStale: %q %v", why, err)
	}
	if _, err := r.RemoveStale("a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("RemoveStale of a removed entry: %v", err)
	}
}

// The guard lists the registry every period through a cached order: the list must follow
// every add, removal and change of state, sorted by id, and AppendTo must leave what dst
// held before.
func TestListFollowsChanges(t *testing.T) {
	r, err := Open(t.TempDir(), fakeProcs{100: 7}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ids := func() []string {
		var out []string
		got := r.AppendTo([]api.Container{{RegisterRequest: api.RegisterRequest{ID: "kept"}}})
		if got[0].ID != "kept" {
			t.Errorf("AppendTo overwrote dst: %v", got[0])
		}
		for _, c := range got[1:] {
			out = append(out, c.ID+":"+string(c.State))
		}
		return out
	}
	for _, id := range []string{"c", "a", "b"} {
		if _, _, err := r.Add(req(id), api.ControlPaths{}); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]string{"a:created", "b:created", "c:created"}, ids()); diff != "" {
		t.Errorf("after adds (-want +got):\n%s", diff)
	}
	if _, err := r.Start("b", 100); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove("a"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Add(req("0"), api.ControlPaths{}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"0:created", "b:running", "c:created"}, ids()); diff != "" {
		t.Errorf("after a start, a removal and an add (-want +got):\n%s", diff)
	}
	if got := r.List(); len(got) != 3 || got[0].ID != "0" {
		t.Errorf("List = %v", got)
	}
}
