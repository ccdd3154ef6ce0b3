package sim

import "strconv"

// opTraceHeader names the op trace's columns. Times are model microseconds:
// queued (arrived at gpusimd), head (reached the head of its stream), ran (a
// kernel's first block was placed; 0 for other kinds), end (finished). mps is
// the MPS server's PID, 0 for a context outside MPS (it time-slices).
const opTraceHeader = "dev,pid,mps,ctx,stream,kind,blocks,sm_cap,queued_us,head_us,ran_us,end_us\n"

var opKindNames = [...]string{opKernel: "kernel", opCopyH2D: "h2d", opCopyD2H: "d2h",
	opCopyD2D: "d2d", opMarker: "record", opWait: "wait"}

// traceOp writes o's line; lock held.
func (s *Sim) traceOp(d *Device, st *Stream, o *op) {
	x := o.ctx
	mps := 0
	if x.mps != nil {
		mps = x.mps.PID
	}
	b := s.traceBuf[:0]
	for _, v := range []int{d.index, o.client.PID, mps, int(x.ID), int(st.ID)} {
		b = strconv.AppendInt(b, int64(v), 10)
		b = append(b, ',')
	}
	b = append(b, opKindNames[o.kind]...)
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(o.sh.blocks), 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(x.smCap), 10)
	for _, t := range []float64{o.queuedAt, o.headAt, o.ranAt, d.t} {
		b = append(b, ',')
		b = strconv.AppendFloat(b, t/1e3, 'f', 1, 64)
	}
	b = append(b, '\n')
	s.trace.Write(b)
	s.traceBuf = b
}
