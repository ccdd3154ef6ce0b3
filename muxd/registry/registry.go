// Package registry is muxd's record of the containers it manages. Every change is written
// to one file per container under the state directory (atomically: temp file, then
// rename) before it is acknowledged, so that `kill -9` of muxd at any moment loses nothing;
// on start the registry is read back and reconciled with the processes still running.
//
// The files are not fsynced. They describe processes of the current boot, which a power
// loss or kernel crash ends anyway: what survives such a crash is reconciled away (or, if
// torn, skipped and logged) on the next start. A process crash of muxd loses nothing
// without fsync, because the data is in the page cache, and the three calls on every GPU
// container's creation path stay off the disk's flush latency.
package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/policy/classify"
)

// Sentinel error kinds; callers map them to HTTP statuses.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
)

// Entry is what the registry stores for one container.
type Entry struct {
	api.Container
	// StartTicks is the process start time (clock ticks since boot, /proc/PID/stat field
	// 22) recorded with the pid, so that a recycled pid is not mistaken for the container.
	StartTicks uint64 `json:"start_ticks,omitempty"`
}

// ProcessChecker tells whether a process is the one recorded. The real one reads /proc;
// tests fake it.
type ProcessChecker interface {
	// StartTicks returns the start time of pid, or an error if it does not exist.
	StartTicks(pid int) (uint64, error)
}

// Registry holds the containers; it is safe for concurrent use.
type Registry struct {
	dir   string
	procs ProcessChecker
	log   *slog.Logger
	now   func() time.Time

	mu      sync.Mutex
	entries map[string]*Entry
	// sorted is entries in id order, rebuilt on the first listing after an entry was
	// added or removed: the guard lists every period, registrations are rare.
	sorted []*Entry
}

// StaleCreated is how long a container may stay registered without ever starting before
// reconciliation drops it (its create failed after registration).
const StaleCreated = 10 * time.Minute

// Open loads (creating if needed) the registry kept in dir.
func Open(dir string, procs ProcessChecker, log *slog.Logger) (*Registry, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create registry directory: %w", err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("registry directory %s is not a directory (a symlink is refused)", dir)
	}
	r := &Registry{dir: dir, procs: procs, log: log, now: time.Now, entries: map[string]*Entry{}}
	names, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read registry directory: %w", err)
	}
	for _, de := range names {
		name := de.Name()
		if strings.HasPrefix(name, ".tmp-") {
			// An interrupted write: the rename never happened, the old file (if any) is intact.
			_ = os.Remove(filepath.Join(dir, name))
			continue
		}
		if !strings.HasSuffix(name, ".json") || !de.Type().IsRegular() {
			continue
		}
		e, err := r.readEntry(filepath.Join(dir, name))
		if err != nil {
			// Keep the file for the operator to inspect; never delete what we cannot read.
			log.Error("skipping unreadable registry entry", "file", name, "err", err)
			continue
		}
		r.entries[e.ID] = e
	}
	r.sorted = nil
	return r, nil
}

func (r *Registry) readEntry(path string) (*Entry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var e Entry
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if err := api.ValidateID(e.ID); err != nil {
		return nil, err
	}
	if filepath.Base(path) != e.ID+".json" {
		return nil, fmt.Errorf("file name does not match id %q", e.ID)
	}
	return &e, nil
}

func (r *Registry) path(id string) string { return filepath.Join(r.dir, id+".json") }

// persist writes one entry atomically. Callers hold r.mu.
func (r *Registry) persist(e *Entry) error {
	data, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return fmt.Errorf("encode registry entry %s: %w", e.ID, err)
	}
	f, err := os.CreateTemp(r.dir, ".tmp-"+e.ID+"-")
	if err != nil {
		return fmt.Errorf("write registry entry %s: %w", e.ID, err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write registry entry %s: %w", e.ID, err)
	}
	if err := os.Rename(tmp, r.path(e.ID)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("commit registry entry %s: %w", e.ID, err)
	}
	return nil
}

// Add registers a container in state created; reg was checked by policy/classify, which is
// the only place that makes one. Registering the same id again with the same request is
// idempotent (created=false); with a different one it is a conflict.
func (r *Registry) Add(reg classify.Registration, control api.ControlPaths) (c api.Container, created bool, err error) {
	req := reg.Request()
	// The id names the entry's file: a zero Registration must not write ".json".
	if err := api.ValidateID(req.ID); err != nil {
		return api.Container{}, false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.entries[req.ID]; ok {
		if sameRequest(old.RegisterRequest, req) {
			return old.Container, false, nil
		}
		return api.Container{}, false, fmt.Errorf("%w: container %s is already registered with a different class, GPUs or limits", ErrConflict, req.ID)
	}
	e := &Entry{Container: api.Container{
		RegisterRequest: req,
		State:           api.StateCreated,
		Registered:      r.now().UTC(),
		Control:         control,
	}}
	if err := r.persist(e); err != nil {
		return api.Container{}, false, err
	}
	r.entries[req.ID] = e
	r.sorted = nil
	return e.Container, true, nil
}

func sameRequest(a, b api.RegisterRequest) bool {
	if a.ID != b.ID || a.Class != b.Class || a.Limits != b.Limits || a.Namespace != b.Namespace || a.Pod != b.Pod || len(a.GPUs) != len(b.GPUs) {
		return false
	}
	for i := range a.GPUs {
		if a.GPUs[i] != b.GPUs[i] {
			return false
		}
	}
	return true
}

// Start records the container's host pid.
func (r *Registry) Start(id string, pid int) (api.Container, error) {
	if err := api.ValidateID(id); err != nil {
		return api.Container{}, err
	}
	if err := (&api.StartRequest{PID: pid}).Validate(); err != nil {
		return api.Container{}, err
	}
	ticks, err := r.procs.StartTicks(pid)
	if err != nil {
		return api.Container{}, fmt.Errorf("%w: pid %d: %v", api.ErrInvalid, pid, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[id]
	if !ok {
		return api.Container{}, fmt.Errorf("%w: container %s is not registered", ErrNotFound, id)
	}
	if e.State == api.StateRunning && (e.PID != pid || e.StartTicks != ticks) && r.alive(e) {
		return api.Container{}, fmt.Errorf("%w: container %s already runs as pid %d", ErrConflict, id, e.PID)
	}
	// A running entry whose process has gone is the same id started again (docker restart)
	// before muxd saw the exit: the new process takes its place.
	next := *e
	next.State, next.PID, next.StartTicks, next.Started = api.StateRunning, pid, ticks, r.now().UTC()
	if err := r.persist(&next); err != nil {
		return api.Container{}, err
	}
	*e = next
	return e.Container, nil
}

// alive reports whether a running entry's process still exists. Callers hold r.mu.
func (r *Registry) alive(e *Entry) bool {
	ticks, err := r.procs.StartTicks(e.PID)
	return err == nil && (e.StartTicks == 0 || ticks == e.StartTicks)
}

// Remove forgets a container.
func (r *Registry) Remove(id string) error {
	if err := api.ValidateID(id); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.entries[id]; !ok {
		return fmt.Errorf("%w: container %s is not registered", ErrNotFound, id)
	}
	if err := os.Remove(r.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove registry entry %s: %w", id, err)
	}
	delete(r.entries, id)
	r.sorted = nil
	return nil
}

// Get returns one container.
func (r *Registry) Get(id string) (api.Container, error) {
	if err := api.ValidateID(id); err != nil {
		return api.Container{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[id]
	if !ok {
		return api.Container{}, fmt.Errorf("%w: container %s is not registered", ErrNotFound, id)
	}
	return e.Container, nil
}

// List returns all containers sorted by id.
func (r *Registry) List() []api.Container {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.appendSorted(make([]api.Container, 0, len(r.entries)))
}

// AppendTo appends all containers, sorted by id, to dst: List for a caller that lists
// every period into the same buffer.
func (r *Registry) AppendTo(dst []api.Container) []api.Container {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.appendSorted(dst)
}

// appendSorted appends the containers in id order; callers hold r.mu.
func (r *Registry) appendSorted(dst []api.Container) []api.Container {
	if r.sorted == nil {
		r.sorted = make([]*Entry, 0, len(r.entries))
		for _, e := range r.entries {
			r.sorted = append(r.sorted, e)
		}
		sort.Slice(r.sorted, func(i, j int) bool { return r.sorted[i].ID < r.sorted[j].ID })
	}
	for _, e := range r.sorted {
		dst = append(dst, e.Container)
	}
	return dst
}

// Len returns how many containers are registered.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.entries)
}

// Stale is a container reconciliation would drop, and why.
type Stale struct {
	ID, Reason string
}

// staleReason says why an entry should be dropped, or "" if it should stay. Callers hold r.mu.
func (r *Registry) staleReason(e *Entry) string {
	switch e.State {
	case api.StateRunning:
		ticks, err := r.procs.StartTicks(e.PID)
		if err != nil {
			return fmt.Sprintf("pid %d has exited", e.PID)
		} else if e.StartTicks != 0 && ticks != e.StartTicks {
			return fmt.Sprintf("pid %d now belongs to another process", e.PID)
		}
	case api.StateCreated:
		if r.now().Sub(e.Registered) > StaleCreated {
			return "it never started"
		}
	}
	return ""
}

// Stale lists, sorted by id, the containers whose process has gone (muxd missed their
// exit, for example while it was down) and registrations that never started. It changes
// nothing: the caller drops each with RemoveStale, under its own per-id serialisation.
func (r *Registry) Stale() []Stale {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Stale
	for id, e := range r.entries {
		if why := r.staleReason(e); why != "" {
			out = append(out, Stale{ID: id, Reason: why})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// RemoveStale forgets a container if it is still stale, and returns why; "" (and no
// error) means it was started again or re-registered meanwhile and stays.
func (r *Registry) RemoveStale(id string) (reason string, err error) {
	if err := api.ValidateID(id); err != nil {
		return "", err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[id]
	if !ok {
		return "", fmt.Errorf("%w: container %s is not registered", ErrNotFound, id)
	}
	why := r.staleReason(e)
	if why == "" {
		return "", nil
	}
	if err := os.Remove(r.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("remove registry entry %s: %w", id, err)
	}
	delete(r.entries, id)
	r.sorted = nil
	return why, nil
}

// Reconcile drops every stale container (see Stale) and returns the ids it dropped, each
// logged with the reason. muxd itself drops them one by one under its per-id lock, so
// that a container's control block goes with its entry.
func (r *Registry) Reconcile() []string {
	var dropped []string
	for _, s := range r.Stale() {
		why, err := r.RemoveStale(s.ID)
		if err != nil {
			if !errors.Is(err, ErrNotFound) {
				r.log.Error("cannot drop stale container", "id", s.ID, "err", err)
			}
			continue
		}
		if why == "" {
			continue
		}
		r.log.Info("dropped stale container", "id", s.ID, "reason", why)
		dropped = append(dropped, s.ID)
	}
	return dropped
}
