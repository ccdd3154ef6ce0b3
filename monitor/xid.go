package monitor

import (
	"fmt"
	"time"
)

// FaultClass says how bad an error event is, which decides what the state
// machine does with it.
type FaultClass string

const (
	// FaultInformational is logged and reported but changes no state: the
	// hardware corrected or contained the problem without harming running
	// work (e.g. a page was queued for retirement).
	FaultInformational FaultClass = "informational"
	// FaultApplication is an error raised by one application's work (an
	// illegal address, a kernel exception). Under MPS it takes down every
	// client of the GPU's server, so the GPU goes Faulted and muxd's error
	// handler runs; the fault clears by itself after Config.FaultHold.
	FaultApplication FaultClass = "application"
	// FaultReset needs a GPU reset (or more) before the GPU can be trusted:
	// the GPU stays Faulted until ClearFault is called after the reset.
	FaultReset FaultClass = "reset"
)

// FaultKind names where a fault came from.
type FaultKind string

const (
	FaultXid     FaultKind = "xid"      // NVML critical Xid event
	FaultECCDBE  FaultKind = "ecc_dbe"  // double-bit ECC event
	FaultGPULost FaultKind = "gpu_lost" // NVML answered GPU_IS_LOST / RESET_REQUIRED
	FaultOther   FaultKind = "event"    // another NVML error event type
)

// Fault is one error event seen on a GPU.
type Fault struct {
	Time        time.Time  `json:"time"`
	Kind        FaultKind  `json:"kind"`
	Xid         uint64     `json:"xid,omitempty"`
	Class       FaultClass `json:"class"`
	Description string     `json:"description"`
}

type xidInfo struct {
	class FaultClass
	desc  string
}

// xidTable follows NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors,
// "Resolution Bucket (Immediate Action)"): RESTART_APP maps to
// FaultApplication, RESET_GPU/RESTART_VM/RESTART_BM to FaultReset, and
// events that need no action to FaultInformational.
var xidTable = map[uint64]xidInfo{
	8:   {FaultApplication, "GPU stopped processing (channel idle timeout)"},
	11:  {FaultApplication, "invalid or corrupted push buffer stream"},
	13:  {FaultApplication, "graphics engine exception (kernel fault in an application)"},
	31:  {FaultApplication, "GPU memory page fault (illegal address in an application)"},
	32:  {FaultApplication, "invalid or corrupted push buffer stream"},
	43:  {FaultApplication, "GPU stopped processing (application context reset)"},
	45:  {FaultApplication, "preemptive cleanup after a prior error"},
	48:  {FaultReset, "double-bit ECC error"},
	61:  {FaultReset, "internal micro-controller breakpoint/warning"},
	62:  {FaultReset, "internal micro-controller halt"},
	63:  {FaultInformational, "ECC page retirement or row remapping recorded"},
	64:  {FaultReset, "ECC page retirement or row remapping failure"},
	68:  {FaultApplication, "video decoder exception"},
	69:  {FaultApplication, "graphics engine class error"},
	74:  {FaultReset, "NVLink error"},
	79:  {FaultReset, "GPU has fallen off the bus"},
	92:  {FaultInformational, "high single-bit ECC error rate"},
	94:  {FaultApplication, "contained ECC error (the affected application is terminated)"},
	95:  {FaultReset, "uncontained ECC error"},
	109: {FaultApplication, "context switch timeout"},
	119: {FaultReset, "GSP RPC timeout"},
	120: {FaultReset, "GSP error"},
	121: {FaultInformational, "corrected C2C/NVLink error"},
	140: {FaultReset, "unrecovered ECC error"},
	154: {FaultReset, "GPU recovery action changed"},
}

// ClassifyXid maps an Xid number to a Fault. NVML only delivers Xids it
// calls critical, so an Xid missing from the catalog is treated as an
// application fault: bad enough to run error handling, not proven bad
// enough to demand a reset.
func ClassifyXid(xid uint64, at time.Time) Fault {
	info, ok := xidTable[xid]
	if !ok {
		info = xidInfo{FaultApplication, "critical Xid not in muxflow's catalog"}
	}
	return Fault{
		Time:        at,
		Kind:        FaultXid,
		Xid:         xid,
		Class:       info.class,
		Description: fmt.Sprintf("Xid %d: %s", xid, info.desc),
	}
}
