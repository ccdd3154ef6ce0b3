// Package sim is gpusim's model of NVIDIA GPUs: SMs shared by kernels of MPS
// clients (processor sharing), time-sliced contexts without MPS, memory
// bandwidth contention, finite per-client memory, power-capped SM clocks,
// NVML/DCGM-style counters and MPS fault semantics. It runs in real time: a
// kernel's completion is reported when its simulated work is done, so the
// processes that wait on it really wait. The model never knows which client is
// online or offline; it sees only contexts, streams and kernels.
package sim

import (
	"fmt"
	"sort"
	"strings"
)

// Profile describes one GPU model. The figures come from NVIDIA's public
// datasheets and architecture whitepapers (see gpusim/README.md for the list);
// FullLoadPowerW is a model parameter, not a datasheet figure.
type Profile struct {
	Name            string  // marketing name as NVML reports it
	Arch            string  // architecture name, for humans
	SMs             int     // streaming multiprocessors
	MemoryBytes     uint64  // device memory (NVML total)
	MaxSMClockMHz   int     // max (boost) SM clock
	BaseSMClockMHz  int     // base SM clock; the power governor never goes below MinSMClockMHz
	MinSMClockMHz   int     // lowest clock the power governor may pick
	MemClockMHz     int     // memory clock
	MemBandwidthGBs float64 // peak device memory bandwidth, GB/s
	PCIeGBs         float64 // host<->device copy bandwidth, GB/s (one direction)
	PowerLimitW     float64 // default (TDP) power limit
	IdlePowerW      float64 // draw with no kernel running
	FullLoadPowerW  float64 // draw with every SM busy at max clock, if unthrottled
	MaxThreadsPerSM int     // resident threads per SM
	MaxBlocksPerSM  int     // resident blocks per SM
	RegsPerSM       int     // 32-bit registers per SM
	SmemPerSMBytes  int     // shared memory per SM available to blocks
	// CtxSwitchNs is what the GPU loses when it switches between contexts
	// that are not in one MPS server (a time-slice end or a priority
	// preemption): the outgoing context's resident blocks are saved and the
	// incoming one's restored, and no kernel runs meanwhile.
	CtxSwitchNs  float64
	CCMajor      int // compute capability
	CCMinor      int
	BusWidthBits int // memory bus width
	L2Bytes      int // L2 cache size
}

const (
	gib = uint64(1) << 30
	mib = uint64(1) << 20
)

// profiles holds the built-in GPU models, keyed by lower-case short name.
var profiles = map[string]Profile{
	// H100 SXM5 80GB: H100 datasheet / Hopper whitepaper (132 SMs, 80 GB HBM3,
	// 3.35 TB/s, 700 W, boost 1980 MHz).
	"h100": {
		Name: "NVIDIA H100 80GB HBM3", Arch: "Hopper", SMs: 132, MemoryBytes: 81559 * mib,
		MaxSMClockMHz: 1980, BaseSMClockMHz: 1590, MinSMClockMHz: 345, MemClockMHz: 2619,
		MemBandwidthGBs: 3350, PCIeGBs: 55, PowerLimitW: 700, IdlePowerW: 70, FullLoadPowerW: 665,
		MaxThreadsPerSM: 2048, MaxBlocksPerSM: 32, CCMajor: 9, CCMinor: 0, BusWidthBits: 5120, L2Bytes: 50 << 20,
		RegsPerSM: 65536, SmemPerSMBytes: 228 << 10, CtxSwitchNs: ctxSwitchNs,
	},
	// H200 SXM 141GB: H200 product brief (same GH100 die, 141 GB HBM3e,
	// 4.8 TB/s, up to 700 W).
	"h200": {
		Name: "NVIDIA H200", Arch: "Hopper", SMs: 132, MemoryBytes: 143771 * mib,
		MaxSMClockMHz: 1980, BaseSMClockMHz: 1590, MinSMClockMHz: 345, MemClockMHz: 3201,
		MemBandwidthGBs: 4800, PCIeGBs: 55, PowerLimitW: 700, IdlePowerW: 75, FullLoadPowerW: 665,
		MaxThreadsPerSM: 2048, MaxBlocksPerSM: 32, CCMajor: 9, CCMinor: 0, BusWidthBits: 6144, L2Bytes: 50 << 20,
		RegsPerSM: 65536, SmemPerSMBytes: 228 << 10, CtxSwitchNs: ctxSwitchNs,
	},
	// A100 SXM4 80GB: A100 datasheet / Ampere whitepaper (108 SMs, 80 GB HBM2e,
	// 2039 GB/s, 400 W, boost 1410 MHz).
	"a100": {
		Name: "NVIDIA A100-SXM4-80GB", Arch: "Ampere", SMs: 108, MemoryBytes: 81920 * mib,
		MaxSMClockMHz: 1410, BaseSMClockMHz: 1095, MinSMClockMHz: 210, MemClockMHz: 1593,
		MemBandwidthGBs: 2039, PCIeGBs: 25, PowerLimitW: 400, IdlePowerW: 60, FullLoadPowerW: 380,
		MaxThreadsPerSM: 2048, MaxBlocksPerSM: 32, CCMajor: 8, CCMinor: 0, BusWidthBits: 5120, L2Bytes: 40 << 20,
		RegsPerSM: 65536, SmemPerSMBytes: 164 << 10, CtxSwitchNs: ctxSwitchNs,
	},
	// T4: T4 datasheet / Turing whitepaper (40 SMs, 16 GB GDDR6, 320 GB/s,
	// 70 W, boost 1590 MHz, base 585 MHz). The T4 is known to run at its power
	// cap under sustained load, so its full-load draw exceeds the limit.
	"t4": {
		Name: "Tesla T4", Arch: "Turing", SMs: 40, MemoryBytes: 15360 * mib,
		MaxSMClockMHz: 1590, BaseSMClockMHz: 585, MinSMClockMHz: 300, MemClockMHz: 5001,
		MemBandwidthGBs: 320, PCIeGBs: 12, PowerLimitW: 70, IdlePowerW: 10, FullLoadPowerW: 80,
		MaxThreadsPerSM: 1024, MaxBlocksPerSM: 16, CCMajor: 7, CCMinor: 5, BusWidthBits: 256, L2Bytes: 4 << 20,
		RegsPerSM: 65536, SmemPerSMBytes: 64 << 10, CtxSwitchNs: ctxSwitchNs,
	},
}

// LookupProfile returns the built-in profile with the given short name
// (h100, h200, a100, t4; case-insensitive).
func LookupProfile(name string) (Profile, error) {
	p, ok := profiles[strings.ToLower(strings.TrimSpace(name))]
	if !ok {
		return Profile{}, fmt.Errorf("unknown GPU profile %q (known: %s)", name, strings.Join(ProfileNames(), ", "))
	}
	return p, nil
}

// ProfileNames lists the built-in profile names, sorted.
func ProfileNames() []string {
	var n []string
	for k := range profiles {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// Validate reports the first impossible figure in p.
func (p Profile) Validate() error {
	switch {
	case p.SMs <= 0:
		return fmt.Errorf("profile %q: SM count must be positive", p.Name)
	case p.MemoryBytes == 0:
		return fmt.Errorf("profile %q: memory must be positive", p.Name)
	case p.MaxSMClockMHz <= 0 || p.MinSMClockMHz <= 0 || p.MinSMClockMHz > p.MaxSMClockMHz:
		return fmt.Errorf("profile %q: clocks must satisfy 0 < min <= max", p.Name)
	case p.MemBandwidthGBs <= 0 || p.PCIeGBs <= 0:
		return fmt.Errorf("profile %q: bandwidths must be positive", p.Name)
	case p.PowerLimitW <= p.IdlePowerW || p.IdlePowerW < 0 || p.FullLoadPowerW <= p.IdlePowerW:
		return fmt.Errorf("profile %q: power figures must satisfy 0 <= idle < limit and idle < full load", p.Name)
	case p.MaxThreadsPerSM <= 0 || p.MaxBlocksPerSM <= 0 || p.RegsPerSM <= 0 || p.SmemPerSMBytes < 0:
		return fmt.Errorf("profile %q: per-SM limits must be positive", p.Name)
	case p.CtxSwitchNs < 0:
		return fmt.Errorf("profile %q: context switch cost must not be negative", p.Name)
	}
	return nil
}

// Profile returns the device's GPU model.
func (d *Device) Profile() Profile { return d.p }

// UUID returns the device's UUID.
func (d *Device) UUID() string { return d.uuid }
