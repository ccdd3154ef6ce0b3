package sim

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// recordXid appends an Xid event; lock held.
func (d *Device) recordXid(xid, pid int, detail string) {
	d.s.xidSeq++
	d.xids = append(d.xids, XidEvent{Seq: d.s.xidSeq, Device: d.index, Xid: xid, PID: pid, Time: time.Now(), Detail: detail})
	if len(d.xids) > 1024 {
		d.xids = d.xids[len(d.xids)-1024:]
	}
	d.s.log.Warn("Xid", "device", d.index, "xid", xid, "pid", pid, "detail", detail)
}

// Fault is an injected error.
type Fault struct {
	Device int    `json:"device"`
	Xid    int    `json:"xid"`            // Xid code to report (13, 31, 43, 48, 79, ...)
	PID    int    `json:"pid,omitempty"`  // process whose contexts fail (0: none, unless Xid is device-wide)
	Code   Result `json:"code,omitempty"` // CUresult the failed contexts get (default by Xid)
	Detail string `json:"detail,omitempty"`
}

// InjectFault records an Xid and fails contexts the way the hardware would:
// Xid 48 (double-bit ECC) and 79 (fallen off the bus) take down every
// context on the device (79 also marks it lost); other Xids fail the named
// process's contexts on the device, and under MPS every client of its server
// there.
func (s *Sim) InjectFault(f Fault) error {
	d := s.Device(f.Device)
	if d == nil {
		return fmt.Errorf("fault names device %d, which does not exist", f.Device)
	}
	if f.Xid <= 0 || f.Xid > 1000 {
		return fmt.Errorf("xid %d out of range [1,1000]", f.Xid)
	}
	if f.PID < 0 {
		return fmt.Errorf("pid %d is not a process id", f.PID)
	}
	code := f.Code
	if code == Success {
		switch f.Xid {
		case 48:
			code = ErrECCUncorrectable
		case 79:
			code = ErrUnknown
		case 31:
			code = ErrIllegalAddress
		default:
			code = ErrLaunchFailed
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d.advance(s.nowNs())
	d.recordXid(f.Xid, f.PID, f.Detail)
	var hit []*Context
	for _, g := range d.groups {
		for _, x := range g.ctxs {
			if f.Xid == 48 || f.Xid == 79 || (f.PID != 0 && x.c.PID == f.PID) {
				hit = append(hit, x)
			}
		}
	}
	if f.Xid == 79 {
		d.lost = true
	}
	for _, x := range hit {
		if x.mps != nil {
			s.mpsFault(x.mps, d, code, nil)
		} else {
			s.faultContext(x, code)
		}
	}
	return nil
}

// SetHung freezes (or thaws) a device: kernels stay resident but make no
// progress, as on a hung GPU; syncs block until it thaws.
func (s *Sim) SetHung(dev int, hung bool) error {
	d := s.Device(dev)
	if d == nil {
		return fmt.Errorf("device %d does not exist", dev)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d.advance(s.nowNs())
	if hung && !d.hung {
		d.recordXid(43, 0, "GPU stopped processing (injected hang)")
	}
	d.hung = hung
	d.dirty = true
	d.kick()
	return nil
}

// SetPowerLimit changes a device's power limit, like nvidia-smi -pl.
// watts 0 restores the profile default.
func (s *Sim) SetPowerLimit(dev int, watts float64) error {
	d := s.Device(dev)
	if d == nil {
		return fmt.Errorf("device %d does not exist", dev)
	}
	if watts == 0 {
		watts = d.p.PowerLimitW
	}
	if watts <= d.p.IdlePowerW || watts > 2*d.p.PowerLimitW {
		return fmt.Errorf("power limit %.0f W out of range (%.0f, %.0f] W for %s", watts, d.p.IdlePowerW, 2*d.p.PowerLimitW, d.p.Name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d.advance(s.nowNs())
	d.powerLimit = watts
	d.dirty = true
	d.kick()
	return nil
}

// Xids returns the device's Xid events with Seq > after.
//
// A negative dev means every device (one call instead of one per device, in
// sequence order): what a watcher of the whole node asks.
func (s *Sim) Xids(dev int, after uint64) ([]XidEvent, error) {
	devs := s.devs
	if dev >= 0 {
		d := s.Device(dev)
		if d == nil {
			return nil, fmt.Errorf("device %d does not exist", dev)
		}
		devs = []*Device{d}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []XidEvent
	for _, d := range devs {
		for _, e := range d.xids {
			if e.Seq > after {
				out = append(out, e)
			}
		}
	}
	if len(devs) > 1 {
		slices.SortFunc(out, func(a, b XidEvent) int { return cmp.Compare(a.Seq, b.Seq) })
	}
	return out, nil
}

// ResetDevice is a GPU reset (nvidia-smi -r): every context still on the
// device fails with CUDA_ERROR_DEVICE_UNAVAILABLE, and the device comes back
// thawed, not lost, at its default power limit.
func (s *Sim) ResetDevice(dev int) error {
	d := s.Device(dev)
	if d == nil {
		return fmt.Errorf("device %d does not exist", dev)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d.advance(s.nowNs())
	for _, g := range d.groups {
		for _, x := range g.ctxs {
			s.faultContext(x, ErrDeviceUnavailable)
		}
	}
	d.hung, d.lost = false, false
	d.powerLimit = d.p.PowerLimitW
	d.dirty = true
	d.kick()
	s.log.Info("device reset", "device", dev)
	return nil
}
