// Package procwatch tells muxd when a container's process exits. Each watched process is
// held by a pidfd, which the kernel makes readable when the process terminates; Go's
// poller waits on it, so a watch costs no polling and no thread. This is how muxd
// unregisters a GPU container when it stops, without a poststop hook on the container's
// creation path and even when the runtime never runs one (a killed shim, a crashed runc).
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
	watches map[string]*watch
	closed  bool
}

type watch struct {
	pid  int
	file *os.File
	stop bool // set (under Watcher.mu) when the watch is replaced or stopped
}

// New returns a watcher that calls onExit, from its own goroutine, once for each watched
// process that exits while still watched.
func New(onExit func(key string, pid int)) *Watcher {
	return &Watcher{onExit: onExit, watches: map[string]*watch{}}
}

// Watch starts watching pid under key, replacing an earlier watch of key. A process that
// has already gone is reported at once.
func (w *Watcher) Watch(key string, pid int) error {
	if pid <= 0 {
		return fmt.Errorf("watch %s: pid %d is not a process id", key, pid)
	}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		wt := &watch{pid: pid}
		if !w.replace(key, wt) {
			return errors.New("process watcher is closed")
		}
		go w.exited(key, wt)
		return nil
	}
	if err != nil {
		return fmt.Errorf("watch %s: pidfd_open(%d): %w", key, pid, err)
	}
	f := os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", pid))
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return fmt.Errorf("watch %s: %w", key, err)
	}
	wt := &watch{pid: pid, file: f}
	if !w.replace(key, wt) {
		f.Close()
		return errors.New("process watcher is closed")
	}
	go func() {
		// The first call reports "not ready", so Read parks on the poller until the pidfd
		// is readable (the process exited) or the file is closed (Stop).
		waited := false
		_ = rc.Read(func(uintptr) bool {
			done := waited
			waited = true
			return done
		})
		w.exited(key, wt)
	}()
	return nil
}

// replace installs wt as key's watch and stops the previous one.
func (w *Watcher) replace(key string, wt *watch) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	if old := w.watches[key]; old != nil {
		old.close()
	}
	w.watches[key] = wt
	return true
}

// exited reports wt's process unless the watch was stopped or replaced meanwhile.
func (w *Watcher) exited(key string, wt *watch) {
	w.mu.Lock()
	if w.watches[key] != wt || wt.stop {
		w.mu.Unlock()
		return
	}
	delete(w.watches, key)
	wt.close()
	w.mu.Unlock()
	w.onExit(key, wt.pid)
}

// Stop stops watching key; its process's exit is no longer reported.
func (w *Watcher) Stop(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt := w.watches[key]; wt != nil {
		wt.close()
		delete(w.watches, key)
	}
}

// Close stops every watch.
func (w *Watcher) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for key, wt := range w.watches {
		wt.close()
		delete(w.watches, key)
	}
}

// Len is the number of processes watched.
func (w *Watcher) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.watches)
}

// close is called with Watcher.mu held.
func (wt *watch) close() {
	wt.stop = true
	if wt.file != nil {
		wt.file.Close()
	}
}
