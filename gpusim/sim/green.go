package sim

// Green contexts (CUDA 12.4, cuGreenCtxCreate): a context made from a process's
// primary context whose kernels are confined to a partition of the device's SMs.
//
// A real green context pins a fixed set of SMs (the partition the driver split
// off); gpusim's cap counts SMs held, as its MPS active-thread caps do: the green
// context's blocks may occupy at most sms SMs at once, whichever ones are free.
// So two green contexts of one process are not kept off each other's SMs, and a
// neighbour's blocks may sit on SMs the real partition would have reserved; what
// the model keeps is how many SMs the confined work gets.

// CreateGreenContext makes context id, with default stream defaultStream, a
// green context of the process's context parent, confined to sms SMs. It is on
// the parent's device and MPS server, with the parent's active-thread percentage,
// memory limit and priority, and in the parent's time-slicing group: a green
// context is part of its primary context's time slice, not a participant of its
// own. Its memory is the parent's (allocations count against the parent's limit
// and are freed with it).
//
// Its SM cap is min(parent's cap, sms), except under an active-thread percentage
// below 100 (an MPS client's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE or its server's
// default): then the partition is ignored and the cap is the parent's. NVIDIA's
// answer for MPS is that SM affinity is set either through the active-thread
// percentage or through green contexts, and that green contexts want the
// percentage unset or 100.
func (c *Client) CreateGreenContext(id, parent, defaultStream uint32, sms int) Result {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.closed {
		return ErrInvalidContext
	}
	p, r := c.context(parent)
	if r != Success {
		return r
	}
	if p.parent != nil {
		return ErrInvalidContext // a green context is made from a primary context, not another green one
	}
	if p.err != Success {
		return p.err
	}
	d := p.dev
	if d.lost {
		return ErrDeviceUnavailable
	}
	if sms < 1 || sms > d.p.SMs {
		return ErrInvalidValue
	}
	if _, dup := c.ctxs[id]; dup {
		return ErrInvalidValue
	}
	if _, dup := c.streams[defaultStream]; dup {
		return ErrInvalidValue
	}
	x := &Context{ID: id, c: c, dev: d, mps: p.mps, atp: p.atp, memLimit: p.memLimit, priority: p.priority,
		parent: p, allocs: map[uint64]uint64{}, streams: map[uint32]*Stream{}}
	x.smCap = greenSMCap(p, sms)
	d.advance(s.nowNs())
	d.join(x, p.grp)
	c.add(x, defaultStream)
	return Success
}

// greenSMCap is the SM cap of a green context of sms SMs made from parent: an
// active-thread percentage below 100 overrides the partition (see
// CreateGreenContext).
func greenSMCap(parent *Context, sms int) int {
	if parent.atp < 100 {
		return parent.smCap
	}
	return min(parent.smCap, sms)
}
