package ctlblock

import (
	"fmt"
	"time"
)

// The raw structs below mirror libxcuda/include/xcuda_ctl.h field for
// field; the `c` tag names the C field so TestLayoutMatchesHeader can
// compare every offset and size with what gcc computes. Never reorder or
// remove a field: the layout is append-only (use the reserved tails).

// ConfineState is what became of an offline container's confinement (Limits.
// ConfinePercent), as its libxcuda reports it (xcuda_ctl.h XCUDA_CONFINE_*).
type ConfineState uint32

const (
	ConfineNone     ConfineState = 0 // not asked, or nothing launched since
	ConfineOn       ConfineState = 1 // kernels go to a green context of ConfinedSMs SMs
	ConfineNoDriver ConfineState = 2 // the driver has no green contexts
	ConfineMPSPct   ConfineState = 3 // an MPS active-thread percentage below 100 overrides them
	ConfineFailed   ConfineState = 4 // the driver refused the green context or a launch in it
)

// String is how muxctl and the logs say it.
func (c ConfineState) String() string {
	switch c {
	case ConfineNone:
		return "not confined"
	case ConfineOn:
		return "confined"
	case ConfineNoDriver:
		return "driver has no green contexts"
	case ConfineMPSPct:
		return "MPS percentage below 100 overrides green contexts"
	case ConfineFailed:
		return "green context refused by the driver"
	}
	return fmt.Sprintf("confinement state %d", uint32(c))
}

// Sizes and limits shared with the C header.
const (
	Version            = 10
	LimitsMagic        = 0x314d494c58554d58
	UsageMagic         = 0x3147535558554d58
	MaxDevices         = 16
	MaxProcs           = 64
	ShareFull          = 10000
	DefaultMaxInFlight = 4
	MaxInFlightCap     = 64
	LimitsFile         = "limits"
	UsageFile          = "usage"
	// ContainerDir is where muxd's wiring mounts the two files inside a container.
	ContainerDir = "/run/muxflow/ctl"
	// EnvDir overrides ContainerDir for libxcuda (tests, manual runs).
	EnvDir = "XCUDA_CONTROL_BLOCK"

	// SignalMagic heads the node's GPU signal page.
	SignalMagic = 0x3147495358554d58
	// SignalSlots is how many GPUs (NVML indexes 0..63) the signal page has a slot for.
	SignalSlots = 64
	// SignalFile is the signal page's name under muxd's run directory.
	SignalFile = "signal"
	// ContainerSignal is where muxd's wiring mounts the signal page inside a container.
	ContainerSignal = "/run/muxflow/signal"
	// EnvSignal overrides ContainerSignal for libxcuda (tests, manual runs).
	EnvSignal = "XCUDA_SIGNAL"
)

// SignalRole is what a container's processes do with the GPU signal page.
type SignalRole uint32

const (
	// SignalNone: nothing (no page is mapped).
	SignalNone SignalRole = 0
	// SignalPublish: online; publish "launched, not yet synchronised" on its GPUs.
	SignalPublish SignalRole = 1
	// SignalFollow: offline; hold launches, within the hold budget, while online work
	// is published on its GPUs.
	SignalFollow SignalRole = 2
)

// Hold policy defaults (a 0 in the limits page) and the bounds libxcuda enforces
// whatever the page says.
const (
	DefaultHoldWindow = 10 * time.Millisecond
	DefaultHoldPeriod = 200 * time.Millisecond
	DefaultHoldMaxBP  = 8000
	HoldWindowMax     = 100 * time.Millisecond
	HoldPeriodMin     = time.Millisecond
	HoldPeriodMax     = time.Second
	HoldMaxBPCap      = 9500
	SignalRefresh     = 100 * time.Microsecond
	// DefaultQueue is the GPU time an offline process keeps outstanding while online
	// work is active on its GPU (a 0 in the limits page); QueueMax bounds what muxd
	// may write.
	DefaultQueue = 300 * time.Microsecond
	QueueMax     = 100 * time.Millisecond
	// DefaultLinger is how long an offline process that does not leave the online
	// kernels room keeps holding after online work on its GPU ends (a 0 in the limits
	// page); NoLinger turns it off (libxcuda reads anything under 1us so); LingerMax
	// bounds what muxd may write.
	DefaultLinger = 500 * time.Microsecond
	NoLinger      = time.Nanosecond
	LingerMax     = 10 * time.Millisecond
)

// HoldAhead says whether an offline process holds a launch that would still run when
// the next online request of a regular online service is due.
type HoldAhead uint32

const (
	AheadDefault HoldAhead = 0 // libxcuda's default: on
	AheadOn      HoldAhead = 1
	AheadOff     HoldAhead = 2
)

// procDraining is set in a process slot while it drains after SIGINT/SIGTERM.
const procDraining = 0x1

type rawHeader struct {
	Magic   uint64 `c:"magic"`
	Version uint32 `c:"version"`
	Size    uint32 `c:"size"`
}

type rawLimits struct {
	Hdr                rawHeader          `c:"hdr"`
	Generation         uint64             `c:"generation"`
	Paused             uint32             `c:"paused"`
	ShareBP            uint32             `c:"share_bp"`
	MaxInFlight        uint32             `c:"max_inflight"`
	FailPolicy         uint32             `c:"fail_policy"`
	MPSActiveThreadPct uint32             `c:"mps_active_thread_pct"`
	DeviceCount        uint32             `c:"device_count"`
	BurstNS            uint64             `c:"burst_ns"`
	MemLimit           [MaxDevices]uint64 `c:"mem_limit"`
	MPSPinnedLimit     [MaxDevices]uint64 `c:"mps_pinned_limit"`
	SignalRole         uint32             `c:"signal_role"`
	HoldMaxBP          uint32             `c:"hold_max_bp"`
	SignalMask         uint64             `c:"signal_mask"`
	HoldWindowNS       uint64             `c:"hold_window_ns"`
	HoldPeriodNS       uint64             `c:"hold_period_ns"`
	QueueNS            uint64             `c:"queue_ns"`
	HoldAhead          uint32             `c:"hold_ahead"`
	OnlineFitPct       uint32             `c:"online_fit_pct"`
	HoldLingerNS       uint64             `c:"hold_linger_ns"`
	ConfinePct         uint32             `c:"confine_pct"`
	Reserved32         uint32             `c:"reserved32"`
	Reserved           [8]uint64          `c:"reserved"`
}

type rawProc struct {
	PID           int32              `c:"pid"`
	Flags         uint32             `c:"flags"`
	HeartbeatNS   uint64             `c:"heartbeat_ns"`
	Launches      uint64             `c:"launches"`
	ThrottledNS   uint64             `c:"throttled_ns"`
	ReservedBytes [MaxDevices]uint64 `c:"reserved_bytes"`
	Reserved      [4]uint64          `c:"reserved"`
}

type rawUsage struct {
	Hdr            rawHeader          `c:"hdr"`
	HeartbeatNS    uint64             `c:"heartbeat_ns"`
	Launches       uint64             `c:"launches"`
	ThrottledNS    uint64             `c:"throttled_ns"`
	GPUTimeNS      uint64             `c:"gpu_time_ns"`
	BucketTokensNS int64              `c:"bucket_tokens_ns"`
	BucketRefillNS uint64             `c:"bucket_refill_ns"`
	InFlight       uint32             `c:"inflight"`
	OOMDenials     uint32             `c:"oom_denials"`
	ReservedBytes  [MaxDevices]uint64 `c:"reserved_bytes"`
	PeakBytes      [MaxDevices]uint64 `c:"peak_bytes"`
	StickyErrors   uint32             `c:"sticky_errors"`
	LastSticky     uint32             `c:"last_sticky"`
	LastStickyNS   uint64             `c:"last_sticky_ns"`
	MemLock        uint32             `c:"mem_lock"`
	MemRecoveries  uint32             `c:"mem_recoveries"`
	OnlineHeldNS   uint64             `c:"online_held_ns"`
	AheadHeldNS    uint64             `c:"ahead_held_ns"`
	OnlineWidth    [MaxDevices]uint32 `c:"online_width"`
	MeasuredLaunch uint64             `c:"measured_launches"`
	GPUTimeSqUS2   uint64             `c:"gpu_time_sq_us2"`
	ConfinedSMs    uint32             `c:"confined_sms"`
	ConfineState   uint32             `c:"confine_state"`
	Procs          [MaxProcs]rawProc  `c:"procs"`
}

type rawSignalSlot struct {
	OnlineNS  uint64    `c:"online_ns"`
	IdleSeq   uint32    `c:"idle_seq"`
	Followers uint32    `c:"followers"`
	IdleNS    uint64    `c:"idle_ns"`
	SyncNS    uint64    `c:"sync_ns"`
	BusyNS    uint64    `c:"busy_ns"`
	BusySpans uint64    `c:"busy_spans"`
	Reserved  [2]uint64 `c:"reserved"`
}

type rawSignal struct {
	Hdr      rawHeader                  `c:"hdr"`
	Reserved [6]uint64                  `c:"reserved"`
	Slot     [SignalSlots]rawSignalSlot `c:"slot"`
}
