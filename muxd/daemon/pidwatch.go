package daemon

// Watching a GPU container's pid file for muxflow-runtime. muxd needs the host pid of a
// GPU container's process. muxflow-runtime used to fork a reporter that waited for the
// runtime's pid file and posted the pid back (hook/native/src/pidreport.c): one process
// more on every GPU container's start, and one more connection and request for muxd.
// When the create request names the pid file (pid_file=PATH) and muxd can watch it, muxd
// does the reporter's work itself, with the same rules, and answers 201 instead of 200;
// the runtime then forks nothing. Without pid_file, or when muxd cannot watch (another
// mount namespace, too many watches, no peer pid), the answer is 200 and the runtime
// reports the pid as before.
//
// The runtime is the create request's peer (SO_PEERCRED): it waits for the answer, so
// its pid is still its own when muxd opens a pidfd on it, and muxflow-runtime execs the
// real runtime in the same process. The pid file is watched with inotify from before the
// runtime starts; when it appears (runc renames a temporary file, crun may write in
// place) and differs from any file that was there at create, its pid is recorded as a
// start report is. When the runtime exits without having written it, or the container's
// process has already exited (a short `runc run`), muxd forgets the container.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/muxflow/muxflow/muxd/registry"
)

// maxPidWatches bounds the watches pending at once (each holds an inotify instance, of
// which a user has 128 by default): beyond it, runtimes report the pid themselves.
const maxPidWatches = 64

// pidLimit is the largest pid Linux hands out (PID_MAX_LIMIT on 64-bit).
const pidLimit = 4194304

// pidWatches are the pending pid-file watches.
type pidWatches struct {
	mu     sync.Mutex
	closed bool
	active map[*pidWatch]struct{}
}

type pidWatch struct {
	id, path, name string
	existed        bool
	dev, ino       uint64
	mtime          unix.Timespec
	inotify        *os.File
	runtime        *os.File // pidfd of the runtime process
	done           chan struct{}
	once           sync.Once
}

// watchPidFile starts watching path, the pid file of container id's runtime (process
// runtimePid), or says why it cannot.
func (d *Daemon) watchPidFile(id, path string, runtimePid int) error {
	if runtimePid <= 0 {
		return errors.New("the runtime's pid is unknown")
	}
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || path == "/" {
		return fmt.Errorf("pid file %q is not a clean absolute path", path)
	}
	w := &pidWatch{id: id, path: path, name: filepath.Base(path), done: make(chan struct{})}
	var st unix.Stat_t
	if unix.Lstat(path, &st) == nil {
		w.existed, w.dev, w.ino, w.mtime = true, st.Dev, st.Ino, st.Mtim
	}
	ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	if _, err := unix.InotifyAddWatch(ifd, filepath.Dir(path), unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE|unix.IN_ONLYDIR); err != nil {
		unix.Close(ifd)
		return fmt.Errorf("watch %s: %w", filepath.Dir(path), err)
	}
	pfd, err := unix.PidfdOpen(runtimePid, unix.PIDFD_NONBLOCK)
	if err != nil {
		unix.Close(ifd)
		return fmt.Errorf("pidfd_open(%d): %w", runtimePid, err)
	}
	w.inotify = os.NewFile(uintptr(ifd), "inotify:"+path)
	w.runtime = os.NewFile(uintptr(pfd), fmt.Sprintf("pidfd:%d", runtimePid))
	if err := d.pidw.add(w); err != nil {
		w.close()
		return err
	}
	go d.runPidWatch(w)
	return nil
}

func (ws *pidWatches) add(w *pidWatch) error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	switch {
	case ws.closed:
		return errors.New("muxd is stopping")
	case len(ws.active) >= maxPidWatches:
		return fmt.Errorf("%d pid files are watched already", len(ws.active))
	}
	if ws.active == nil {
		ws.active = map[*pidWatch]struct{}{}
	}
	ws.active[w] = struct{}{}
	return nil
}

func (ws *pidWatches) remove(w *pidWatch) {
	ws.mu.Lock()
	delete(ws.active, w)
	ws.mu.Unlock()
	w.close()
}

// closeAll ends every watch (muxd stops; the containers are reconciled on its next start).
func (ws *pidWatches) closeAll() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.closed = true
	for w := range ws.active {
		w.close()
		delete(ws.active, w)
	}
}

func (w *pidWatch) close() {
	w.once.Do(func() {
		close(w.done)
		w.inotify.Close()
		w.runtime.Close()
	})
}

// runPidWatch waits for the pid file or the runtime's exit, then settles the container.
func (d *Daemon) runPidWatch(w *pidWatch) {
	defer d.pidw.remove(w)
	written := make(chan struct{}, 1)
	exited := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := w.inotify.Read(buf)
			if err != nil {
				return // closed
			}
			if eventNames(buf[:n], w.name) {
				select {
				case written <- struct{}{}:
				default:
				}
			}
		}
	}()
	go func() {
		defer close(exited)
		rc, err := w.runtime.SyscallConn()
		if err != nil {
			return
		}
		// The first call reports "not ready", so Read parks on the poller until the
		// pidfd is readable (the runtime exited) or the file is closed.
		waited := false
		_ = rc.Read(func(uintptr) bool {
			ready := waited
			waited = true
			return ready
		})
	}()
	for {
		select {
		case <-w.done:
			return
		case <-written:
			if pid, ok := w.fresh(); ok {
				d.settlePid(w.id, pid)
				return
			}
		case <-exited:
			select {
			case <-w.done:
				return
			default:
			}
			// The runtime exited: it wrote the pid file by now or never will.
			if pid, ok := w.fresh(); ok {
				d.settlePid(w.id, pid)
			} else {
				d.forgetUnstarted(w.id, "its runtime exited without starting it")
			}
			return
		}
	}
}

// eventNames tells whether a buffer of inotify events names name.
func eventNames(buf []byte, name string) bool {
	for len(buf) >= unix.SizeofInotifyEvent {
		n := int(binary.NativeEndian.Uint32(buf[12:16])) // struct inotify_event's len
		end := unix.SizeofInotifyEvent + n
		if end > len(buf) {
			return false
		}
		if n > 0 && string(bytes.TrimRight(buf[unix.SizeofInotifyEvent:end], "\x00")) == name {
			return true
		}
		buf = buf[end:]
	}
	return false
}

// fresh reads the pid file when the runtime has written it since the create request.
func (w *pidWatch) fresh() (int, bool) {
	var st unix.Stat_t
	if unix.Lstat(w.path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, false
	}
	if w.existed && st.Dev == w.dev && st.Ino == w.ino && st.Mtim == w.mtime {
		return 0, false
	}
	return readPidFile(w.path)
}

// readPidFile reads a pid file as runc and crun write it.
func readPidFile(path string) (int, bool) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return 0, false
	}
	var buf [32]byte
	n, err := unix.Read(fd, buf[:len(buf)-1])
	unix.Close(fd)
	if err != nil || n <= 0 {
		return 0, false
	}
	s := bytes.TrimRight(buf[:n], "\n ")
	if len(s) == 0 || len(s) > 7 {
		return 0, false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	v, _ := strconv.Atoi(string(s))
	if v <= 0 || v > pidLimit {
		return 0, false
	}
	return v, true
}

// settlePid records the container's pid, or, when its process has already exited (a
// short container run by `runc run`, which writes the pid file only once the process
// has started), has muxd forget the container.
func (d *Daemon) settlePid(id string, pid int) {
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		d.forgetUnstarted(id, "its process exited before muxd saw it start")
		return
	}
	defer unix.Close(pfd)
	if _, err := d.startContainer(id, pid); err != nil {
		fds := []unix.PollFd{{Fd: int32(pfd), Events: unix.POLLIN}}
		if n, _ := unix.Poll(fds, 0); n == 1 {
			d.forgetUnstarted(id, "its process exited before muxd saw it start")
			return
		}
		d.log.Warn("cannot record the start of a container from its pid file", "id", id, "pid", pid, "err", err)
	}
}

// forgetUnstarted unregisters a container that never ran (nothing else would tell muxd).
func (d *Daemon) forgetUnstarted(id, why string) {
	if err := d.unregisterContainer(id, why); err != nil && !errors.Is(err, registry.ErrNotFound) {
		d.log.Error("cannot unregister container", "id", id, "err", err)
	}
}
