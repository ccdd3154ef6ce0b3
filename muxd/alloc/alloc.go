// Package alloc is muxd's dynamic SM allocation: each period it estimates how much of a
// GPU the online workload needs now and gives offline work the complement, less a
// headroom, within the policy's bounds. It cuts at once when online demand rises (a burst
// is seen in the online workload's own launch rate, reported by libxcuda, before NVML's
// utilisation window catches up), gives back slowly, and learns the online workload's
// daily pattern so that the share falls ahead of the daily rise.
//
// The unit is a share of GPU time (0..1), the quantity libxcuda's launch gate enforces,
// so the allocator's gain does not depend on the GPU's SM count.
package alloc

import (
	"math"
	"time"
)

// Mode selects how the offline share is set.
type Mode string

const (
	// Dynamic gives offline work the complement of the online demand.
	Dynamic Mode = "dynamic"
	// Static keeps the offline share at Config.StaticShare (the "muxflow without
	// dynamic allocation" baseline).
	Static Mode = "static"
)

// Config holds the policy's [alloc] section and the offline class bounds.
type Config struct {
	Mode Mode
	// Headroom is kept free above the online demand (0..0.5).
	Headroom float64
	// StaticShare is offline's share in Static mode.
	StaticShare float64
	// GiveBack is the most the share may grow per period after a cut.
	GiveBack float64
	// OfflineMin and OfflineMax bound the share while the GPU is healthy; OfflineMin is
	// also the floor a Throttled GPU cuts offline work to.
	OfflineMin, OfflineMax float64
	// DayLength is the period of the online workload's daily pattern (24h in
	// production; experiments compress it).
	DayLength time.Duration
	// Buckets divides the day for the learned pattern; 0 means 96 (15 minutes a day).
	Buckets int
}

// Health is what the GPU's health state allows offline work.
type Health int

const (
	// Run: the GPU is healthy; offline gets its allocated share.
	Run Health = iota
	// Floor: the GPU is throttled; offline is cut to OfflineMin.
	Floor
	// Stop: the GPU is unhealthy, faulted or recovering; offline gets nothing.
	Stop
)

// Input is one period's observation of one GPU.
type Input struct {
	Now time.Time
	// Online is false when no online container uses the GPU: offline gets OfflineMax.
	Online bool
	// OnlineUtil is the share of the last window in which online kernels ran (NVML
	// per-process utilisation of the online processes), 0..1.
	OnlineUtil float64
	// OnlineLaunchRate is the online containers' kernel launches per second, as their
	// libxcuda reports (0 if unknown).
	OnlineLaunchRate float64
	Health           Health
}

// Decision is the allocator's output for one GPU.
type Decision struct {
	// Share is the offline share of GPU time, 0..1.
	Share float64
	// Demand is the online demand the share was derived from, 0..1.
	Demand float64
	// Burst is set when the online launch rate ran ahead of its average.
	Burst bool
}

// GPU is the allocator's state for one GPU. The zero value is not usable; use New.
type GPU struct {
	cfg       Config
	share     float64
	started   bool
	rateAvg   float64   // slow EWMA of the online launch rate
	costAvg   float64   // EWMA of online GPU time per launch (util / rate)
	pattern   []float64 // learned demand per time-of-day bucket
	patternOK []bool
}

// New returns the state of one GPU.
func New(cfg Config) *GPU {
	if cfg.Buckets <= 0 {
		cfg.Buckets = 96
	}
	if cfg.DayLength <= 0 {
		cfg.DayLength = 24 * time.Hour
	}
	return &GPU{cfg: cfg, pattern: make([]float64, cfg.Buckets), patternOK: make([]bool, cfg.Buckets)}
}

const (
	rateAlpha    = 0.05 // the launch-rate average follows over ~20 periods
	costAlpha    = 0.2
	patternAlpha = 0.3 // a day's observation moves the learned pattern by 30%
	burstFactor  = 1.3 // a launch rate 30% above its average is a burst
	// anticipation scales the learned demand of the current and next bucket: the
	// pattern is a forecast, trusted a little less than a measurement.
	anticipation = 0.9
)

func (g *GPU) bucket(t time.Time) int {
	day := g.cfg.DayLength
	pos := time.Duration(t.UnixNano() % int64(day))
	return int(int64(pos) * int64(g.cfg.Buckets) / int64(day))
}

// Step takes one period's observation and returns the new offline share.
func (g *GPU) Step(in Input) Decision {
	cfg := g.cfg
	var d Decision
	switch {
	case in.Health == Stop:
		g.share = 0
		g.started = true
		return Decision{Share: 0}
	case cfg.Mode == Static:
		d.Share = clamp(cfg.StaticShare, 0, 1)
	case !in.Online:
		d.Share = cfg.OfflineMax
	default:
		d.Demand, d.Burst = g.demand(in)
		d.Share = clamp(1-d.Demand-cfg.Headroom, cfg.OfflineMin, cfg.OfflineMax)
	}
	if in.Health == Floor {
		d.Share = math.Min(d.Share, cfg.OfflineMin)
	}
	// Cut at once; give back at most GiveBack per period.
	if g.started && d.Share > g.share {
		d.Share = math.Min(d.Share, g.share+cfg.GiveBack)
	}
	g.share, g.started = d.Share, true
	return d
}

// demand estimates the online workload's need now, from three signals: what it used
// in the last window, what its launch rate says it is about to use, and what it used at
// this time of day before.
func (g *GPU) demand(in Input) (float64, bool) {
	util := clamp(in.OnlineUtil, 0, 1)
	now := util
	burst := false
	if r := in.OnlineLaunchRate; r > 0 {
		if g.rateAvg > 0 && r > burstFactor*g.rateAvg {
			// NVML's utilisation lags a burst by its window: predict from the launch
			// rate with the GPU time per launch learned in calm periods.
			burst = true
			if g.costAvg > 0 {
				now = math.Max(now, clamp(g.costAvg*r, 0, 1))
			}
		} else if util > 0.01 {
			c := util / r
			if g.costAvg == 0 {
				g.costAvg = c
			} else {
				g.costAvg += costAlpha * (c - g.costAvg)
			}
		}
		if g.rateAvg == 0 {
			g.rateAvg = r
		} else {
			g.rateAvg += rateAlpha * (r - g.rateAvg)
		}
	}
	b := g.bucket(in.Now)
	if g.patternOK[b] {
		g.pattern[b] += patternAlpha * (util - g.pattern[b])
	} else {
		g.pattern[b], g.patternOK[b] = util, true
	}
	next := (b + 1) % len(g.pattern)
	forecast := g.pattern[b]
	if g.patternOK[next] {
		forecast = math.Max(forecast, g.pattern[next])
	}
	return math.Max(now, anticipation*forecast), burst
}

func clamp(v, lo, hi float64) float64 {
	if math.IsNaN(v) {
		return lo
	}
	return math.Max(lo, math.Min(hi, v))
}
