package ctlblock

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// SignalPage is the node's GPU signal page (xcuda_signal in xcuda_ctl.h): one 64-byte
// slot per GPU, indexed by NVML index. Online processes' libxcuda stores "online work
// launched at T" (CLOCK_MONOTONIC ns) in their GPUs' slots and 0 when it is done, then
// bumps the slot's idle sequence and wakes its futex; offline processes' libxcuda holds
// launches, within their hold budget, while a slot is recent, asleep on that futex.
// muxd creates the file (see SignalPagePath) and the runtime mounts it read-write into
// online containers and read-only into offline ones (a read-only mount also keeps them
// from truncating it). Every online container can write every slot, so nothing read
// from the page is trusted: libxcuda bounds what it costs an offline container by the
// hold budget in that container's own limits page.
type SignalPage struct {
	path string

	mu  sync.RWMutex
	mem []byte
	sig *rawSignal
}

// SignalDir is the directory of the signal page under muxd's run directory.
const SignalDir = "gpu"

// SignalPagePath is where muxd keeps the node's signal page: <runDir>/gpu/signal. The
// directory is root's, mode 0700, so that no host user can reach the page; the page itself
// is mode 0666 so that an online container's processes can publish whatever user they run
// as (they reach it only through their bind mount).
func SignalPagePath(runDir string) string { return filepath.Join(runDir, SignalDir, SignalFile) }

// OpenSignalPage opens the signal page at path, creating it with mode when it is
// missing (and setting mode on an existing one). An existing file is kept (running
// processes have it mapped); a header that is not a signal page's is rewritten in place.
// A symlink or a non-regular file is refused.
func OpenSignalPage(path string, mode os.FileMode) (*SignalPage, error) {
	size := int(unsafe.Sizeof(rawSignal{}))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, mode)
	if err != nil {
		return nil, fmt.Errorf("open GPU signal page: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat GPU signal page: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("GPU signal page %s is not a regular file: %w", path, ErrInvalid)
	}
	if st.Size() < int64(size) {
		if err := f.Truncate(int64(size)); err != nil {
			return nil, fmt.Errorf("size GPU signal page %s: %w", path, err)
		}
	}
	if err := f.Chmod(mode); err != nil {
		return nil, fmt.Errorf("chmod GPU signal page %s: %w", path, err)
	}
	mem, err := mapFile(f, size)
	if err != nil {
		return nil, err
	}
	s := &SignalPage{path: path, mem: mem, sig: (*rawSignal)(unsafe.Pointer(&mem[0]))}
	if s.sig.Hdr.Magic != SignalMagic {
		// A new file, or one that is not a signal page: start with every slot idle.
		for i := range s.sig.Slot {
			atomic.StoreUint64(&s.sig.Slot[i].OnlineNS, 0)
		}
		s.sig.Hdr.Version = Version
		s.sig.Hdr.Size = uint32(size)
		atomic.StoreUint64(&s.sig.Hdr.Magic, SignalMagic)
	}
	return s, nil
}

// Path is the host path of the page.
func (s *SignalPage) Path() string { return s.path }

// Online returns slot i's value: 0 (idle) or CLOCK_MONOTONIC ns of the latest online
// launch published there. Untrusted.
func (s *SignalPage) Online(i int) uint64 {
	return s.loadSlot(i, func(slot *rawSignalSlot) uint64 { return atomic.LoadUint64(&slot.OnlineNS) })
}

// loadSlot reads one field of slot i while the page is held mapped (0 outside the page).
func (s *SignalPage) loadSlot(i int, load func(*rawSignalSlot) uint64) uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.sig == nil || i < 0 || i >= SignalSlots {
		return 0
	}
	return load(&s.sig.Slot[i])
}

// SetOnline stores v in slot i (muxd stores only 0, for an online container that is
// gone; tests store the rest). Storing 0 also wakes the offline processes holding for
// the slot, as libxcuda's clear does.
func (s *SignalPage) SetOnline(i int, v uint64) error {
	return s.withSlot(i, func(slot *rawSignalSlot) {
		atomic.StoreUint64(&slot.OnlineNS, v)
		if v == 0 {
			s.wakeIdle(i)
		}
	})
}

// SetIdleAt stores in slot i when online work there last ended (CLOCK_MONOTONIC ns), as
// an online process's libxcuda does before it clears the slot; followers linger after it
// (tests: muxd never stores it).
func (s *SignalPage) SetIdleAt(i int, ns uint64) error {
	return s.withSlot(i, func(slot *rawSignalSlot) { atomic.StoreUint64(&slot.IdleNS, ns) })
}

// SetSyncAt stores in slot i when an online synchronisation began (CLOCK_MONOTONIC ns; 0:
// none under way), as an online process's libxcuda does when it enters one; followers
// keep holding past the hold window while it is under way (tests: muxd never stores it).
func (s *SignalPage) SetSyncAt(i int, ns uint64) error {
	return s.withSlot(i, func(slot *rawSignalSlot) { atomic.StoreUint64(&slot.SyncNS, ns) })
}

// SyncAt returns slot i's sync_ns (0 outside the page).
func (s *SignalPage) SyncAt(i int) uint64 {
	return s.loadSlot(i, func(slot *rawSignalSlot) uint64 { return atomic.LoadUint64(&slot.SyncNS) })
}

// withSlot runs store on slot i while the page is held mapped.
func (s *SignalPage) withSlot(i int, store func(*rawSignalSlot)) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.sig == nil {
		return ErrClosed
	}
	if i < 0 || i >= SignalSlots {
		return fmt.Errorf("signal slot %d is outside 0..%d", i, SignalSlots-1)
	}
	store(&s.sig.Slot[i])
	return nil
}

// SetFollowers stores in each slot how many offline containers follow its GPU
// (counts[i] for slot i; slots past the slice get 0). An online process wakes the
// holders of a slot it clears only while its count is not 0.
func (s *SignalPage) SetFollowers(counts []uint32) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.sig == nil {
		return ErrClosed
	}
	if len(counts) > SignalSlots {
		return fmt.Errorf("%d follower counts for %d signal slots", len(counts), SignalSlots)
	}
	for i := range s.sig.Slot {
		var n uint32
		if i < len(counts) {
			n = counts[i]
		}
		if atomic.LoadUint32(&s.sig.Slot[i].Followers) != n {
			atomic.StoreUint32(&s.sig.Slot[i].Followers, n)
		}
	}
	return nil
}

// Busy returns slot i's online busy periods: their total length and how many (layout v9;
// 0 outside the page). Untrusted: online containers can write them.
func (s *SignalPage) Busy(i int) (ns, spans uint64) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.sig == nil || i < 0 || i >= SignalSlots {
		return 0, 0
	}
	slot := &s.sig.Slot[i]
	return atomic.LoadUint64(&slot.BusyNS), atomic.LoadUint64(&slot.BusySpans)
}

// Followers returns slot i's follower count (0 outside the page). Untrusted: online
// containers can write it.
func (s *SignalPage) Followers(i int) uint32 {
	return uint32(s.loadSlot(i, func(slot *rawSignalSlot) uint64 { return uint64(atomic.LoadUint32(&slot.Followers)) }))
}

// wakeIdle tells the offline processes waiting on slot i that it was cleared: idle_seq
// moves on, then its futex is woken (shared: the waiters are other processes).
func (s *SignalPage) wakeIdle(i int) {
	seq := &s.sig.Slot[i].IdleSeq
	atomic.AddUint32(seq, 1)
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(seq)), futexWake, math.MaxInt32, 0, 0, 0)
}

const futexWake = 1 // FUTEX_WAKE in linux/futex.h

// Close unmaps the page; the file stays.
func (s *SignalPage) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mem == nil {
		return nil
	}
	err := syscall.Munmap(s.mem)
	s.mem, s.sig = nil, nil
	if err != nil {
		return fmt.Errorf("close GPU signal page %s: %w", s.path, err)
	}
	return nil
}
