package ctlblock

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// ErrCorrupt classifies a usage file that is not what libxcuda writes: too short, a
// wrong header, or values no libxcuda can produce. The container owns that file, so a
// corrupt one is the container's own doing and its fault only.
var ErrCorrupt = errors.New("corrupt usage block")

// CorruptError lists why a usage block was found corrupt; errors.Is(err, ErrCorrupt).
type CorruptError struct {
	// Header is true when the header (size, magic, version) is wrong: nothing in the
	// block can be read then. Otherwise only values were out of range (and clamped).
	Header  bool
	Reasons []string
}

func (e *CorruptError) Error() string {
	return "corrupt usage block: " + strings.Join(e.Reasons, "; ")
}

func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Bounds on usage values. No libxcuda writes more, whatever the GPU: a value past them
// is a forged or broken block, and it is clamped to the bound so that sums cannot wrap
// (16 devices × MaxPlausibleBytes is far below 2⁶⁴).
const (
	// MaxPlausibleBytes bounds any byte counter: 1 PiB, thousands of times any GPU's memory.
	MaxPlausibleBytes = 1 << 50
	// MaxPlausibleInFlight bounds the launches in flight of a container: every process
	// slot at the in-flight cap.
	MaxPlausibleInFlight = MaxProcs * MaxInFlightCap
	// MaxPlausibleSMs bounds a device's SM count (an H200 has 132).
	MaxPlausibleSMs = 1024
	// MaxPlausibleDuration bounds the time counters (throttled, GPU time): 100 years.
	MaxPlausibleDuration = 100 * 365 * 24 * time.Hour
	// MaxPID is the kernel's PID_MAX_LIMIT.
	MaxPID = 1 << 22
	// FutureSlack is how far ahead of muxd's clock a heartbeat may be (same host clock).
	FutureSlack = time.Minute
)

// UsageSize is the size of the usage page this package reads.
const UsageSize = int(unsafe.Sizeof(rawUsage{}))

// stickyResults are the CUresults libxcuda records as sticky errors (libxcuda/src/sticky.c).
var stickyResults = map[uint32]bool{
	214: true, 700: true, 702: true, 714: true, 715: true, 716: true, 717: true,
	718: true, 719: true, 805: true, 806: true, 807: true, 810: true,
}

// IsStickyResult reports whether libxcuda would record r as a sticky error.
func IsStickyResult(r uint32) bool { return stickyResults[r] }

// pages holds usage pages to read into, so that a read allocates nothing: each read
// takes a private page, fills it with one pread, parses it and gives it back.
var pages = sync.Pool{New: func() any { return new(rawUsage) }}

// usageTotalsSize is the part of the usage page before the process slots: all that a
// container's totals are read from (a few hundred bytes of the 12 KiB page).
const usageTotalsSize = int(unsafe.Offsetof(rawUsage{}.Procs))

// readUsage preads the usage page of f (never maps it: see Block) into a private page
// and parses it: the whole page, or with procs unset only the part before the process
// slots.
func readUsage(f *os.File, procs bool) (Usage, error) {
	r := pages.Get().(*rawUsage)
	defer pages.Put(r)
	buf := bytesOf(r)
	if !procs {
		buf = buf[:usageTotalsSize]
	}
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return Usage{}, fmt.Errorf("read usage file %s: %w", f.Name(), err)
	}
	return parseRaw(r, n, procs, time.Now())
}

// ParseUsage decodes a usage page read from a container's usage file. It never trusts
// it: a page shorter than the layout, or with a wrong magic, version or size, is
// corrupt (a zero Usage is returned); every value is checked against what libxcuda can
// write, clamped into range, and reported. now bounds heartbeats. The returned Usage is
// always safe to sum and convert.
func ParseUsage(buf []byte, now time.Time) (Usage, error) {
	r := pages.Get().(*rawUsage)
	defer pages.Put(r)
	n := copy(bytesOf(r), buf)
	return parseRaw(r, n, true, now)
}

// parseRaw is ParseUsage of a page of which the first n bytes were read: the whole
// page, or with procs unset the part before the process slots (which are then neither
// read nor checked). A page that is sound costs no allocation beyond the per-device and
// per-process slices of what is in use: the reasons are only formatted for values that
// are out of range.
func parseRaw(r *rawUsage, n int, procs bool, now time.Time) (Usage, error) {
	want := UsageSize
	if !procs {
		want = usageTotalsSize
	}
	if n < want {
		return Usage{}, &CorruptError{Header: true, Reasons: []string{
			fmt.Sprintf("usage file has %d bytes, want %d (truncated?)", n, want)}}
	}
	var bad []string
	h := r.Hdr
	switch {
	case h.Magic != UsageMagic:
		bad = append(bad, fmt.Sprintf("magic %#x, want %#x", h.Magic, uint64(UsageMagic)))
	case h.Version < 1 || h.Version > Version:
		bad = append(bad, fmt.Sprintf("version %d, want 1..%d", h.Version, Version))
	case int(h.Size) != UsageSize:
		bad = append(bad, fmt.Sprintf("header size %d, want %d", h.Size, UsageSize))
	}
	if bad != nil {
		return Usage{}, &CorruptError{Header: true, Reasons: bad}
	}
	note := func(format string, a ...any) { bad = append(bad, fmt.Sprintf(format, a...)) }
	// slot is -1 for the container's totals, else the process slot a value is from.
	durVal := func(what string, slot int, v uint64) time.Duration {
		if v > uint64(MaxPlausibleDuration) {
			note("%s is %d ns", slotted(what, slot), v)
			return MaxPlausibleDuration
		}
		return time.Duration(v)
	}
	timeVal := func(what string, slot int, ns uint64) time.Time {
		if ns == 0 {
			return time.Time{}
		}
		if ns > math.MaxInt64 || time.Unix(0, int64(ns)).After(now.Add(FutureSlack)) {
			note("%s %d ns is in the future", slotted(what, slot), ns)
			return now
		}
		return time.Unix(0, int64(ns))
	}
	// perDevice clamps one byte counter per device (what names it for device d) into a
	// slice without trailing zeros, nil when all are zero, like trimZeros.
	perDevice := func(v *[MaxDevices]uint64, what func(d int) string) []uint64 {
		n := MaxDevices
		for n > 0 && v[n-1] == 0 {
			n--
		}
		if n == 0 {
			return nil
		}
		out := make([]uint64, n)
		for d := range n {
			out[d] = v[d]
			if out[d] > MaxPlausibleBytes {
				note("%s is %d bytes", what(d), out[d])
				out[d] = MaxPlausibleBytes
			}
		}
		return out
	}
	out := Usage{
		Heartbeat:        timeVal("heartbeat", -1, r.HeartbeatNS),
		Launches:         r.Launches,
		Throttled:        durVal("throttled time", -1, r.ThrottledNS),
		GPUTime:          durVal("GPU time", -1, r.GPUTimeNS),
		MeasuredLaunches: r.MeasuredLaunch,
		GPUTimeSqUS2:     r.GPUTimeSqUS2,
		OnlineHeld:       durVal("online-held time", -1, r.OnlineHeldNS),
		AheadHeld:        durVal("ahead-held time", -1, r.AheadHeldNS),
		InFlight:         r.InFlight,
		OOMDenials:       r.OOMDenials,
		StickyErrors:     r.StickyErrors,
		LastSticky:       r.LastSticky,
		LastStickyAt:     timeVal("last sticky error time", -1, r.LastStickyNS),
	}
	out.ConfinedSMs, out.Confine = r.ConfinedSMs, ConfineState(r.ConfineState)
	if out.Confine > ConfineFailed {
		note("confinement state %d", r.ConfineState)
		out.Confine, out.ConfinedSMs = ConfineFailed, 0
	}
	if out.ConfinedSMs > MaxPlausibleSMs {
		note("%d confined SMs", r.ConfinedSMs)
		out.ConfinedSMs = MaxPlausibleSMs
	}
	if out.InFlight > MaxPlausibleInFlight {
		note("%d launches in flight", out.InFlight)
		out.InFlight = MaxPlausibleInFlight
	}
	if out.StickyErrors > 0 && !IsStickyResult(out.LastSticky) {
		note("%d sticky errors but the last one, CUDA error %d, is not a sticky error", out.StickyErrors, out.LastSticky)
	}
	out.ReservedBytes = perDevice(&r.ReservedBytes, func(d int) string { return fmt.Sprintf("reserved memory of device %d", d) })
	out.PeakBytes = perDevice(&r.PeakBytes, func(d int) string { return fmt.Sprintf("peak memory of device %d", d) })
	out.OnlineWidth = onlineWidths(&r.OnlineWidth, note)
	slots := r.Procs[:]
	if !procs {
		slots = nil
	}
	for i := range slots {
		p := &slots[i]
		if p.PID == 0 {
			continue
		}
		if p.PID >= MaxPID || p.PID <= -MaxPID {
			note("process slot %d has pid %d", i, p.PID)
			continue
		}
		if p.PID < 0 {
			continue // being reclaimed by an older libxcuda
		}
		if p.Flags&^procDraining != 0 {
			note("process slot %d has flags %#x", i, p.Flags)
		}
		pu := ProcUsage{
			PID:       p.PID,
			Draining:  p.Flags&procDraining != 0,
			Heartbeat: timeVal("heartbeat", i, p.HeartbeatNS),
			Launches:  p.Launches,
			Throttled: durVal("throttled time", i, p.ThrottledNS),
		}
		pu.ReservedBytes = perDevice(&p.ReservedBytes, func(d int) string {
			return fmt.Sprintf("reserved memory of slot %d device %d", i, d)
		})
		out.Procs = append(out.Procs, pu)
	}
	if bad != nil {
		return out, &CorruptError{Reasons: bad}
	}
	return out, nil
}

// onlineWidths turns the packed per-device online widths into shares of the device's
// SMs (the epoch is libxcuda's business: a new one starts over from its first launch), a
// slice without trailing zeros; a width above 100% is noted and clamped.
func onlineWidths(v *[MaxDevices]uint32, note func(string, ...any)) []float64 {
	n := MaxDevices
	for n > 0 && v[n-1]&widthBPMask == 0 {
		n--
	}
	if n == 0 {
		return nil
	}
	out := make([]float64, n)
	for d := range n {
		bp := v[d] & widthBPMask
		if bp > ShareFull {
			note("online width of device %d is %d basis points", d, bp)
			bp = ShareFull
		}
		out[d] = float64(bp) / ShareFull
	}
	return out
}

// widthBPMask selects the basis points of a packed online width (XCUDA_WIDTH_BP_MASK).
const widthBPMask = 0xffff

// slotted names a value of process slot slot (-1: of the container) in a reason.
func slotted(what string, slot int) string {
	if slot < 0 {
		return what
	}
	return fmt.Sprintf("%s of slot %d", what, slot)
}

// TotalReserved sums the reserved bytes over devices without wrapping (each entry is
// already clamped by ParseUsage; the sum saturates anyway).
func (u Usage) TotalReserved() uint64 {
	var sum uint64
	for _, b := range u.ReservedBytes {
		if sum+b < sum {
			return math.MaxUint64
		}
		sum += b
	}
	return sum
}

// RawUsage is the usage page exactly as xcuda_ctl.h lays it out, for tests and tools
// that must write what a (possibly hostile) container would.
type RawUsage = rawUsage

// Bytes is the page as it sits in the file.
func (r *RawUsage) Bytes() []byte { return append([]byte(nil), bytesOf(r)...) }

// NewRawUsage returns an empty page with a valid header, as Create writes it.
func NewRawUsage() *RawUsage {
	var r rawUsage
	copy(bytesOf(&r), newUsageBytes())
	return &r
}

// ReadRawUsage reads the usage page in dir undecoded (short files are zero-padded).
func ReadRawUsage(dir string) (*RawUsage, error) {
	data, err := os.ReadFile(dir + "/" + UsageFile)
	if err != nil {
		return nil, err
	}
	var r rawUsage
	copy(bytesOf(&r), data)
	return &r, nil
}

// WriteRawUsage writes a page over the usage file in dir, in place (the same inode).
func WriteRawUsage(dir string, r *RawUsage) error {
	f, err := os.OpenFile(dir+"/"+UsageFile, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteAt(bytesOf(r), 0)
	return err
}
