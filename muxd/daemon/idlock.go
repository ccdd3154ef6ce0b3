package daemon

import "sync"

// idLocks serialises everything muxd does to one container id: a registration, an
// unregistration, a start, a reconciliation drop. Each of those changes two things that
// must agree — the registry entry and the control directory <run_dir>/c/<id>/ — and
// without one lock around both steps a register racing an unregister of the same id could
// delete the directory a registration had just created (a 500 from a rename in a vanished
// directory, or a container left registered without its control block). Different ids do
// not wait for each other, so concurrent registrations of many containers stay parallel.
type idLocks struct {
	mu    sync.Mutex
	locks map[string]*idLock
}

type idLock struct {
	sync.Mutex
	users int // goroutines holding or waiting for this lock; the entry goes at 0
}

// lock takes id's lock and returns its release.
func (l *idLocks) lock(id string) (unlock func()) {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*idLock{}
	}
	e := l.locks[id]
	if e == nil {
		e = &idLock{}
		l.locks[id] = e
	}
	e.users++
	l.mu.Unlock()
	e.Lock()
	return func() {
		e.Unlock()
		l.mu.Lock()
		if e.users--; e.users == 0 {
			delete(l.locks, id)
		}
		l.mu.Unlock()
	}
}

// held returns how many ids have a lock entry (tests check that nothing leaks).
func (l *idLocks) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.locks)
}
