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
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
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
	// Signal is what the container does with the node's GPU signal page (online-aware
	// gating). Role and GPUs are read when a process starts; the hold policy on every hold.
	Signal Signal
	// ConfinePercent, while non-zero, confines the container's kernel launches to a green
	// context of this percentage of their device's SMs (re-read every 32nd launch; see
	// xcuda_ctl.h XCUDA_CONFINE_*). Usage says whether it took.
	ConfinePercent uint32
}

// Signal is a container's part in online-aware gating (see SignalPage).
type Signal struct {
	// Role: SignalPublish for online containers, SignalFollow for offline ones.
	Role SignalRole
	// GPUs are the signal page's slots of the container's GPUs (bit i = NVML index i).
	GPUs uint64
	// HoldWindow: an offline launch waits while online work was published within this
	// (0 = default 10ms, at most 100ms).
	HoldWindow time.Duration
	// HoldPeriod and HoldMaxBP bound the waiting: at most HoldMaxBP basis points of every
	// HoldPeriod are spent holding (0 = defaults 20ms and 8000; libxcuda caps the share at
	// 9500 and the period at 1ms..1s whatever is written).
	HoldPeriod time.Duration
	HoldMaxBP  uint32
	// Queue bounds an offline process's outstanding GPU time (launches in flight x its
	// measured GPU time per launch; one launch always goes) while online work was active
	// on its GPUs within the last 100ms (0 = default 300us, at most QueueMax).
	Queue time.Duration
	// Ahead: hold an offline launch that would still run when the next request of a
	// regular online service is due (AheadDefault = on).
	Ahead HoldAhead
	// FitPercent: an offline process whose MPS active-thread percentage is at most this
	// leaves the online kernels of its GPUs room to run at once, so its launches are not
	// bounded for them (it still holds new ones while online work is in flight; 0: none
	// fits). Re-read every 32nd launch.
	FitPercent uint32
	// Linger: an offline process that does not leave the online kernels room keeps
	// holding for this long after online work on its GPUs ends, so that an online
	// service with requests queued starts the next one first (0 = default 500us,
	// NoLinger: off, at most LingerMax).
	Linger time.Duration
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
	case l.Signal.Role > SignalFollow:
		return fmt.Errorf("unknown signal role %d", l.Signal.Role)
	case l.Signal.HoldWindow < 0 || l.Signal.HoldWindow > HoldWindowMax:
		return fmt.Errorf("hold window %v is outside 0..%v", l.Signal.HoldWindow, HoldWindowMax)
	case l.Signal.HoldPeriod != 0 && (l.Signal.HoldPeriod < HoldPeriodMin || l.Signal.HoldPeriod > HoldPeriodMax):
		return fmt.Errorf("hold period %v is outside %v..%v", l.Signal.HoldPeriod, HoldPeriodMin, HoldPeriodMax)
	case l.Signal.HoldMaxBP > HoldMaxBPCap:
		return fmt.Errorf("hold share %d basis points is above %d", l.Signal.HoldMaxBP, HoldMaxBPCap)
	case l.Signal.Queue < 0 || l.Signal.Queue > QueueMax:
		return fmt.Errorf("hold queue %v is outside 0..%v", l.Signal.Queue, QueueMax)
	case l.Signal.Linger < 0 || l.Signal.Linger > LingerMax:
		return fmt.Errorf("hold linger %v is outside 0..%v", l.Signal.Linger, LingerMax)
	case l.Signal.Ahead > AheadOff:
		return fmt.Errorf("unknown hold-ahead setting %d", l.Signal.Ahead)
	case l.Signal.FitPercent > 100:
		return fmt.Errorf("online fit percentage %d is above 100", l.Signal.FitPercent)
	case l.ConfinePercent > 100:
		return fmt.Errorf("confinement to %d%% of the SMs is above 100%%", l.ConfinePercent)
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
	// GPUTime is the GPU time the gate measured, over MeasuredLaunches launches (it
	// measures only while it throttles or bounds the container's outstanding work), and
	// GPUTimeSqUS2 the sum of each launch's GPU time squared (µs²; it wraps), a CUDA
	// graph's as its kernels' equal parts (k parts of t/k: t²/k).
	GPUTime          time.Duration
	MeasuredLaunches uint64
	GPUTimeSqUS2     uint64
	InFlight         uint32
	// OOMDenials counts allocations refused at the memory cap.
	OOMDenials uint32
	// ConfinedSMs and Confine are what became of Limits.ConfinePercent, as the process
	// that last launched wrote it: the SMs its kernels may use (0: not confined) and why.
	ConfinedSMs uint32
	Confine     ConfineState
	// OnlineHeld is the time launches waited because online work was published on the
	// container's GPUs (part of Throttled).
	OnlineHeld time.Duration
	// AheadHeld is the part of OnlineHeld spent holding ahead of a predicted online
	// request (Signal.Ahead).
	AheadHeld time.Duration
	// OnlineWidth is, per device ordinal, the share of the device's SMs (0..1) the
	// widest sampled launch of the container's online processes needed in libxcuda's
	// current 8-second epoch (see xcuda_ctl.h online_width); nil when none was seen.
	OnlineWidth []float64
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
//
// The two files are handled differently because they have different owners. The limits
// file is muxd's: created by it, owned by root, mounted read-only into the container, so
// no container can change its size; muxd maps it and stores limits with atomic writes.
// The usage file is the container's: libxcuda maps it read-write, and a container can
// truncate it, fill it with garbage or zero its magic. muxd therefore never maps it (a
// mapping of a file whose size someone else controls dies of SIGBUS when the file
// shrinks) and never trusts it: every read is one pread(2) of the whole page into a
// private buffer, which is then validated and clamped (see ParseUsage). A short read is
// just a corrupt block. A sealed memfd (F_SEAL_SHRINK) would also remove the SIGBUS, but
// it cannot be bind-mounted into a container by path, it would tie the block's life to
// muxd's process (a muxd restart could not reattach to the block a running job has), and
// it would still leave every value to be validated; pread costs one 12 KiB copy per
// container per guard period.
type Block struct {
	dir   string
	ident Identity

	mu     sync.RWMutex // write-held by Close; guards the fields below
	limMem []byte
	lim    *rawLimits
	usage  *os.File
}

// Identity names the inodes of a block's two files. A running process keeps the inodes
// it mapped whatever happens to the names, so a block is these inodes: muxd reattaches
// to them after a restart and never creates a second block beside them.
type Identity struct {
	LimitsDev, LimitsIno uint64
	UsageDev, UsageIno   uint64
}

// Dir is the host directory holding the block's two files.
func (b *Block) Dir() string { return b.dir }

// Identity returns the inodes of the block's files as they were opened.
func (b *Block) Identity() Identity { return b.ident }

// Create makes a new block in dir (created if needed, mode 0755) with the given limits;
// it fails if a block already exists there (use Open or Attach). Both files belong to
// the calling user (muxd); the limits file is mode 0644, the usage file 0600 until
// SetUsageOwner gives it to the container's user.
func Create(dir string, l Limits) (*Block, error) {
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("create control block in %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create control block directory: %w", err)
	}
	lf, err := createFile(filepath.Join(dir, LimitsFile), newLimitsBytes(l), 0o644)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	uf, err := createFile(filepath.Join(dir, UsageFile), newUsageBytes(), 0o600)
	if err != nil {
		os.Remove(filepath.Join(dir, LimitsFile))
		return nil, err
	}
	b, err := mapLimits(dir, lf)
	if err != nil {
		uf.Close()
		return nil, err
	}
	b.keepUsage(uf)
	return b, nil
}

func newLimitsBytes(l Limits) []byte {
	var lim rawLimits
	lim.Hdr = rawHeader{Magic: LimitsMagic, Version: Version, Size: uint32(unsafe.Sizeof(lim))}
	fillLimits(&lim, l)
	return append([]byte(nil), bytesOf(&lim)...)
}

func newUsageBytes() []byte {
	var use rawUsage
	use.Hdr = rawHeader{Magic: UsageMagic, Version: Version, Size: uint32(unsafe.Sizeof(use))}
	return append([]byte(nil), bytesOf(&use)...)
}

// Attach opens the block in dir, whatever state its usage file is in, creating only what
// is missing: the block a running process has mapped is reattached, never replaced. A
// limits file that is missing its header (only root can do that) is rewritten in place
// with l, keeping its inode; a usage file that is corrupt stays as it is and every
// Snapshot reports why (it is the container's own doing). With no files at all it is
// Create.
func Attach(dir string, l Limits) (*Block, error) {
	lp, up := filepath.Join(dir, LimitsFile), filepath.Join(dir, UsageFile)
	_, lerr := os.Lstat(lp)
	_, uerr := os.Lstat(up)
	if errors.Is(lerr, os.ErrNotExist) && errors.Is(uerr, os.ErrNotExist) {
		return Create(dir, l)
	}
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("attach control block in %s: %w", dir, err)
	}
	if errors.Is(lerr, os.ErrNotExist) {
		if err := writeNew(lp, newLimitsBytes(l), 0o644); err != nil {
			return nil, err
		}
	} else if err := repairLimits(lp, l); err != nil {
		return nil, err
	}
	if errors.Is(uerr, os.ErrNotExist) {
		if err := writeNew(up, newUsageBytes(), 0o600); err != nil {
			return nil, err
		}
	}
	return Open(dir)
}

// repairLimits rewrites a limits file whose header or size is wrong, in place.
func repairLimits(path string, l Limits) error {
	f, err := openRegular(path, os.O_RDWR)
	if err != nil {
		return err
	}
	defer f.Close()
	want := newLimitsBytes(l)
	have := make([]byte, len(want))
	n, _ := f.ReadAt(have, 0)
	var h rawHeader
	copy(bytesOf(&h), have)
	if n == len(want) && h.Magic == LimitsMagic && h.Version >= 1 && h.Version <= Version {
		return nil
	}
	if _, err := f.WriteAt(want, 0); err != nil {
		return fmt.Errorf("repair control block file %s: %w", path, err)
	}
	return nil
}

// SetUsageOwner gives the usage file in dir to the container's user (host uid and gid,
// after any user-namespace mapping), mode 0600: only that user and root can write it, so
// no other container or local user can change, truncate or forge a container's usage.
func SetUsageOwner(dir string, uid, gid int) error {
	f, err := openRegular(filepath.Join(dir, UsageFile), os.O_RDONLY)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Chown(uid, gid); err != nil {
		return fmt.Errorf("give the usage file in %s to uid %d: %w", dir, uid, err)
	}
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("restrict the usage file in %s: %w", dir, err)
	}
	return nil
}

// openRegular opens path without following a symlink and checks it is a regular file.
func openRegular(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open control block file: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat control block file: %w", err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("control block file %s is not a regular file: %w", path, ErrInvalid)
	}
	return f, nil
}

func identityOf(f *os.File) (dev, ino uint64) {
	if st, err := f.Stat(); err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			return uint64(sys.Dev), sys.Ino
		}
	}
	return 0, 0
}

// Open attaches to an existing block: maps its limits file read-write (muxd after a
// restart) and opens its usage file for reading. It fails when the limits file is not a
// valid one; the usage file's content is checked by each Snapshot, not here, so that a
// container that broke its own usage file is still found (and evicted) by muxd.
func Open(dir string) (*Block, error) {
	lf, err := openRegular(filepath.Join(dir, LimitsFile), os.O_RDWR)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	b, err := mapLimits(dir, lf)
	if err != nil {
		return nil, err
	}
	uf, err := openRegular(filepath.Join(dir, UsageFile), os.O_RDONLY)
	if err != nil {
		b.Close()
		return nil, err
	}
	b.keepUsage(uf)
	return b, nil
}

// mapLimits maps the limits file lf (open read-write; the caller closes it) into a new
// block for dir.
func mapLimits(dir string, lf *os.File) (*Block, error) {
	b := &Block{dir: dir}
	b.ident.LimitsDev, b.ident.LimitsIno = identityOf(lf)
	var err error
	if b.limMem, err = mapFile(lf, int(unsafe.Sizeof(rawLimits{}))); err != nil {
		return nil, err
	}
	b.lim = (*rawLimits)(unsafe.Pointer(&b.limMem[0]))
	if h := b.lim.Hdr; h.Magic != LimitsMagic || h.Version < 1 {
		b.Close()
		return nil, fmt.Errorf("open control block %s: limits file has magic %#x version %d: %w", dir, h.Magic, h.Version, ErrInvalid)
	}
	return b, nil
}

// keepUsage keeps the usage file open for reads.
func (b *Block) keepUsage(uf *os.File) {
	b.usage = uf
	b.ident.UsageDev, b.ident.UsageIno = identityOf(uf)
}

// Close unmaps the block; the files stay (Remove deletes them).
func (b *Block) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	if b.limMem != nil {
		errs = append(errs, syscall.Munmap(b.limMem))
		b.limMem, b.lim = nil, nil
	}
	if b.usage != nil {
		errs = append(errs, b.usage.Close())
		b.usage = nil
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

// ErrClosed is returned by a closed block.
var ErrClosed = errors.New("control block is closed")

// SetLimits publishes new limits. Each field becomes visible atomically;
// the generation counter lets readers that need the whole set retry.
func (b *Block) SetLimits(l Limits) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("set limits in %s: %w", b.dir, err)
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.lim == nil {
		return fmt.Errorf("set limits in %s: %w", b.dir, ErrClosed)
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
// A closed block reports zero limits.
func (b *Block) Limits() Limits {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.lim == nil {
		return Limits{}
	}
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

// Snapshot reads the container's usage: one pread of the usage page into a private
// buffer, validated and clamped by ParseUsage. The error (ErrCorrupt, with every reason)
// says the container's usage file is not what libxcuda writes; the Usage returned with
// it holds the clamped values when the header was sound.
func (b *Block) Snapshot() (Usage, error) { return b.snapshot(true) }

// SnapshotTotals is Snapshot without the process slots (Procs is nil): one read of the
// few hundred bytes before them instead of the whole page, validated the same way, for
// muxd's per-period step, which needs only the container's totals.
func (b *Block) SnapshotTotals() (Usage, error) { return b.snapshot(false) }

func (b *Block) snapshot(procs bool) (Usage, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.usage == nil {
		return Usage{}, fmt.Errorf("read usage in %s: %w", b.dir, ErrClosed)
	}
	return readUsage(b.usage, procs)
}

// Usage returns a snapshot of the container's usage, zero when the usage file is
// corrupt (Snapshot says why).
func (b *Block) Usage() Usage {
	u, _ := b.Snapshot()
	return u
}

// ReadUsage reads and validates the usage file in dir (muxctl, tests).
func ReadUsage(dir string) (Usage, error) {
	f, err := openRegular(filepath.Join(dir, UsageFile), os.O_RDONLY)
	if err != nil {
		return Usage{}, err
	}
	defer f.Close()
	return readUsage(f, true)
}

func fillLimits(r *rawLimits, l Limits) {
	r.Paused = boolU32(l.Paused)
	r.ShareBP = l.ShareBP
	r.MaxInFlight = l.MaxInFlight
	r.FailPolicy = uint32(l.FailPolicy)
	r.MPSActiveThreadPct = l.MPSActiveThreadPercent
	r.DeviceCount = uint32(max(len(l.MemoryBytes), len(l.MPSPinnedMemBytes)))
	r.BurstNS = uint64(l.Burst)
	r.SignalRole = uint32(l.Signal.Role)
	r.SignalMask = l.Signal.GPUs
	r.HoldWindowNS = uint64(l.Signal.HoldWindow)
	r.HoldPeriodNS = uint64(l.Signal.HoldPeriod)
	r.HoldMaxBP = l.Signal.HoldMaxBP
	r.QueueNS = uint64(l.Signal.Queue)
	r.HoldAhead = uint32(l.Signal.Ahead)
	r.OnlineFitPct = l.Signal.FitPercent
	r.HoldLingerNS = uint64(l.Signal.Linger)
	r.ConfinePct = l.ConfinePercent
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
	atomic.StoreUint32(&r.SignalRole, n.SignalRole)
	atomic.StoreUint64(&r.SignalMask, n.SignalMask)
	atomic.StoreUint64(&r.HoldWindowNS, n.HoldWindowNS)
	atomic.StoreUint64(&r.HoldPeriodNS, n.HoldPeriodNS)
	atomic.StoreUint32(&r.HoldMaxBP, n.HoldMaxBP)
	atomic.StoreUint64(&r.QueueNS, n.QueueNS)
	atomic.StoreUint32(&r.HoldAhead, n.HoldAhead)
	atomic.StoreUint32(&r.OnlineFitPct, n.OnlineFitPct)
	atomic.StoreUint64(&r.HoldLingerNS, n.HoldLingerNS)
	atomic.StoreUint32(&r.ConfinePct, n.ConfinePct)
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
		Signal: Signal{
			Role:       SignalRole(atomic.LoadUint32(&r.SignalRole)),
			GPUs:       atomic.LoadUint64(&r.SignalMask),
			HoldWindow: time.Duration(atomic.LoadUint64(&r.HoldWindowNS)),
			HoldPeriod: time.Duration(atomic.LoadUint64(&r.HoldPeriodNS)),
			HoldMaxBP:  atomic.LoadUint32(&r.HoldMaxBP),
			Queue:      time.Duration(atomic.LoadUint64(&r.QueueNS)),
			Ahead:      HoldAhead(atomic.LoadUint32(&r.HoldAhead)),
			FitPercent: atomic.LoadUint32(&r.OnlineFitPct),
			Linger:     time.Duration(atomic.LoadUint64(&r.HoldLingerNS)),
		},
		ConfinePercent: atomic.LoadUint32(&r.ConfinePct),
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

// createFile makes path with data and mode, whole or not at all, and returns it open
// read-write: an unnamed file (O_TMPFILE) written, then linked under its name, which
// fails if the name exists. That is writeNew's temporary file and rename without the
// name, the rename and the second open; where the file system has no O_TMPFILE it is
// writeNew and an open.
func createFile(path string, data []byte, mode os.FileMode) (*os.File, error) {
	fd, err := unix.Open(filepath.Dir(path), unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, uint32(mode.Perm()))
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL) {
		if err := writeNew(path, data, mode); err != nil {
			return nil, err
		}
		return openRegular(path, os.O_RDWR)
	}
	if err != nil {
		return nil, fmt.Errorf("create control block file %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	fail := func(what string, err error) (*os.File, error) {
		f.Close()
		return nil, fmt.Errorf("%s control block file %s: %w", what, path, err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		return fail("write", err)
	}
	// The open's mode went through the umask.
	if err := f.Chmod(mode); err != nil {
		return fail("chmod", err)
	}
	if err := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW); err != nil {
		if errors.Is(err, unix.EEXIST) {
			err = errors.New("already exists")
		}
		return fail("install", err)
	}
	return f, nil
}

func mapFile(f *os.File, size int) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat control block file: %w", err)
	}
	if st.Size() < int64(size) {
		return nil, fmt.Errorf("control block file %s has %d bytes, want at least %d: %w", f.Name(), st.Size(), size, ErrInvalid)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map control block file %s: %w", f.Name(), err)
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
