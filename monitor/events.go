package monitor

import (
	"context"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// wantedEvents are the NVML event types that mean a GPU error. Clock and
// P-state events are left out: the sampler sees their effect anyway.
const wantedEvents = uint64(nvml.EventTypeXidCriticalError |
	nvml.EventTypeDoubleBitEccError |
	nvml.EventTypeGpuUnavailableError)

// WatchEvents waits on an NVML event set for error events and applies each
// to its GPU at once, until ctx is cancelled. Run calls it; a caller that
// drives Poll itself runs it in its own goroutine. Where events are not available (some drivers, vGPU,
// containers without the right device nodes, adapters that lack them) it
// logs why and returns: sampling still detects lost GPUs.
func (m *Monitor) WatchEvents(ctx context.Context) {
	set, ok := m.registerEvents()
	if !ok {
		return
	}
	m.listening.Store(true)
	defer func() {
		m.listening.Store(false)
		safeCall(set.Free)
	}()

	waitMs := uint32(m.cfg.EventWait / time.Millisecond)
	var lastErr nvml.Return = nvml.SUCCESS
	for ctx.Err() == nil {
		var data nvml.EventData
		ret, panicked := safeCall(func() (ret nvml.Return) { data, ret = set.Wait(waitMs); return })
		if panicked != "" {
			m.log.Warn("NVML error events unavailable; relying on sampling", "err", panicked)
			return
		}
		switch ret {
		case nvml.SUCCESS:
			lastErr = nvml.SUCCESS
			m.handleEvent(data)
		case nvml.ERROR_TIMEOUT:
		default:
			// GPU_IS_LOST here does not say which GPU: sampling will. Log
			// each new error once, and back off so a broken set does not
			// spin.
			if ret != lastErr {
				m.log.Warn("waiting for NVML error events failed", "err", ret.Error())
				lastErr = ret
			}
			select {
			case <-ctx.Done():
			case <-time.After(m.cfg.Period):
			}
		}
	}
}

// registerEvents creates an event set and registers every GPU for the
// error events it supports.
func (m *Monitor) registerEvents() (nvml.EventSet, bool) {
	var set nvml.EventSet
	ret, panicked := safeCall(func() (ret nvml.Return) { set, ret = m.lib.EventSetCreate(); return })
	if panicked != "" || ret != nvml.SUCCESS || set == nil {
		m.log.Warn("NVML error events unavailable; relying on sampling", "err", firstNonEmpty(panicked, ret.Error()))
		return nil, false
	}
	registered := 0
	for _, g := range m.gpus {
		var supported uint64
		ret, panicked := safeCall(func() (ret nvml.Return) { supported, ret = g.handle.GetSupportedEventTypes(); return })
		if panicked != "" || ret != nvml.SUCCESS {
			m.log.Warn("GPU error events unavailable", "gpu", g.index, "err", firstNonEmpty(panicked, ret.Error()))
			continue
		}
		mask := supported & wantedEvents
		if mask == 0 {
			m.log.Warn("GPU offers none of the error events", "gpu", g.index, "supported", supported)
			continue
		}
		ret, panicked = safeCall(func() nvml.Return { return g.handle.RegisterEvents(mask, set) })
		if panicked != "" || ret != nvml.SUCCESS {
			m.log.Warn("registering GPU error events failed", "gpu", g.index, "err", firstNonEmpty(panicked, ret.Error()))
			continue
		}
		registered++
	}
	if registered == 0 {
		safeCall(set.Free)
		m.log.Warn("no GPU registered for error events; relying on sampling")
		return nil, false
	}
	m.log.Info("listening for GPU error events", "gpus", registered)
	return set, true
}

// handleEvent turns one NVML event into a fault on its GPU.
func (m *Monitor) handleEvent(d nvml.EventData) {
	i := m.gpuOf(d.Device)
	if i < 0 {
		m.log.Warn("NVML error event for an unknown GPU dropped", "type", d.EventType, "data", d.EventData)
		return
	}
	now := m.clock.Now()
	var f Fault
	switch {
	case d.EventType&nvml.EventTypeXidCriticalError != 0:
		f = ClassifyXid(d.EventData, now)
	case d.EventType&nvml.EventTypeDoubleBitEccError != 0:
		f = Fault{Time: now, Kind: FaultECCDBE, Class: FaultReset, Description: "double-bit ECC error event"}
	case d.EventType&nvml.EventTypeGpuUnavailableError != 0:
		f = Fault{Time: now, Kind: FaultGPULost, Class: FaultReset, Description: "GPU unavailable error event"}
	default:
		f = Fault{Time: now, Kind: FaultOther, Class: FaultApplication, Description: "NVML error event of unexpected type"}
	}
	m.applyFault(i, f)
}

// gpuOf finds the index into m.gpus of an event's device: by handle when
// the handle compares equal, else by UUID.
func (m *Monitor) gpuOf(d nvml.Device) int {
	if d == nil {
		return -1
	}
	for i, g := range m.gpus {
		if sameDevice(g.handle, d) {
			return i
		}
	}
	var uuid string
	ret, panicked := safeCall(func() (ret nvml.Return) { uuid, ret = d.GetUUID(); return })
	if panicked != "" || ret != nvml.SUCCESS {
		return -1
	}
	for i, g := range m.gpus {
		if g.uuid == uuid {
			return i
		}
	}
	return -1
}

// sameDevice compares two handles without panicking on implementations
// whose dynamic type is not comparable.
func sameDevice(a, b nvml.Device) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
