// Package ctlblock creates, updates and reads the per-container control
// block shared between muxd and libxcuda (the xCUDA interception library).
//
// A block is a directory holding two small files whose layout is defined by
// libxcuda/include/xcuda_ctl.h: "limits" (written by muxd, mounted read-only
// into the container) and "usage" (written by libxcuda inside the
// container). muxd changes limits at any moment with atomic stores that
// libxcuda picks up on its next launch or allocation; muxctl reads usage.
package ctlblock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// FailPolicy says what libxcuda does when it cannot use its block.
type FailPolicy uint32

const (
	// FailOpen passes every call through to the driver.
	FailOpen FailPolicy = 0
	// FailClosed refuses cuInit with CUDA_ERROR_NOT_PERMITTED.
	FailClosed FailPolicy = 1
)

// Limits is what muxd allows a container. Every field is mutable at any
// moment through SetLimits.
type Limits struct {
	// MemoryBytes caps device memory per device ordinal (as the container
	// sees it); 0 or a missing entry means no cap.
	MemoryBytes []uint64
	// ShareBP is the GPU-time share in basis points (0..10000); 10000 means
	// not throttled, 0 means no GPU time at all (like Paused, but measured).
	ShareBP uint32
	// Paused stops new kernel launches until cleared.
	Paused bool
	// MaxInFlight bounds launches in flight while throttled (0 = default 4,
	// at most 64); it bounds how long a cut takes to bite.
	MaxInFlight uint32
	// Burst is the token-bucket depth in GPU time (0 = default 50ms).
	Burst time.Duration
	// MPSActiveThreadPercent is exported to the process as
	// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE before the driver starts (0 = unset).
	// Read only when a process starts.
	MPSActiveThreadPercent uint32
	// MPSPinnedMemBytes per device ordinal becomes
	// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (0 = unset). Read only at start.
	MPSPinnedMemBytes []uint64
	// FailPolicy applies when the block is unusable.
	FailPolicy FailPolicy
}

// Unlimited returns limits that let everything through.
func Unlimited() Limits { return Limits{ShareBP: ShareFull} }

// Validate reports the first field that libxcuda could not honour.
func (l Limits) Validate() error {
	switch {
	case len(l.MemoryBytes) > MaxDevices:
		return fmt.Errorf("memory limits for %d devices, at most %d supported", len(l.MemoryBytes), MaxDevices)
	case len(l.MPSPinnedMemBytes) > MaxDevices:
		return fmt.Errorf("MPS pinned memory limits for %d devices, at most %d supported", len(l.MPSPinnedMemBytes), MaxDevices)
	case l.ShareBP > ShareFull:
		return fmt.Errorf("share %d basis points is above %d", l.ShareBP, ShareFull)
	case l.MaxInFlight > MaxInFlightCap:
		return fmt.Errorf("max in-flight %d is above %d", l.MaxInFlight, MaxInFlightCap)
	case l.Burst < 0 || l.Burst > time.Second:
		return fmt.Errorf("burst %v is outside 0..1s", l.Burst)
	case l.MPSActiveThreadPercent > 100:
		return fmt.Errorf("MPS active thread percentage %d is above 100", l.MPSActiveThreadPercent)
	case l.FailPolicy != FailOpen && l.FailPolicy != FailClosed:
		return fmt.Errorf("unknown fail policy %d", l.FailPolicy)
	}
	return nil
}

// ProcUsage is one live process of the container.
type ProcUsage struct {
	PID           int32
	Draining      bool
	Heartbeat     time.Time
	Launches      uint64
	Throttled     time.Duration
	ReservedBytes []uint64
}

// Usage is a snapshot of what a container uses now.
type Usage struct {
	Heartbeat time.Time
	Launches  uint64
	Throttled time.Duration
	GPUTime   time.Duration
	InFlight  uint32
	// OOMDenials counts allocations refused at the memory cap.
	OOMDenials uint32
	// StickyErrors counts context-destroying errors the driver returned to the
	// container's processes (seen at synchronisation); LastSticky is the latest
	// CUresult and LastStickyAt when it was seen.
	StickyErrors  uint32
	LastSticky    uint32
	LastStickyAt  time.Time
	ReservedBytes []uint64
	PeakBytes     []uint64
	Procs         []ProcUsage
}

// ErrInvalid classifies a block whose files are not a libxcuda control block.
var ErrInvalid = errors.New("invalid control block")

// Block is an open control block. Its methods are safe for concurrent use.
type Block struct {
	dir    string
	limMem []byte
	useMem []byte
	lim    *rawLimits
	use    *rawUsage
}

// Dir is the host directory holding the block's two files.
func (b *Block) Dir() string { return b.dir }

// Create makes a new block in dir (created if needed, mode 0755) with the
// given limits; it fails if a block already exists there (use Open).
// The usage file is world-writable because container processes may run as
// any user; the limits file is writable by its owner (muxd) only.
func Create(dir string, l Limits) (*Block, error) {
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("create control block in %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create control block directory: %w", err)
	}
	var lim rawLimits
	lim.Hdr = rawHeader{Magic: LimitsMagic, Version: Version, Size: uint32(unsafe.Sizeof(lim))}
	fillLimits(&lim, l)
	var use rawUsage
	use.Hdr = rawHeader{Magic: UsageMagic, Version: Version, Size: uint32(unsafe.Sizeof(use))}
	if err := writeNew(filepath.Join(dir, LimitsFile), bytesOf(&lim), 0o644); err != nil {
		return nil, err
	}
	if err := writeNew(filepath.Join(dir, UsageFile), bytesOf(&use), 0o666); err != nil {
		os.Remove(filepath.Join(dir, LimitsFile))
		return nil, err
	}
	return Open(dir)
}

// Open maps an existing block read-write (muxd after a restart).
func Open(dir string) (*Block, error) {
	b := &Block{dir: dir}
	var err error
	if b.limMem, err = mapFile(filepath.Join(dir, LimitsFile), int(unsafe.Sizeof(rawLimits{}))); err != nil {
		return nil, err
	}
	if b.useMem, err = mapFile(filepath.Join(dir, UsageFile), int(unsafe.Sizeof(rawUsage{}))); err != nil {
		syscall.Munmap(b.limMem)
		return nil, err
	}
	b.lim = (*rawLimits)(unsafe.Pointer(&b.limMem[0]))
	b.use = (*rawUsage)(unsafe.Pointer(&b.useMem[0]))
	if h := b.lim.Hdr; h.Magic != LimitsMagic || h.Version < 1 {
		b.Close()
		return nil, fmt.Errorf("open control block %s: limits file has magic %#x version %d: %w", dir, h.Magic, h.Version, ErrInvalid)
	}
	if h := b.use.Hdr; h.Magic != UsageMagic || h.Version < 1 {
		b.Close()
		return nil, fmt.Errorf("open control block %s: usage file has magic %#x version %d: %w", dir, h.Magic, h.Version, ErrInvalid)
	}
	return b, nil
}

// Close unmaps the block; the files stay (Remove deletes them).
func (b *Block) Close() error {
	var errs []error
	if b.limMem != nil {
		errs = append(errs, syscall.Munmap(b.limMem))
		b.limMem, b.lim = nil, nil
	}
	if b.useMem != nil {
		errs = append(errs, syscall.Munmap(b.useMem))
		b.useMem, b.use = nil, nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close control block %s: %w", b.dir, err)
	}
	return nil
}

// Remove closes the block and deletes its files and directory.
func (b *Block) Remove() error {
	cerr := b.Close()
	if err := os.RemoveAll(b.dir); err != nil {
		return fmt.Errorf("remove control block %s: %w", b.dir, err)
	}
	return cerr
}

// SetLimits publishes new limits. Each field becomes visible atomically;
// the generation counter lets readers that need the whole set retry.
func (b *Block) SetLimits(l Limits) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("set limits in %s: %w", b.dir, err)
	}
	g := atomic.AddUint64(&b.lim.Generation, 1) // odd: writing
	if g%2 == 0 {
		// A previous writer died mid-update; move to odd again.
		atomic.AddUint64(&b.lim.Generation, 1)
	}
	storeLimits(b.lim, l)
	atomic.AddUint64(&b.lim.Generation, 1) // even: stable
	return nil
}

// Limits reads the current limits as one consistent set. Per-device slices
// come back without trailing zero (no limit) entries, nil when none is set.
func (b *Block) Limits() Limits {
	for i := 0; ; i++ {
		g1 := atomic.LoadUint64(&b.lim.Generation)
		l := loadLimits(b.lim)
		if g1%2 == 0 && atomic.LoadUint64(&b.lim.Generation) == g1 {
			return l
		}
		if i > 1000 {
			return l // a writer died while odd; fields are still individually valid
		}
		runtime.Gosched()
	}
}

// Usage returns a snapshot of the container's usage.
func (b *Block) Usage() Usage {
	u := b.use
	out := Usage{
		Heartbeat:     unixNano(atomic.LoadUint64(&u.HeartbeatNS)),
		Launches:      atomic.LoadUint64(&u.Launches),
		Throttled:     time.Duration(atomic.LoadUint64(&u.ThrottledNS)),
		GPUTime:       time.Duration(atomic.LoadUint64(&u.GPUTimeNS)),
		InFlight:      atomic.LoadUint32(&u.InFlight),
		OOMDenials:    atomic.LoadUint32(&u.OOMDenials),
		StickyErrors:  atomic.LoadUint32(&u.StickyErrors),
		LastSticky:    atomic.LoadUint32(&u.LastSticky),
		LastStickyAt:  unixNano(atomic.LoadUint64(&u.LastStickyNS)),
		ReservedBytes: make([]uint64, MaxDevices),
		PeakBytes:     make([]uint64, MaxDevices),
	}
	for d := range MaxDevices {
		out.ReservedBytes[d] = atomic.LoadUint64(&u.ReservedBytes[d])
		out.PeakBytes[d] = atomic.LoadUint64(&u.PeakBytes[d])
	}
	out.ReservedBytes = trimZeros(out.ReservedBytes)
	out.PeakBytes = trimZeros(out.PeakBytes)
	for i := range u.Procs {
		p := &u.Procs[i]
		pid := atomic.LoadInt32(&p.PID)
		if pid == 0 {
			continue
		}
		pu := ProcUsage{
			PID:           pid,
			Draining:      atomic.LoadUint32(&p.Flags)&procDraining != 0,
			Heartbeat:     unixNano(atomic.LoadUint64(&p.HeartbeatNS)),
			Launches:      atomic.LoadUint64(&p.Launches),
			Throttled:     time.Duration(atomic.LoadUint64(&p.ThrottledNS)),
			ReservedBytes: make([]uint64, MaxDevices),
		}
		for d := range MaxDevices {
			pu.ReservedBytes[d] = atomic.LoadUint64(&p.ReservedBytes[d])
		}
		pu.ReservedBytes = trimZeros(pu.ReservedBytes)
		out.Procs = append(out.Procs, pu)
	}
	return out
}

// ReadUsage opens the block in dir, snapshots its usage and closes it.
func ReadUsage(dir string) (Usage, error) {
	b, err := Open(dir)
	if err != nil {
		return Usage{}, err
	}
	defer b.Close()
	return b.Usage(), nil
}

func fillLimits(r *rawLimits, l Limits) {
	r.Paused = boolU32(l.Paused)
	r.ShareBP = l.ShareBP
	r.MaxInFlight = l.MaxInFlight
	r.FailPolicy = uint32(l.FailPolicy)
	r.MPSActiveThreadPct = l.MPSActiveThreadPercent
	r.DeviceCount = uint32(max(len(l.MemoryBytes), len(l.MPSPinnedMemBytes)))
	r.BurstNS = uint64(l.Burst)
	for d := range MaxDevices {
		r.MemLimit[d] = at(l.MemoryBytes, d)
		r.MPSPinnedLimit[d] = at(l.MPSPinnedMemBytes, d)
	}
}

func storeLimits(r *rawLimits, l Limits) {
	var n rawLimits
	fillLimits(&n, l)
	atomic.StoreUint32(&r.Paused, n.Paused)
	atomic.StoreUint32(&r.ShareBP, n.ShareBP)
	atomic.StoreUint32(&r.MaxInFlight, n.MaxInFlight)
	atomic.StoreUint32(&r.FailPolicy, n.FailPolicy)
	atomic.StoreUint32(&r.MPSActiveThreadPct, n.MPSActiveThreadPct)
	atomic.StoreUint32(&r.DeviceCount, n.DeviceCount)
	atomic.StoreUint64(&r.BurstNS, n.BurstNS)
	for d := range MaxDevices {
		atomic.StoreUint64(&r.MemLimit[d], n.MemLimit[d])
		atomic.StoreUint64(&r.MPSPinnedLimit[d], n.MPSPinnedLimit[d])
	}
}

func loadLimits(r *rawLimits) Limits {
	l := Limits{
		Paused:                 atomic.LoadUint32(&r.Paused) != 0,
		ShareBP:                atomic.LoadUint32(&r.ShareBP),
		MaxInFlight:            atomic.LoadUint32(&r.MaxInFlight),
		FailPolicy:             FailPolicy(atomic.LoadUint32(&r.FailPolicy)),
		MPSActiveThreadPercent: atomic.LoadUint32(&r.MPSActiveThreadPct),
		Burst:                  time.Duration(atomic.LoadUint64(&r.BurstNS)),
		MemoryBytes:            make([]uint64, MaxDevices),
		MPSPinnedMemBytes:      make([]uint64, MaxDevices),
	}
	for d := range MaxDevices {
		l.MemoryBytes[d] = atomic.LoadUint64(&r.MemLimit[d])
		l.MPSPinnedMemBytes[d] = atomic.LoadUint64(&r.MPSPinnedLimit[d])
	}
	l.MemoryBytes = trimZeros(l.MemoryBytes)
	l.MPSPinnedMemBytes = trimZeros(l.MPSPinnedMemBytes)
	return l
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("create control block file %s: already exists", path)
	}
	// Write a temporary file and rename it so libxcuda never maps a
	// half-written header.
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("create control block file %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write control block file %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("chmod control block file %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write control block file %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("install control block file %s: %w", path, err)
	}
	return nil
}

func mapFile(path string, size int) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open control block file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat control block file: %w", err)
	}
	if st.Size() < int64(size) {
		return nil, fmt.Errorf("control block file %s has %d bytes, want at least %d: %w", path, st.Size(), size, ErrInvalid)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map control block file %s: %w", path, err)
	}
	return mem, nil
}

func bytesOf[T any](p *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(p)), unsafe.Sizeof(*p))
}

func boolU32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

func at(s []uint64, i int) uint64 {
	if i < len(s) {
		return s[i]
	}
	return 0
}

func trimZeros(s []uint64) []uint64 {
	n := len(s)
	for n > 0 && s[n-1] == 0 {
		n--
	}
	if n == 0 {
		return nil
	}
	return s[:n]
}

func unixNano(ns uint64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(ns))
}
