// Package alloc is muxd's dynamic SM allocation: each period it estimates how much of a
// GPU the online workload needs now and gives offline work the complement, less a
// headroom, within the policy's bounds.
//
// The estimate has three inputs: NVML's utilisation of the online processes (accurate but
// averaged over a window of about a second, so it lags), the online containers' kernel
// launch count in the period (reported by their libxcuda: immediate, but noisy, since
// requests arrive at random), and the utilisation learned at this time of day before.
// A burst detector decides which to believe:
//
//   - Calm: the launch count is what a slow average predicts, up to the noise of random
//     arrivals. The estimate is the measured utilisation (or the daily pattern ahead of
//     it). The slow average, the count's dispersion and the GPU time per launch are
//     learned in calm periods only.
//   - Burst: the period's count is too far above the prediction to be noise (a one-sided
//     z-test on the count, for sudden steps, and a CUSUM of the same z, for smaller
//     sustained rises). The estimate is the launch rate (averaged over the burst so far)
//     × the learned GPU time per launch, at once: NVML's window would show a 150 ms
//     spike at a fraction of its height. A burst that ends above the old calm rate (a
//     ramp) moves the calm rate up.
//   - Burst over: the count has been back near the prediction for a few periods. NVML's
//     window still holds the burst, so until it has passed the estimate is the calm
//     estimate from before the burst (or the launch rate × GPU time per launch if
//     higher), and the share returns to its calm value at once.
//
// The noise test: requests arrive as a Poisson process and each launches a few kernels,
// so the count n in a period is over-dispersed Poisson with variance D·mean: n/D is taken
// as Poisson with mean μ·dt/D (μ the calm launch rate), a count of requests. D (≥ 1) is
// the dispersion learned in calm periods, or the requests' clump size (launches per
// online busy span, from the signal page) where larger: at a few requests a second the
// calm periods are the empty ones, which teach no dispersion. The mean is at least one
// request in the ~20 periods μ averages (rateAlpha), since a rate learned while the
// service was idle is no evidence that its next request is a burst. z is the
// normal quantile of the exact Poisson upper tail P(X ≥ n/D), so it means the same at 1
// request a period as at 100; a period is a burst when z ≥ ZAlarm or the CUSUM
// S = max(0, S + z − CusumK) reaches CusumH. With the constants below, simulated Poisson
// streams from 0.5 to 400 requests a period (1 to 10 kernels a request, period lengths
// jittered ±20%) give at most 1 false burst per 2,000 periods (the test's bound is 1 per
// 1,000; detector_test.go); a step to 5× the rate is a burst in the period it starts
// (in 88% of trials when it starts half-way through the period, always by the next), a
// step to 2× within 4 periods in 95% of trials, and the share is back at its calm value a
// median 2 periods after a 150 ms spike ends.
//
// Cuts take effect at once. Give-back depends on why the share was cut: after a burst,
// at once when the burst is over; after a rise in measured utilisation, a quarter of the
// gap a period (at least Config.GiveBack); after the GPU's health cut offline work, or
// while the online utilisation cannot be attributed (the conservative fallback),
// Config.GiveBack a period.
//
// The unit is a share of GPU time (0..1), the quantity libxcuda's launch gate enforces,
// so the allocator's gain does not depend on the GPU's SM count.
//
// Besides the time share, a GPU has an offline MPS budget (FitBudget): the share of its
// SMs the offline contexts may hold at once, sized so that the online kernels (their
// width, Width) fit in what the offline ones leave, since MPS preempts nothing.
package alloc

import (
	"fmt"
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
	// GiveBack is the least the share may grow per period after a cut, and the most it
	// grows after a health cut or while attribution fails.
	GiveBack float64
	// OfflineMin and OfflineMax bound the share while the GPU is healthy; OfflineMin is
	// also the floor a Throttled GPU cuts offline work to.
	OfflineMin, OfflineMax float64
	// DayLength is the period of the online workload's daily pattern (24h in
	// production; experiments compress it).
	DayLength time.Duration
	// Buckets divides the day for the learned pattern; 0 means DayBuckets.
	Buckets int
	// Fit sizes the offline MPS budget to the online kernels' width when that leaves
	// offline at least FitMin (see FitBudget).
	Fit    bool
	FitMin float64
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
	// Fallback says OnlineUtil is a conservative stand-in (the online processes could
	// not be found in NVML's per-process samples): it is not learned from, and the share
	// grows back only by GiveBack a period.
	Fallback bool
	// OnlineLaunchRate is the online containers' kernel launches per second over the
	// period, as their libxcuda reports; RateKnown says it was measured (a zero rate
	// with RateKnown unset means unknown, and the burst detector sits out).
	OnlineLaunchRate float64
	RateKnown        bool
	// OnlineSpans is how many online busy periods (from the first launch after the
	// online stream was idle to its next idle) ended in the period, as the signal page
	// counts them; SpansKnown says they were counted (libxcuda counts them only while
	// an offline process follows the GPU; meanwhile the last clump size is kept).
	// Launches per span are the requests' clump size, which the burst test divides the
	// launch count by.
	OnlineSpans uint64
	SpansKnown  bool
	// Period is how long the launch rate was measured over (0: 100ms).
	Period time.Duration
	Health Health
}

// Reason says why the share is what it is.
type Reason string

const (
	// ReasonCalm: the launch count is within noise; the share follows the measured
	// online utilisation.
	ReasonCalm Reason = "calm"
	// ReasonBurst: the launch count is above what noise explains; demand is the launch
	// rate × the learned GPU time per launch.
	ReasonBurst Reason = "burst"
	// ReasonBurstOver: the burst is over; the share is back at its calm value while
	// NVML's window still holds the burst.
	ReasonBurstOver Reason = "burst over"
	// ReasonNewLevel: a burst lasted so long it is the new calm level.
	ReasonNewLevel Reason = "new level"
	// ReasonPattern: the learned daily pattern says demand is about to rise.
	ReasonPattern Reason = "pattern"
	// ReasonGiveBack: the share is growing back toward its target after a cut.
	ReasonGiveBack Reason = "give back"
	// ReasonFallback: the online utilisation is a conservative stand-in.
	ReasonFallback Reason = "fallback"
	// ReasonHealth: the GPU's health cut offline work (or the share is ramping back
	// after it did).
	ReasonHealth Reason = "health"
	// ReasonStatic: static mode.
	ReasonStatic Reason = "static"
	// ReasonIdle: no online work on the GPU.
	ReasonIdle Reason = "idle"
)

// Decision is the allocator's output for one GPU.
type Decision struct {
	// Share is the offline share of GPU time, 0..1.
	Share float64
	// Demand is the online demand the share was derived from, 0..1.
	Demand float64
	// Burst is set while the detector holds a burst.
	Burst bool
	// Reason says why the share is what it is; Detail gives the figures behind it.
	Reason Reason
	Detail string
	// Z is the period's launch-count z-score (0 when the detector is not warm).
	Z float64
}

// Burst detector constants; see the package comment.
const (
	// ZAlarm: a single period this many standard deviations above the prediction is a
	// burst. CusumK and CusumH: the CUSUM of z − CusumK reaching CusumH is one too
	// (about three periods at 2× the rate at 12 requests a period).
	ZAlarm = 4.0
	CusumK = 0.5
	CusumH = 5.0
	// ZEnd: a period below this z is calm again; EndPeriods calm periods end a burst.
	ZEnd       = 2.0
	EndPeriods = 2
	// Warmup periods of launch counts are needed before the detector judges.
	Warmup = 20
	// MaxBurst: a burst longer than this is taken as a new level.
	MaxBurst = 3 * time.Second
	// UtilWindow is the averaging window of NVML's utilisation (1 s on current GPUs
	// and in gpusim): the GPU time per launch is learned against the launch rate over
	// it, and a burst's trace in the utilisation is ignored for this long (and two
	// periods for the sampling) after it.
	UtilWindow = time.Second
)

const (
	rateAlpha    = 0.05 // the calm launch rate follows over ~20 periods
	clumpAlpha   = 0.05 // launches per busy span, over ~20 periods
	dispAlpha    = 0.02 // the dispersion over ~50
	costAlpha    = 0.1
	patternAlpha = 0.3 // a day's observation moves the learned pattern by 30%
	// giveBackFrac of the gap to the target is given back per period after a cut that
	// measured utilisation (not a burst) caused.
	giveBackFrac = 0.25
	// anticipation scales the learned demand of the current and next bucket: the
	// pattern is a forecast, trusted a little less than a measurement.
	anticipation = 0.9
	defaultDT    = 100 * time.Millisecond
	histLen      = 64
)

// maxClump bounds the clump size an online container's busy spans can claim.
const maxClump = 1024

type period struct {
	rate float64
	dt   float64 // seconds
	hot  bool
}

// detector tells bursts of the online launch rate from Poisson noise.
type detector struct {
	seen     int     // periods with a launch count, outside bursts
	mu       float64 // calm launch rate (per second)
	disp     float64 // index of dispersion of the per-period count, ≥ 1
	cusum    float64
	inBurst  bool
	start    time.Time // of the burst under way
	calmRun  int       // consecutive calm periods within a burst
	ended    time.Time // when the last burst ended
	preBurst float64   // the calm demand estimate when the burst started
	burstN   float64   // launches counted in the burst so far, over burstT seconds
	burstT   float64
	// clumpN and clumpS are decayed sums of launches and of online busy spans, for
	// the requests' clump size (launches per span).
	clumpN, clumpS float64
	hist           []period // the latest periods, newest last
}

// GPU is the allocator's state for one GPU. The zero value is not usable; use New.
type GPU struct {
	cfg        Config
	share      float64
	started    bool
	recovering bool // ramping back by GiveBack after a health cut
	det        detector
	costAvg    float64   // GPU time per online launch, seconds (0: not learned)
	calm       float64   // the latest calm demand estimate
	pattern    []float64 // learned demand per time-of-day bucket
	patternOK  []bool
	cur        int     // the bucket being observed (-1 before the first)
	curSum     float64 // its utilisation so far, over curN periods
	curN       int
}

// DayBuckets is how many parts of the day the pattern learns (15 minutes of a real day).
const DayBuckets = 96

// New returns the state of one GPU.
func New(cfg Config) *GPU {
	if cfg.Buckets <= 0 {
		cfg.Buckets = DayBuckets
	}
	if cfg.DayLength <= 0 {
		cfg.DayLength = 24 * time.Hour
	}
	return &GPU{cfg: cfg, pattern: make([]float64, cfg.Buckets), patternOK: make([]bool, cfg.Buckets), cur: -1}
}

func (g *GPU) bucket(t time.Time) int {
	day := g.cfg.DayLength
	pos := time.Duration(t.UnixNano() % int64(day))
	if pos < 0 {
		pos += day
	}
	return int(int64(pos) * int64(g.cfg.Buckets) / int64(day))
}

// Step takes one period's observation and returns the new offline share.
func (g *GPU) Step(in Input) Decision {
	cfg := g.cfg
	var d Decision
	switch {
	case in.Health == Stop:
		g.share, g.started, g.recovering = 0, true, true
		return Decision{Share: 0, Reason: ReasonHealth, Detail: "GPU unhealthy, faulted or recovering: offline stopped"}
	case cfg.Mode == Static:
		d.Share, d.Reason = clamp(cfg.StaticShare, 0, 1), ReasonStatic
		d.Detail = fmt.Sprintf("static_share %.0f%%", 100*cfg.StaticShare)
	case !in.Online:
		d.Share, d.Reason = cfg.OfflineMax, ReasonIdle
		d.Detail = fmt.Sprintf("no online work: the class ceiling %.0f%%", 100*cfg.OfflineMax)
	default:
		g.demand(in, &d)
		d.Share = clamp(1-d.Demand-cfg.Headroom, cfg.OfflineMin, cfg.OfflineMax)
	}
	if in.Health == Floor {
		if d.Share > cfg.OfflineMin {
			d.Share, d.Reason = cfg.OfflineMin, ReasonHealth
			d.Detail = fmt.Sprintf("GPU throttled: offline cut to its floor %.0f%%", 100*cfg.OfflineMin)
		}
		g.recovering = true
	}
	// Cuts take effect at once; growth depends on why the share was cut.
	if g.started && d.Share > g.share+1e-12 {
		gap := d.Share - g.share
		step := math.Max(cfg.GiveBack, giveBackFrac*gap)
		switch {
		case d.Burst:
			step = 0 // no growth inside a burst
		case g.recovering || in.Fallback || cfg.Mode == Static:
			step = cfg.GiveBack
		case d.Reason == ReasonBurstOver || d.Reason == ReasonNewLevel || d.Reason == ReasonIdle:
			step = gap
		}
		if step < gap {
			target := d.Share
			d.Share = g.share + step
			if d.Burst {
				d.Detail += fmt.Sprintf("; held at %.0f%% until the burst is over", 100*d.Share)
			} else if g.recovering {
				d.Reason = ReasonHealth
				d.Detail = fmt.Sprintf("ramping back by %.0f%% a period toward %.0f%% after a health cut", 100*cfg.GiveBack, 100*target)
			} else if d.Reason != ReasonFallback {
				d.Reason = ReasonGiveBack
				d.Detail = fmt.Sprintf("growing back by %.1f%% toward %.0f%% (%s)", 100*step, 100*target, d.Detail)
			}
		} else {
			g.recovering = false
		}
	} else if d.Share >= g.share-1e-12 && in.Health == Run {
		g.recovering = false
	}
	g.share, g.started = d.Share, true
	return d
}

// demand estimates the online workload's need now and says which evidence set it.
func (g *GPU) demand(in Input, d *Decision) {
	util := clamp(in.OnlineUtil, 0, 1)
	dt := in.Period
	if dt <= 0 {
		dt = defaultDT
	}
	sec := dt.Seconds()
	r := in.OnlineLaunchRate
	if !in.RateKnown || math.IsNaN(r) || r < 0 {
		r = -1 // unknown
	}
	det := &g.det
	rateEst := -1.0
	if g.costAvg > 0 && r >= 0 {
		rateEst = clamp(g.costAvg*r, 0, 1)
	}

	// The test.
	hot, z := false, 0.0
	if r >= 0 {
		n := r * sec
		if in.SpansKnown {
			det.clumpN = (1-clumpAlpha)*det.clumpN + n
			det.clumpS = (1-clumpAlpha)*det.clumpS + float64(in.OnlineSpans)
		}
		if det.seen >= Warmup {
			// In requests: n over the dispersion, or over the clump size where that
			// is larger. The calm rate averages ~1/rateAlpha periods; fewer than one
			// request in them is too little evidence of a quiet service to call its
			// next request a burst, so the prediction is at least one in them.
			D := math.Max(det.disp, det.clump())
			z = poissonZ(n/D, math.Max(det.mu*sec/D, rateAlpha))
			det.cusum = math.Max(0, det.cusum+z-CusumK)
			hot = z >= ZAlarm || det.cusum >= CusumH
		}
		d.Z = z
	}
	wasBurst := det.inBurst
	if r >= 0 {
		det.hist = append(det.hist, period{rate: r, dt: sec})
		if len(det.hist) > histLen {
			det.hist = det.hist[len(det.hist)-histLen:]
		}
	}
	switch {
	case r < 0:
		// No launch counts: nothing to test.
	case det.inBurst:
		if z < ZEnd {
			det.calmRun++
		} else {
			det.calmRun = 0
		}
		switch {
		case det.calmRun >= EndPeriods:
			det.inBurst, det.ended, det.cusum = false, in.Now, 0
			// A rise that ended above the old calm rate (a ramp, not a spike) moves the
			// calm rate up to where it ended.
			det.mu = math.Max(det.mu, g.recentRate(EndPeriods))
		case in.Now.Sub(det.start) >= MaxBurst:
			// Not a burst but a new level: re-learn the calm rate from the last window.
			det.inBurst, det.cusum, det.ended = false, 0, time.Time{}
			det.mu = g.windowRate(UtilWindow)
			d.Reason = ReasonNewLevel
		}
	case hot:
		det.inBurst, det.start, det.calmRun = true, in.Now, 0
		det.preBurst = g.calm
	default:
		// A calm period: learn the rate and its dispersion.
		n, exp := r*sec, det.mu*sec
		if det.seen == 0 {
			det.mu, det.disp = r, 1
		} else {
			a := math.Max(rateAlpha, 1/float64(det.seen+1))
			ad := math.Max(dispAlpha, 1/float64(det.seen+1))
			if exp > 0.1 {
				// var/mean, winsorised at 3 standard deviations, so one outlier below
				// the alarm cannot blunt the test for long.
				dev := (n - exp) * (n - exp) / exp
				dev = math.Min(dev, 9*det.disp)
				det.disp += ad * (dev - det.disp)
			}
			det.disp = math.Max(det.disp, 1)
			det.mu += a * (r - det.mu)
		}
		det.seen++
	}
	if r >= 0 {
		det.hist[len(det.hist)-1].hot = det.inBurst || hot
	}

	// The GPU time per launch, learned when NVML's whole window was calm.
	afterBurst := !det.ended.IsZero() && in.Now.Sub(det.ended) < UtilWindow+2*dt
	if r >= 0 && !det.inBurst && !afterBurst && !in.Fallback && util > 0.005 && g.windowCalm(UtilWindow) {
		if wr := g.windowRate(UtilWindow); wr > 0 {
			c := util / wr
			if g.costAvg == 0 {
				g.costAvg = c
			} else {
				g.costAvg += costAlpha * (c - g.costAvg)
			}
		}
	}

	// The daily pattern: each bucket's mean utilisation is committed when the bucket
	// ends, so the forecast comes from earlier days only.
	b := g.bucket(in.Now)
	if b != g.cur {
		if g.curN > 0 && g.cur >= 0 {
			m := g.curSum / float64(g.curN)
			if g.patternOK[g.cur] {
				g.pattern[g.cur] += patternAlpha * (m - g.pattern[g.cur])
			} else {
				g.pattern[g.cur], g.patternOK[g.cur] = m, true
			}
		}
		g.cur, g.curSum, g.curN = b, 0, 0
	}
	if !in.Fallback {
		g.curSum += util
		g.curN++
	}
	next := (b + 1) % len(g.pattern)
	forecast := 0.0
	if g.patternOK[b] {
		forecast = g.pattern[b]
	}
	if g.patternOK[next] {
		forecast = math.Max(forecast, g.pattern[next])
	}
	forecast *= anticipation

	rateText := func() string {
		if r < 0 {
			return "no launch counts"
		}
		return fmt.Sprintf("%.0f launches/s against a calm %.0f/s (z=%.1f)", r, det.mu, z)
	}
	estText := func() string {
		if rateEst < 0 {
			return "GPU time per launch not learned yet"
		}
		return fmt.Sprintf("%.0f%% from %.0f µs a launch", 100*rateEst, 1e6*g.costAvg)
	}
	now := util
	switch {
	case det.inBurst:
		// Held at the burst's peak until it is over: a quieter period inside a burst
		// is noise, not the end.
		// The launch rate of this period, or averaged over the burst so far if higher
		// (a quieter period inside a burst is noise, not its end).
		if !wasBurst {
			det.burstN, det.burstT = 0, 0
		}
		det.burstN += r * sec
		det.burstT += sec
		if g.costAvg > 0 && r >= 0 {
			rateEst = clamp(g.costAvg*math.Max(r, det.burstN/det.burstT), 0, 1)
		}
		now = math.Max(util, math.Max(rateEst, det.preBurst))
		d.Burst, d.Reason = true, ReasonBurst
		if !wasBurst {
			d.Detail = fmt.Sprintf("burst detected: %s; demand %s", rateText(), estText())
		} else {
			d.Detail = fmt.Sprintf("burst under way: %s; demand %s", rateText(), estText())
		}
	case d.Reason == ReasonNewLevel:
		now = math.Max(util, rateEst)
		d.Detail = fmt.Sprintf("a burst outlasted %v: new calm rate %.0f launches/s; demand %s", MaxBurst, det.mu, estText())
	case afterBurst && rateEst >= 0 && !in.Fallback:
		// NVML's window still holds the burst: believe the launch rate (over the
		// EndPeriods calm periods that ended it, or the latest).
		// NVML's utilisation less the burst's excess GPU time still in its window is
		// also kept (after a ramp rather than a spike it is the better estimate).
		rateEst = clamp(g.costAvg*g.recentRate(EndPeriods), 0, 1)
		clean := util - g.costAvg*g.burstExcess(UtilWindow+2*dt)/UtilWindow.Seconds()
		now = math.Max(det.preBurst, math.Max(rateEst, clean))
		d.Reason = ReasonBurstOver
		d.Detail = fmt.Sprintf("burst over (%d calm periods): %s; demand %.0f%% (calm estimate before it %.0f%%; NVML still shows %.0f%%)",
			EndPeriods, rateText(), 100*now, 100*det.preBurst, 100*util)
	case in.Fallback:
		now = math.Max(util, math.Max(rateEst, g.calm))
		d.Reason = ReasonFallback
		d.Detail = fmt.Sprintf("online utilisation not attributed: conservative %.0f%% (max of the stand-in %.0f%%, the launch-rate estimate and the last calm estimate %.0f%%)", 100*now, 100*util, 100*g.calm)
	default:
		d.Reason = ReasonCalm
		d.Detail = fmt.Sprintf("measured online utilisation %.0f%%; %s", 100*util, rateText())
		g.calm = util
	}
	if d.Reason == ReasonCalm && wasBurst {
		d.Reason = ReasonBurstOver
		d.Detail = "burst over; " + d.Detail
	}
	if forecast > now+0.01 {
		d.Reason = ReasonPattern
		d.Detail = fmt.Sprintf("the daily pattern expects %.0f%% by the next bucket (measured %.0f%%)", 100*forecast/anticipation, 100*now)
		now = forecast
	}
	d.Demand = now
}

// poissonZ is the z-score of observing x (real, ≥ 0) from a Poisson distribution of mean
// lambda: the standard normal quantile of the upper tail P(X ≥ x), clamped to [-4, 38].
func poissonZ(x, lambda float64) float64 {
	switch {
	case lambda <= 0 && x > 0:
		return 38
	case lambda <= 0 || x <= 0:
		return -4
	}
	p := gammaP(x, lambda) // P(X ≥ x) for Poisson(lambda), continuous in x
	if p <= 0 {
		return 38
	}
	return clamp(math.Sqrt2*math.Erfcinv(2*p), -4, 38)
}

// gammaP is the regularised lower incomplete gamma function P(a, x), a > 0, x ≥ 0
// (series below a+1, Lentz's continued fraction above; Numerical Recipes 6.2).
func gammaP(a, x float64) float64 {
	lg, _ := math.Lgamma(a)
	front := math.Exp(-x + a*math.Log(x) - lg)
	if x < a+1 {
		sum, term := 1/a, 1/a
		for n := 1; n < 1000; n++ {
			term *= x / (a + float64(n))
			sum += term
			if math.Abs(term) < math.Abs(sum)*1e-14 {
				break
			}
		}
		return math.Min(1, sum*front)
	}
	const tiny = 1e-300
	b := x + 1 - a
	c, d := 1/tiny, 1/b
	h := d
	for i := 1; i < 1000; i++ {
		an := -float64(i) * (float64(i) - a)
		b += 2
		d = an*d + b
		if math.Abs(d) < tiny {
			d = tiny
		}
		c = b + an/c
		if math.Abs(c) < tiny {
			c = tiny
		}
		d = 1 / d
		del := d * c
		h *= del
		if math.Abs(del-1) < 1e-14 {
			break
		}
	}
	return math.Max(0, 1-front*h)
}

// clump is the online requests' launches per busy span, 1..maxClump; 1 until a span
// was seen.
func (det *detector) clump() float64 {
	if det.clumpS < 0.5 {
		return 1
	}
	return clamp(det.clumpN/det.clumpS, 1, maxClump)
}

// windowRate is the launch rate over the latest w of periods (0 without any).
func (g *GPU) windowRate(w time.Duration) float64 {
	var n, t float64
	h := g.det.hist
	for i := len(h) - 1; i >= 0 && t < w.Seconds()-1e-9; i-- {
		n += h[i].rate * h[i].dt
		t += h[i].dt
	}
	if t == 0 {
		return 0
	}
	return n / t
}

// recentRate is the launch rate over the latest k periods (0 without any).
func (g *GPU) recentRate(k int) float64 {
	var n, t float64
	h := g.det.hist
	for i := len(h) - 1; i >= 0 && i >= len(h)-k; i-- {
		n += h[i].rate * h[i].dt
		t += h[i].dt
	}
	if t == 0 {
		return 0
	}
	return n / t
}

// burstExcess is the launches above the calm rate in the burst periods of the latest w.
func (g *GPU) burstExcess(w time.Duration) float64 {
	var n, t float64
	h := g.det.hist
	for i := len(h) - 1; i >= 0 && t < w.Seconds()-1e-9; i-- {
		if h[i].hot {
			n += math.Max(0, h[i].rate-g.det.mu) * h[i].dt
		}
		t += h[i].dt
	}
	return n
}

// windowCalm says no period in the latest w was part of a burst and that the history
// covers w.
func (g *GPU) windowCalm(w time.Duration) bool {
	var t float64
	h := g.det.hist
	for i := len(h) - 1; i >= 0 && t < w.Seconds()-1e-9; i-- {
		if h[i].hot {
			return false
		}
		t += h[i].dt
	}
	return t >= w.Seconds()-1e-9
}

func clamp(v, lo, hi float64) float64 {
	if math.IsNaN(v) {
		return lo
	}
	return math.Max(lo, math.Min(hi, v))
}
