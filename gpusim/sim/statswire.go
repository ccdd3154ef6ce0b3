package sim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// The packed form of a stats reading: what gpusimd answers a sampler that asks for it
// ({"op":"stats","packed":true}) instead of one JSON object per device. A sampler reads
// every device ten times a second; decoding two dozen JSON fields per device by
// reflection was most of what a poll cost the sampling process. Little-endian:
//
//	version u8 (1), devices u16, then per device:
//	  index, sms, sm_clock_mhz, max_sm_clock_mhz, mem_clock_mhz, temp_c, stalls: i32 each
//	  mem_total, mem_used, clock_reasons: u64; timestamp_us: i64
//	  util, mem_util, sm_activity, sm_activity_now, power_w, power_limit_w,
//	  default_power_limit_w, energy_j, busy_ns, sm_ns, mem_ns, stalled_ns, max_stall_ns: f64
//	  flags u8 (1 hung, 2 lost); name, uuid: u16 length + bytes
//	  processes u16, then per process: pid i32, mem_used u64, launches u64,
//	    busy_ns, sm_ns, mem_ns, util, mem_util, sm_activity f64, mps u8
const statsWireVersion = 2

const (
	wireDeviceFixed  = 7*4 + 4*8 + 13*8 + 1
	wireProcessFixed = 4 + 2*8 + 6*8 + 1
)

// AppendStats appends the packed form of devs to b.
func AppendStats(b []byte, devs []DeviceStats) []byte {
	le := binary.LittleEndian
	b = append(b, statsWireVersion)
	b = le.AppendUint16(b, uint16(len(devs)))
	for i := range devs {
		d := &devs[i]
		for _, v := range [...]int{d.Index, d.SMs, d.SMClockMHz, d.MaxSMClockMHz, d.MemClockMHz, d.TempC, d.Stalls} {
			b = le.AppendUint32(b, uint32(int32(v)))
		}
		b = le.AppendUint64(b, d.MemTotal)
		b = le.AppendUint64(b, d.MemUsed)
		b = le.AppendUint64(b, d.ClockReasons)
		b = le.AppendUint64(b, uint64(d.TimestampUnixUs))
		for _, v := range [...]float64{d.Util, d.MemUtil, d.SMActivity, d.SMActivityNow, d.PowerW, d.PowerLimitW,
			d.DefaultPowerW, d.EnergyJ, d.BusyNs, d.SMNs, d.MemNs, d.StalledNs, d.MaxStallNs} {
			b = le.AppendUint64(b, math.Float64bits(v))
		}
		var flags byte
		if d.Hung {
			flags |= 1
		}
		if d.Lost {
			flags |= 2
		}
		b = append(b, flags)
		b = appendWireString(b, d.Name)
		b = appendWireString(b, d.UUID)
		b = le.AppendUint16(b, uint16(len(d.Processes)))
		for j := range d.Processes {
			p := &d.Processes[j]
			b = le.AppendUint32(b, uint32(int32(p.PID)))
			b = le.AppendUint64(b, p.MemUsed)
			b = le.AppendUint64(b, p.Launches)
			for _, v := range [...]float64{p.BusyNs, p.SMNs, p.MemNs, p.Util, p.MemUtil, p.SMActivity} {
				b = le.AppendUint64(b, math.Float64bits(v))
			}
			mps := byte(0)
			if p.MPS {
				mps = 1
			}
			b = append(b, mps)
		}
	}
	return b
}

func appendWireString(b []byte, s string) []byte {
	if len(s) > math.MaxUint16 {
		s = s[:math.MaxUint16]
	}
	return append(binary.LittleEndian.AppendUint16(b, uint16(len(s))), s...)
}

// errShortStats is a packed reading cut short.
var errShortStats = errors.New("packed stats cut short")

// DecodeStats is AppendStats's inverse. The devices' process lists share one array.
func DecodeStats(b []byte) ([]DeviceStats, error) {
	r := wireReader{b: b}
	if v := r.u8(); v != statsWireVersion {
		if r.err != nil {
			return nil, r.err
		}
		return nil, fmt.Errorf("packed stats version %d, want %d", v, statsWireVersion)
	}
	n := int(r.u16())
	if r.err == nil && n*wireDeviceFixed > len(r.b) {
		return nil, errShortStats
	}
	devs := make([]DeviceStats, n)
	var procs []ProcessStats
	for i := range devs {
		d := &devs[i]
		for _, p := range [...]*int{&d.Index, &d.SMs, &d.SMClockMHz, &d.MaxSMClockMHz, &d.MemClockMHz, &d.TempC, &d.Stalls} {
			*p = int(int32(r.u32()))
		}
		d.MemTotal, d.MemUsed, d.ClockReasons = r.u64(), r.u64(), r.u64()
		d.TimestampUnixUs = int64(r.u64())
		for _, p := range [...]*float64{&d.Util, &d.MemUtil, &d.SMActivity, &d.SMActivityNow, &d.PowerW, &d.PowerLimitW,
			&d.DefaultPowerW, &d.EnergyJ, &d.BusyNs, &d.SMNs, &d.MemNs, &d.StalledNs, &d.MaxStallNs} {
			*p = r.f64()
		}
		flags := r.u8()
		d.Hung, d.Lost = flags&1 != 0, flags&2 != 0
		d.Name, d.UUID = r.str(), r.str()
		np := int(r.u16())
		if r.err != nil {
			return nil, r.err
		}
		if np*wireProcessFixed > len(r.b) {
			return nil, errShortStats
		}
		if np == 0 {
			continue
		}
		if cap(procs)-len(procs) < np {
			// One array for the rest of the reading, sized from what is left of it.
			procs = make([]ProcessStats, 0, max(np, len(r.b)/wireProcessFixed))
		}
		start := len(procs)
		for range np {
			var p ProcessStats
			p.PID = int(int32(r.u32()))
			p.MemUsed, p.Launches = r.u64(), r.u64()
			for _, v := range [...]*float64{&p.BusyNs, &p.SMNs, &p.MemNs, &p.Util, &p.MemUtil, &p.SMActivity} {
				*v = r.f64()
			}
			p.MPS = r.u8() != 0
			procs = append(procs, p)
		}
		d.Processes = procs[start:len(procs):len(procs)]
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("packed stats: %d bytes past the last device", len(r.b))
	}
	return devs, nil
}

// wireReader reads little-endian values; past the end it reads zeros and remembers
// errShortStats.
type wireReader struct {
	b   []byte
	err error
}

func (r *wireReader) take(n int) []byte {
	if len(r.b) < n {
		r.err, r.b = errShortStats, nil
		return make([]byte, n)
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *wireReader) u8() byte     { return r.take(1)[0] }
func (r *wireReader) u16() uint16  { return binary.LittleEndian.Uint16(r.take(2)) }
func (r *wireReader) u32() uint32  { return binary.LittleEndian.Uint32(r.take(4)) }
func (r *wireReader) u64() uint64  { return binary.LittleEndian.Uint64(r.take(8)) }
func (r *wireReader) f64() float64 { return math.Float64frombits(r.u64()) }
func (r *wireReader) str() string  { return string(r.take(int(r.u16()))) }
