package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/procfs"
)

// removeOrphanControls deletes, at start-up and before anything is served, every entry of
// the control root (<run_dir>/c) that no registered container owns: directories a muxd
// killed between unregistering a container and deleting its block left behind (or made
// for a registration it never stored). It works only by name inside muxd's own directory:
// an entry is removed with unlinkat semantics (os.RemoveAll does not follow symlinks), so
// a link a container managed to plant there is removed, never what it points to.
func (d *Daemon) removeOrphanControls() {
	// The control root is the parent of every container's control directory.
	root := filepath.Dir(d.controls.Paths("orphan-probe").Dir)
	if fi, err := os.Lstat(root); err != nil || !fi.IsDir() {
		d.log.Error("cannot look for orphan control directories", "dir", root, "err", fmt.Errorf("not a directory: %v", err))
		return
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		d.log.Error("cannot look for orphan control directories", "dir", root, "err", err)
		return
	}
	removed := 0
	for _, e := range entries {
		name := e.Name()
		if api.ValidateID(name) == nil {
			if _, err := d.reg.Get(name); err == nil {
				continue // a registered container's
			}
		}
		path := filepath.Join(root, name)
		var rerr error
		if e.IsDir() { // a real directory (ReadDir's type is the entry's own, not a link's target)
			rerr = os.RemoveAll(path)
		} else {
			rerr = os.Remove(path)
		}
		if rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			d.log.Error("cannot remove orphan control entry", "path", path, "err", rerr)
			continue
		}
		removed++
		d.log.Info("removed orphan control entry", "path", path, "type", e.Type().String())
	}
	if removed > 0 {
		d.log.Info("orphan control entries removed", "count", removed)
	}
}

// plausibleContainerPID refuses a start report whose pid cannot be a container's process as
// muxd sees it: out of range or 1 (init), gone, a kernel thread, muxd itself or one of
// muxd's ancestors (systemd, a shell, containerd...). Recording such a pid would have muxd
// watch, and later signal or account, a process that is not the container's.
func plausibleContainerPID(pid int) error {
	if err := (&api.StartRequest{PID: pid}).Validate(); err != nil {
		return err
	}
	st, err := procfs.Read(pid)
	if err != nil {
		return fmt.Errorf("%w: pid %d: %v", api.ErrInvalid, pid, err)
	}
	if st.KernelThread() {
		return fmt.Errorf("%w: pid %d is a kernel thread, not a container's process", api.ErrInvalid, pid)
	}
	if !formerAncestors()[pid] {
		// muxd's ancestors are a subset of those it had when first asked: a process
		// whose parent exits is adopted by init or a subreaper, both already among
		// them. A pid outside that set is not an ancestor now, and the walk (one
		// /proc read per ancestor, on every start report) is spared.
		return nil
	}
	for p, hops := os.Getpid(), 0; p > 1 && hops < 256; hops++ {
		if p == pid {
			if hops == 0 {
				return fmt.Errorf("%w: pid %d is muxd itself, not a container's process", api.ErrInvalid, pid)
			}
			return fmt.Errorf("%w: pid %d is an ancestor of muxd, not a container's process", api.ErrInvalid, pid)
		}
		a, err := procfs.Read(p)
		if err != nil {
			break
		}
		p = a.PPID
	}
	return nil
}

// formerAncestors is muxd and its ancestors as they were when first asked (pid 1
// included), read once.
var formerAncestors = sync.OnceValue(func() map[int]bool {
	set := map[int]bool{1: true}
	for p, hops := os.Getpid(), 0; p > 1 && hops < 256; hops++ {
		set[p] = true
		a, err := procfs.Read(p)
		if err != nil {
			break
		}
		p = a.PPID
	}
	return set
})
