package ctlblock

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// SignalPage is the node's GPU signal page (xcuda_signal in xcuda_ctl.h): one 64-byte
// slot per GPU, indexed by NVML index. Online processes' libxcuda stores "online work
// launched at T" (CLOCK_MONOTONIC ns) in their GPUs' slots and 0 when it is done;
// offline processes' libxcuda holds launches, within their hold budget, while a slot is
// recent. muxd creates the file (see SignalPagePath) and the runtime mounts it read-write
// into online containers and read-only into offline ones (a read-only mount also keeps
// them from truncating it). Every online container can write every slot, so nothing read
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
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.sig == nil || i < 0 || i >= SignalSlots {
		return 0
	}
	return atomic.LoadUint64(&s.sig.Slot[i].OnlineNS)
}

// SetOnline stores v in slot i (tests; muxd only clears slots).
func (s *SignalPage) SetOnline(i int, v uint64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.sig == nil {
		return ErrClosed
	}
	if i < 0 || i >= SignalSlots {
		return fmt.Errorf("signal slot %d is outside 0..%d", i, SignalSlots-1)
	}
	atomic.StoreUint64(&s.sig.Slot[i].OnlineNS, v)
	return nil
}

// ClearStale sets to 0 every slot whose value is not within maxAge of now (CLOCK_MONOTONIC
// ns), e.g. left by an online process that was killed before it could clear it; a slot
// an online process updates meanwhile is left alone. It returns the slots cleared.
func (s *SignalPage) ClearStale(now, maxAge uint64) []int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.sig == nil {
		return nil
	}
	var out []int
	for i := range s.sig.Slot {
		p := &s.sig.Slot[i].OnlineNS
		v := atomic.LoadUint64(p)
		if v == 0 || (v <= now && now-v < maxAge) || (v > now && v-now < maxAge) {
			continue
		}
		if atomic.CompareAndSwapUint64(p, v, 0) {
			out = append(out, i)
		}
	}
	return out
}

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
