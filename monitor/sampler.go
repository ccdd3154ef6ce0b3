package monitor

import (
	"cmp"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// gpu is one GPU as the sampler knows it: its handle, identity, and the
// state some metrics need between samples.
type gpu struct {
	index  int
	handle nvml.Device
	uuid   string
	name   string

	maxSMClock *uint32 // fixed for the board: read once

	gpmChecked bool
	gpmOn      bool
	gpmErr     string // why GPM could not be set up, if it failed
	gpmPrev    nvml.GpmSample
	gpmCur     nvml.GpmSample
	gpmHave    bool // gpmPrev holds a sample
	gpmQuery   *nvml.GpmMetricsGetType

	// slowAt is when the slow metrics were last read (zero: never); slow
	// holds what that read gave, carried into every sample until the next.
	slowAt time.Time
	slow   slowReading

	procLastSeen uint64 // newest process-utilisation timestamp seen (µs)
	// procUtil keeps each running process's latest utilisation: NVML
	// refreshes it every 1/6 s or so, so many polls bring nothing new.
	procUtil map[uint32]nvml.ProcessUtilizationSample
}

// slowReading is the part of a sample read every Config.SlowPeriod.
type slowReading struct {
	temp, power, limit *uint32
	smActivity         *float64
	unsupported        []string
	errors             map[string]string
}

// powerFields (board power and its current limit, in mW) are read together through one
// nvmlDeviceGetFieldValues call where the driver offers them.
var powerFields = [2]uint32{nvml.FI_DEV_POWER_INSTANT, nvml.FI_DEV_POWER_CURRENT_LIMIT}

// sampler reads metrics from NVML. It holds no lock: one goroutine (the
// monitor's poll loop) drives it.
type sampler struct {
	lib nvml.Interface
	log *slog.Logger
	// eventReasons: the driver has nvmlDeviceGetCurrentClocksEventReasons
	// (R535+); older drivers only have the ...ThrottleReasons name.
	eventReasons bool
	// throttleReasons: the driver still has the old name, deprecated in
	// NVML 13 (and so liable to disappear).
	throttleReasons bool
	// gpmSymbols: the driver has the GPM API (R520+).
	gpmSymbols bool
	// tempOld / tempV: nvmlDeviceGetTemperature (deprecated in NVML 13)
	// and its replacement nvmlDeviceGetTemperatureV (R550+).
	tempOld, tempV bool
	// fieldValues: nvmlDeviceGetFieldValues answered the power fields
	// once; cleared for good when it does not.
	fieldValues bool

	// slowPeriod: see Config.SlowPeriod (0: every sample reads everything).
	slowPeriod time.Duration
	// fastPower: power is a decision input (Config.PowerSoftPercent), so it
	// is read every period.
	fastPower bool
}

func newSampler(lib nvml.Interface, log *slog.Logger, cfg Config) *sampler {
	slow := cfg.SlowPeriod
	if slow <= cfg.Period {
		slow = 0
	}
	return &sampler{
		lib:             lib,
		log:             log,
		fieldValues:     hasSymbol(lib, "nvmlDeviceGetFieldValues"),
		slowPeriod:      slow,
		fastPower:       cfg.PowerSoftPercent > 0,
		eventReasons:    hasSymbol(lib, "nvmlDeviceGetCurrentClocksEventReasons"),
		throttleReasons: hasSymbol(lib, "nvmlDeviceGetCurrentClocksThrottleReasons"),
		gpmSymbols:      hasSymbol(lib, "nvmlGpmQueryDeviceSupport") && hasSymbol(lib, "nvmlGpmMetricsGet"),
		tempOld:         hasSymbol(lib, "nvmlDeviceGetTemperature"),
		tempV:           hasSymbol(lib, "nvmlDeviceGetTemperatureV"),
	}
}

// hasSymbol reports whether the NVML library exports name. go-nvml binds
// symbols lazily, so calling a function an old driver lacks kills the
// process; asking first is the only safe way. A pure-Go implementation
// (gpusim's adapter, mocks) that cannot answer is taken to have everything:
// calling it cannot crash the process, and a missing method answers
// NOT_SUPPORTED or panics into a recorded error.
func hasSymbol(lib nvml.Interface, name string) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = true
		}
	}()
	ext := lib.Extensions()
	if ext == nil {
		return true
	}
	return ext.LookupSymbol(name) == nil
}

// discover enumerates the GPUs. It fails only when NVML cannot count them;
// a GPU whose handle cannot be read is reported and left out, because the
// monitor cannot watch it either way.
func discover(lib nvml.Interface, log *slog.Logger) ([]*gpu, error) {
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("counting GPUs through NVML: %w", ret)
	}
	gpus := make([]*gpu, 0, n)
	for i := range n {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			log.Warn("GPU left out: no NVML handle", "index", i, "err", ret.Error())
			continue
		}
		g := &gpu{index: i, handle: h, uuid: fmt.Sprintf("gpu-index-%d", i)}
		if u, ret := h.GetUUID(); ret == nvml.SUCCESS && u != "" {
			g.uuid = u
		} else {
			log.Warn("GPU UUID unreadable; using its index as identity", "index", i, "err", ret.Error())
		}
		if name, ret := h.GetName(); ret == nvml.SUCCESS {
			g.name = name
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}

// reading collects the outcome of the NVML calls of one sample.
type reading struct {
	s *Sample
}

// call runs one NVML query and files its outcome under metric. A panic
// (an adapter that does not implement a method) becomes an error: the
// monitor must outlive a partial NVML implementation.
func (r *reading) call(metric string, f func() nvml.Return) bool {
	if r.s.Lost {
		return false
	}
	ret, panicked := safeCall(f)
	if panicked != "" {
		r.fail(metric, panicked)
		return false
	}
	switch ret {
	case nvml.SUCCESS:
		return true
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
		r.unsupported(metric)
	case nvml.ERROR_GPU_IS_LOST, nvml.ERROR_RESET_REQUIRED:
		r.s.Lost = true
		r.fail(metric, ret.Error())
	default:
		r.fail(metric, ret.Error())
	}
	return false
}

func safeCall(f func() nvml.Return) (ret nvml.Return, panicked string) {
	defer func() {
		if p := recover(); p != nil {
			panicked = fmt.Sprintf("NVML call panicked: %v", p)
		}
	}()
	return f(), ""
}

func (r *reading) unsupported(metric string) {
	if !slices.Contains(r.s.Unsupported, metric) {
		r.s.Unsupported = append(r.s.Unsupported, metric)
	}
}

func (r *reading) fail(metric, msg string) {
	if r.s.Errors == nil {
		r.s.Errors = make(map[string]string)
	}
	r.s.Errors[metric] = msg
}

// sample reads every metric of one GPU. It never fails: what could not be
// read is recorded in the sample.
func (sm *sampler) sample(g *gpu, now time.Time) *Sample {
	r := reading{s: &Sample{Time: now}}
	d := g.handle

	var util nvml.Utilization
	if r.call(MetricUtilization, func() (ret nvml.Return) { util, ret = d.GetUtilizationRates(); return }) {
		r.s.GPUUtilPercent, r.s.MemUtilPercent = ptr(util.Gpu), ptr(util.Memory)
	}
	var mem nvml.Memory
	if r.call(MetricMemory, func() (ret nvml.Return) { mem, ret = d.GetMemoryInfo(); return }) {
		r.s.MemoryUsedBytes, r.s.MemoryTotalBytes = ptr(mem.Used), ptr(mem.Total)
	}
	var clk uint32
	if r.call(MetricSMClock, func() (ret nvml.Return) { clk, ret = d.GetClockInfo(nvml.CLOCK_SM); return }) {
		r.s.SMClockMHz = ptr(clk)
	}
	if g.maxSMClock == nil {
		var maxClk uint32
		if r.call(MetricSMClockMax, func() (ret nvml.Return) { maxClk, ret = d.GetMaxClockInfo(nvml.CLOCK_SM); return }) && maxClk > 0 {
			g.maxSMClock = ptr(maxClk)
		}
	}
	r.s.SMClockMaxMHz = g.maxSMClock
	var reasons uint64
	if r.call(MetricClockEvents, func() (ret nvml.Return) {
		switch {
		case sm.eventReasons:
			reasons, ret = d.GetCurrentClocksEventReasons()
		case sm.throttleReasons:
			reasons, ret = d.GetCurrentClocksThrottleReasons()
		default:
			ret = nvml.ERROR_FUNCTION_NOT_FOUND
		}
		return
	}) {
		r.s.ClockEventReasons = ptr(reasons)
	}
	sm.sampleProcesses(g, &r)
	if sm.fastPower {
		sm.samplePower(g, &r)
	}
	if !r.s.Lost && (g.slowAt.IsZero() || sm.slowPeriod == 0 || now.Sub(g.slowAt) >= sm.slowPeriod || now.Before(g.slowAt)) {
		sm.sampleSlow(g, &r)
		g.slowAt = now
	}
	if r.s.Lost {
		// Whatever was read before the loss is stale once the GPU is back.
		g.slow, g.slowAt = slowReading{}, time.Time{}
	}
	g.slow.apply(&r)

	// A lost GPU makes every later call fail the same way; the partial
	// readings from before the loss are stale, so drop them.
	if r.s.Lost {
		return &Sample{Time: now, Lost: true, Errors: r.s.Errors}
	}
	return r.s
}

// sampleSlow reads the metrics of Config.SlowPeriod into g.slow: what
// each sample carries until the next slow read.
func (sm *sampler) sampleSlow(g *gpu, parent *reading) {
	r := reading{s: &Sample{}}
	d := g.handle
	var temp uint32
	if r.call(MetricTemperature, func() (ret nvml.Return) {
		switch {
		case sm.tempOld:
			temp, ret = d.GetTemperature(nvml.TEMPERATURE_GPU)
		case sm.tempV: // only real NVML can lack the old name
			var t nvml.Temperature
			t, ret = d.GetTemperatureV().V1()
			temp = uint32(max(t.Temperature, 0))
		default:
			ret = nvml.ERROR_FUNCTION_NOT_FOUND
		}
		return
	}) {
		r.s.TemperatureC = ptr(temp)
	}
	if !sm.fastPower {
		sm.samplePower(g, &r)
	}
	sm.sampleGPM(g, &r)
	if r.s.Lost {
		parent.s.Lost = true
		for m, e := range r.s.Errors {
			parent.fail(m, e)
		}
	}
	g.slow = slowReading{temp: r.s.TemperatureC, power: r.s.PowerMilliwatts, limit: r.s.PowerLimitMilliwatts,
		smActivity: r.s.SMActivityPercent, unsupported: r.s.Unsupported, errors: r.s.Errors}
}

// apply copies the slow metrics into the sample being read.
func (sr *slowReading) apply(r *reading) {
	if r.s.Lost {
		return
	}
	r.s.TemperatureC, r.s.SMActivityPercent = sr.temp, sr.smActivity
	if sr.power != nil {
		r.s.PowerMilliwatts = sr.power
	}
	if sr.limit != nil {
		r.s.PowerLimitMilliwatts = sr.limit
	}
	for _, m := range sr.unsupported {
		r.unsupported(m)
	}
	for m, e := range sr.errors {
		r.fail(m, e)
	}
}

// samplePower reads board power and the enforced limit: in one
// nvmlDeviceGetFieldValues call where the driver answers it, else one
// call each.
func (sm *sampler) samplePower(g *gpu, r *reading) {
	d := g.handle
	if sm.fieldValues {
		vals := []nvml.FieldValue{{FieldId: powerFields[0]}, {FieldId: powerFields[1]}}
		ret, panicked := safeCall(func() nvml.Return { return d.GetFieldValues(vals) })
		if panicked == "" && ret == nvml.SUCCESS && nvml.Return(vals[0].NvmlReturn) == nvml.SUCCESS && nvml.Return(vals[1].NvmlReturn) == nvml.SUCCESS {
			r.s.PowerMilliwatts = ptr(fieldUint32(vals[0]))
			r.s.PowerLimitMilliwatts = ptr(fieldUint32(vals[1]))
			return
		}
		if ret == nvml.ERROR_GPU_IS_LOST || ret == nvml.ERROR_RESET_REQUIRED {
			r.call(MetricPower, func() nvml.Return { return ret })
			return
		}
		unsupported := func(r nvml.Return) bool { return r == nvml.ERROR_NOT_SUPPORTED || r == nvml.ERROR_FUNCTION_NOT_FOUND }
		if panicked != "" || unsupported(ret) || unsupported(nvml.Return(vals[0].NvmlReturn)) || unsupported(nvml.Return(vals[1].NvmlReturn)) {
			// The driver does not answer these fields: ask the old way from now on.
			sm.fieldValues = false
		}
	}
	var power, limit uint32
	if r.call(MetricPower, func() (ret nvml.Return) { power, ret = d.GetPowerUsage(); return }) {
		r.s.PowerMilliwatts = ptr(power)
	}
	if r.call(MetricPowerLimit, func() (ret nvml.Return) { limit, ret = d.GetEnforcedPowerLimit(); return }) {
		r.s.PowerLimitMilliwatts = ptr(limit)
	}
}

// fieldUint32 reads a field value's number whatever its declared type.
func fieldUint32(v nvml.FieldValue) uint32 {
	b := v.Value
	u32 := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
	switch nvml.ValueType(v.ValueType) {
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG, nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		u64 := uint64(u32) | uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
		return uint32(min(u64, math.MaxUint32))
	case nvml.VALUE_TYPE_DOUBLE:
		u64 := uint64(u32) | uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
		return uint32(max(0, min(math.Float64frombits(u64), math.MaxUint32)))
	}
	return u32
}

// sampleGPM reads SM activity from GPU Performance Monitoring: the
// percentage of SMs busy between two GPM samples, which is what DCGM calls
// SM activity (NVML utilisation only says "some kernel ran").
func (sm *sampler) sampleGPM(g *gpu, r *reading) {
	if !g.gpmChecked {
		g.gpmChecked = true
		g.gpmOn = sm.initGPM(g, r)
		g.gpmErr = r.s.Errors[MetricSMActivity]
	}
	if !g.gpmOn {
		// Setting GPM up is tried once: its failure is a property of the
		// GPU or driver, so every later sample repeats the verdict.
		if g.gpmErr != "" {
			r.fail(MetricSMActivity, g.gpmErr)
		} else {
			r.unsupported(MetricSMActivity)
		}
		return
	}
	if !r.call(MetricSMActivity, func() nvml.Return { return g.handle.GpmSampleGet(g.gpmCur) }) {
		g.gpmHave = false
		return
	}
	if g.gpmHave {
		q := g.gpmQuery
		q.NumMetrics = 1
		q.Sample1, q.Sample2 = g.gpmPrev, g.gpmCur
		q.Metrics[0] = nvml.GpmMetric{MetricId: uint32(nvml.GPM_METRIC_SM_UTIL)}
		if r.call(MetricSMActivity, func() nvml.Return { return sm.lib.GpmMetricsGet(q) }) {
			if mr := nvml.Return(q.Metrics[0].NvmlReturn); mr != nvml.SUCCESS {
				r.fail(MetricSMActivity, mr.Error())
			} else {
				r.s.SMActivityPercent = ptr(q.Metrics[0].Value)
			}
		}
	}
	g.gpmPrev, g.gpmCur = g.gpmCur, g.gpmPrev
	g.gpmHave = true
}

// initGPM allocates g's GPM buffers when the GPU supports GPM.
func (sm *sampler) initGPM(g *gpu, r *reading) bool {
	if !sm.gpmSymbols {
		return false
	}
	var sup nvml.GpmSupport
	if !r.call(MetricSMActivity, func() (ret nvml.Return) { sup, ret = g.handle.GpmQueryDeviceSupport(); return }) || sup.IsSupportedDevice == 0 {
		return false
	}
	var a, b nvml.GpmSample
	if !r.call(MetricSMActivity, func() (ret nvml.Return) { a, ret = sm.lib.GpmSampleAlloc(); return }) {
		return false
	}
	if !r.call(MetricSMActivity, func() (ret nvml.Return) { b, ret = sm.lib.GpmSampleAlloc(); return }) {
		safeCall(a.Free)
		return false
	}
	g.gpmPrev, g.gpmCur, g.gpmQuery = a, b, &nvml.GpmMetricsGetType{}
	sm.log.Info("GPM SM activity enabled", "gpu", g.index)
	return true
}

// freeGPM releases the GPM buffers of g.
func (g *gpu) freeGPM() {
	for _, s := range []nvml.GpmSample{g.gpmPrev, g.gpmCur} {
		if s != nil {
			safeCall(s.Free)
		}
	}
	g.gpmPrev, g.gpmCur, g.gpmOn, g.gpmHave = nil, nil, false, false
}

// valueNotAvailable is NVML_VALUE_NOT_AVAILABLE: the driver cannot tell a
// process's memory (e.g. without privileges or under some MPS setups).
const valueNotAvailable = ^uint64(0)

// sampleProcesses lists compute processes with their memory, merged with
// their SM/memory utilisation since the previous sample.
func (sm *sampler) sampleProcesses(g *gpu, r *reading) {
	var infos []nvml.ProcessInfo
	if !r.call(MetricProcesses, func() (ret nvml.Return) { infos, ret = g.handle.GetComputeRunningProcesses(); return }) {
		return
	}
	procs := make([]ProcessSample, 0, len(infos))
	byPID := make(map[uint32]int, len(infos))
	for _, p := range infos {
		ps := ProcessSample{PID: p.Pid}
		if p.UsedGpuMemory != valueNotAvailable {
			ps.UsedMemoryBytes = ptr(p.UsedGpuMemory)
		}
		byPID[p.Pid] = len(procs)
		procs = append(procs, ps)
	}

	var utils []nvml.ProcessUtilizationSample
	ok := r.call(MetricProcessUtil, func() (ret nvml.Return) {
		utils, ret = g.handle.GetProcessUtilization(g.procLastSeen)
		switch ret {
		case nvml.ERROR_NOT_FOUND: // no new samples since procLastSeen
			utils, ret = nil, nvml.SUCCESS
		case nvml.ERROR_INSUFFICIENT_SIZE:
			// go-nvml sizes the buffer in one call and fills it in a
			// second; samples arriving in between (or none at all) end
			// here. Nothing is lost: procLastSeen stays, so the next poll
			// gets them.
			utils, ret = nil, nvml.SUCCESS
		}
		return
	})
	if ok {
		if g.procUtil == nil {
			g.procUtil = make(map[uint32]nvml.ProcessUtilizationSample)
		}
		for _, u := range utils {
			g.procLastSeen = max(g.procLastSeen, u.TimeStamp)
			if old, seen := g.procUtil[u.Pid]; !seen || u.TimeStamp >= old.TimeStamp {
				g.procUtil[u.Pid] = u
			}
		}
	}
	for pid := range g.procUtil {
		if _, running := byPID[pid]; !running {
			delete(g.procUtil, pid)
		}
	}
	for pid, u := range g.procUtil {
		i := byPID[pid]
		procs[i].SMUtilPercent, procs[i].MemUtilPercent = ptr(u.SmUtil), ptr(u.MemUtil)
	}
	slices.SortFunc(procs, func(a, b ProcessSample) int { return cmp.Compare(a.PID, b.PID) })
	r.s.Processes = procs
}
