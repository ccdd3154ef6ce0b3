package alloc

import (
	"math"
	"testing"
	"time"
)

func cfg() Config {
	return Config{Mode: Dynamic, Headroom: 0.1, StaticShare: 0.5, GiveBack: 0.02, OfflineMin: 0.05, OfflineMax: 0.9, DayLength: 24 * time.Hour}
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestStepResponses(t *testing.T) {
	g := New(cfg())
	now := t0
	step := func(util, rate float64) Decision {
		now = now.Add(100 * time.Millisecond)
		return g.Step(Input{Now: now, Online: true, OnlineUtil: util, OnlineLaunchRate: rate, RateKnown: true})
	}
	// Steady light online load: offline gets the complement minus headroom.
	d := step(0.2, 1000)
	if !near(d.Share, 0.7) {
		t.Fatalf("first share %v, want 0.7", d.Share)
	}
	// Step up in online load: cut in the same period.
	d = step(0.6, 3000)
	if d.Share > 0.3+1e-9 {
		t.Errorf("after a step up the share is %v, want at most 0.3 at once", d.Share)
	}
	// Step down (measured utilisation, no burst seen): the share grows back by a
	// quarter of the gap a period, at least give_back, and is back within 15 periods.
	prev := d.Share
	for range 15 {
		d = step(0.2, 1000)
		if grew, most := d.Share-prev, math.Max(0.02, 0.25*(0.7-prev)); grew > most+1e-9 {
			t.Fatalf("share grew %v in one period, more than %v", grew, most)
		}
		prev = d.Share
	}
	if d.Share < 0.69 {
		t.Errorf("share did not recover in 15 periods: %v", d.Share)
	}
}

func TestBurstSeenInLaunchRateBeforeUtilisation(t *testing.T) {
	g := New(cfg())
	now := t0
	for range 50 {
		now = now.Add(100 * time.Millisecond)
		g.Step(Input{Now: now, Online: true, OnlineUtil: 0.2, OnlineLaunchRate: 1000, RateKnown: true})
	}
	// The launch rate triples while NVML's window still shows the old utilisation.
	now = now.Add(100 * time.Millisecond)
	d := g.Step(Input{Now: now, Online: true, OnlineUtil: 0.2, OnlineLaunchRate: 3000, RateKnown: true})
	if !d.Burst || d.Demand < 0.55 || d.Share > 0.35 {
		t.Errorf("burst not acted on: %+v", d)
	}
}

func TestBounds(t *testing.T) {
	g := New(cfg())
	if d := g.Step(Input{Now: t0, Online: true, OnlineUtil: 1}); !near(d.Share, 0.05) {
		t.Errorf("saturated online: share %v, want the floor 0.05", d.Share)
	}
	g = New(cfg())
	if d := g.Step(Input{Now: t0, Online: true, OnlineUtil: 0}); !near(d.Share, 0.9) {
		t.Errorf("idle online: share %v, want the ceiling 0.9", d.Share)
	}
	g = New(cfg())
	if d := g.Step(Input{Now: t0, Online: false}); !near(d.Share, 0.9) {
		t.Errorf("no online: share %v, want 0.9", d.Share)
	}
	if d := g.Step(Input{Now: t0, Online: true, OnlineUtil: math.NaN()}); d.Share > 0.9 || d.Share < 0.05 {
		t.Errorf("NaN input escaped the bounds: %v", d.Share)
	}
}

func TestHealth(t *testing.T) {
	g := New(cfg())
	g.Step(Input{Now: t0, Online: true, OnlineUtil: 0.1})
	if d := g.Step(Input{Now: t0, Online: true, OnlineUtil: 0.1, Health: Floor}); !near(d.Share, 0.05) {
		t.Errorf("throttled GPU: share %v, want the floor", d.Share)
	}
	if d := g.Step(Input{Now: t0, Online: true, OnlineUtil: 0.1, Health: Stop}); d.Share != 0 {
		t.Errorf("stopped GPU: share %v, want 0", d.Share)
	}
	// After recovery the share climbs back gradually, not in one jump.
	if d := g.Step(Input{Now: t0, Online: true, OnlineUtil: 0.1}); d.Share > 0.02+1e-9 {
		t.Errorf("share jumped to %v right after recovery", d.Share)
	}
}

func TestStaticMode(t *testing.T) {
	c := cfg()
	c.Mode = Static
	g := New(c)
	for _, u := range []float64{0, 0.5, 1} {
		if d := g.Step(Input{Now: t0, Online: true, OnlineUtil: u}); !near(d.Share, 0.5) {
			t.Errorf("static share with util %v: %v", u, d.Share)
		}
	}
}

// TestLearnsDailyPattern: after seeing a few days in which online load rises at a fixed
// hour, the share is already lowered in the bucket before that hour.
func TestLearnsDailyPattern(t *testing.T) {
	c := cfg()
	c.DayLength = 96 * time.Second // one bucket per second
	g := New(c)
	load := func(sec int) float64 {
		if sec%96 >= 50 && sec%96 < 70 {
			return 0.7
		}
		return 0.1
	}
	var before Decision
	for sec := 0; sec < 96*3; sec++ {
		for k := range 10 {
			now := t0.Add(time.Duration(sec)*time.Second + time.Duration(k)*100*time.Millisecond)
			d := g.Step(Input{Now: now, Online: true, OnlineUtil: load(sec)})
			if sec == 96*2+49 && k == 9 {
				before = d
			}
		}
	}
	// At second 49 of day 3 the measured load is still 0.1, but the pattern says 0.7 is next.
	if before.Demand < 0.6 || before.Share > 0.3 {
		t.Errorf("pattern not anticipated one bucket ahead: %+v", before)
	}
}
