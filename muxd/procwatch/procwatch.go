// Package procwatch tells muxd when a container's process exits. Each watched process is
// held by a pidfd, which the kernel makes readable when the process terminates. Every
// pidfd sits in one epoll instance of the watcher's, and Go's poller waits on that
// instance, so the watches cost no polling, no thread and no goroutine each: a goroutine
// per watch (the first design) kept 1,000 parked stacks at 1,000 containers (3.5 MiB of
// muxd's RSS) and had the garbage collector scan each of them every cycle. This is how
// muxd unregisters a GPU container when it stops, without a poststop hook on the
// container's creation path and even when the runtime never runs one (a killed shim, a
// crashed runc).
package procwatch

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Watcher watches one process per key (muxd's container id).
type Watcher struct {
	onExit func(key string, pid int)

	mu      sync.Mutex
	watches map[string]*watch // by key
	byID    map[uint64]*watch // by the id its epoll event carries
	nextID  uint64
	ep      *os.File // the epoll instance; nil until the first watch
	epfd    int      // its descriptor (os.File.Fd would make it blocking)
	closed  bool
}

type watch struct {
	key string
	pid int
	id  uint64
	fd  int // the pidfd; -1 once closed
}

// New returns a watcher that calls onExit, from a goroutine of its own, once for each
// watched process that exits while still watched.
func New(onExit func(key string, pid int)) *Watcher {
	return &Watcher{onExit: onExit, watches: map[string]*watch{}, byID: map[uint64]*watch{}}
}

var errClosed = errors.New("process watcher is closed")

// Watch starts watching pid under key, replacing an earlier watch of key. A process that
// has already gone is reported at once.
func (w *Watcher) Watch(key string, pid int) error {
	if pid <= 0 {
		return fmt.Errorf("watch %s: pid %d is not a process id", key, pid)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return errClosed
		}
		wt := &watch{key: key, pid: pid, fd: -1}
		w.replace(wt)
		w.mu.Unlock()
		go w.exited(wt)
		return nil
	}
	if err != nil {
		return fmt.Errorf("watch %s: pidfd_open(%d): %w", key, pid, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		unix.Close(fd)
		return errClosed
	}
	if err := w.startLocked(); err != nil {
		unix.Close(fd)
		return fmt.Errorf("watch %s: %w", key, err)
	}
	w.nextID++
	wt := &watch{key: key, pid: pid, id: w.nextID, fd: fd}
	// The event carries the watch's id, never reused: an event read just before its
	// watch was stopped cannot be taken for a later watch whose pidfd got the same number.
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(uint32(wt.id)), Pad: int32(uint32(wt.id >> 32))}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		unix.Close(fd)
		return fmt.Errorf("watch %s: add pidfd of %d to epoll: %w", key, pid, err)
	}
	w.byID[wt.id] = wt
	w.replace(wt)
	return nil
}

// startLocked creates the epoll instance and the goroutine that waits on it. w.mu held.
func (w *Watcher) startLocked() error {
	if w.ep != nil {
		return nil
	}
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("epoll_create1: %w", err)
	}
	// Non-blocking, so that os.NewFile hands the instance to Go's poller.
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return fmt.Errorf("epoll instance: %w", err)
	}
	ep := os.NewFile(uintptr(fd), "procwatch-epoll")
	rc, err := ep.SyscallConn()
	if err != nil {
		ep.Close()
		return fmt.Errorf("epoll instance: %w", err)
	}
	w.ep, w.epfd = ep, fd
	go w.wait(rc)
	return nil
}

// wait reports the exits the epoll instance signals until it is closed (Close).
func (w *Watcher) wait(rc interface {
	Read(func(uintptr) bool) error
}) {
	events := make([]unix.EpollEvent, 64)
	// A false return parks on the poller until the instance is readable again, which it
	// is while any pidfd in it is (level-triggered: an exited process's pidfd stays
	// readable until it is removed).
	_ = rc.Read(func(fd uintptr) bool {
		for {
			n, err := unix.EpollWait(int(fd), events, 0)
			if err == unix.EINTR {
				continue
			}
			if err != nil || n == 0 {
				return false
			}
			for _, ev := range events[:n] {
				w.ready(uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32)
			}
		}
	})
}

// ready handles the exit of the watch with id, unless it was stopped or replaced.
func (w *Watcher) ready(id uint64) {
	w.mu.Lock()
	wt := w.byID[id]
	if wt == nil {
		w.mu.Unlock()
		return
	}
	w.dropLocked(wt)
	w.mu.Unlock()
	go w.exited(wt)
}

// replace installs wt as its key's watch and stops the previous one. w.mu held.
func (w *Watcher) replace(wt *watch) {
	if old := w.watches[wt.key]; old != nil {
		w.dropLocked(old)
	}
	w.watches[wt.key] = wt
}

// dropLocked closes wt's pidfd (which also takes it out of the epoll instance) and
// forgets its id. w.mu held.
func (w *Watcher) dropLocked(wt *watch) {
	if wt.fd >= 0 {
		unix.Close(wt.fd)
		wt.fd = -1
		delete(w.byID, wt.id)
	}
}

// exited reports wt's process unless the watch was stopped or replaced meanwhile.
func (w *Watcher) exited(wt *watch) {
	w.mu.Lock()
	if w.watches[wt.key] != wt {
		w.mu.Unlock()
		return
	}
	delete(w.watches, wt.key)
	w.mu.Unlock()
	w.onExit(wt.key, wt.pid)
}

// Stop stops watching key; its process's exit is no longer reported.
func (w *Watcher) Stop(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt := w.watches[key]; wt != nil {
		w.dropLocked(wt)
		delete(w.watches, key)
	}
}

// Close stops every watch.
func (w *Watcher) Close() {
	w.mu.Lock()
	w.closed = true
	for key, wt := range w.watches {
		w.dropLocked(wt)
		delete(w.watches, key)
	}
	ep := w.ep
	w.ep = nil
	w.mu.Unlock()
	// Outside the lock: closing waits for wait's read to return, and a read may be
	// handling an exit (ready takes the lock).
	if ep != nil {
		ep.Close()
	}
}

// Len is the number of processes watched.
func (w *Watcher) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.watches)
}
