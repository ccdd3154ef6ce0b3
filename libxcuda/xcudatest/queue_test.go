package xcudatest

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
)

// Bounding offline concurrency next to online work (issue 14): while online work was
// active on its GPU within the last 100 ms, a throttled offline process keeps at most its
// queue budget of GPU time outstanding (launches in flight × its measured GPU time per
// launch, one launch always), and its full max_inflight otherwise.

// onlineBlips marks slot 0 busy for 200 µs every 5 ms until stop is closed: an online
// service with short requests (offline holds during each, then launches between them).
func onlineBlips(page *ctlblock.SignalPage, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				page.SetOnline(0, 0)
				return
			default:
			}
			page.SetOnline(0, monoNS())
			time.Sleep(200 * time.Microsecond)
			page.SetOnline(0, 0)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return &wg
}

// maxQueued is the largest queued work (ns) that progress lines with mono time in
// [from, to) report, and how many lines there were.
func maxQueued(ps []progress, from, to float64) (int64, int) {
	var m int64
	n := 0
	for _, p := range ps {
		if p.mono >= from && p.mono < to {
			m = max(m, p.maxQNS)
			n++
		}
	}
	return m, n
}

// queueRun runs an offline loop of kernelUS kernels at share, without online work, with
// online blips, and after them; fit > 0 creates it at that MPS percentage with a block
// saying that much fits (it leaves the online kernels room).
func queueRun(t *testing.T, share uint32, queue time.Duration, kernelUS int, fit uint32) (without, with int64) {
	t.Helper()
	page := signalPage(t)
	l := ctlblock.Limits{ShareBP: share, MaxInFlight: 32, MPSActiveThreadPercent: fit, Signal: ctlblock.Signal{
		Role: ctlblock.SignalFollow, GPUs: 1, Queue: queue, Ahead: ctlblock.AheadOff, FitPercent: fit}}
	off := newHarness(t, l)
	off.extraEnv = append(off.extraEnv, ctlblock.EnvSignal+"="+page.Path())
	ch, wait := runLoop(t, off, kernelUS, 2.8, "kernel")
	var ps []progress
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for p := range ch {
			mu.Lock()
			ps = append(ps, p)
			mu.Unlock()
		}
	}()
	time.Sleep(300 * time.Millisecond)
	a0 := float64(monoNS()) / 1e9
	time.Sleep(500 * time.Millisecond)
	a1 := float64(monoNS()) / 1e9
	stop := make(chan struct{})
	wg := onlineBlips(page, stop)
	time.Sleep(150 * time.Millisecond) // the first blip is seen; earlier queued work runs out
	b0 := float64(monoNS()) / 1e9
	time.Sleep(600 * time.Millisecond)
	b1 := float64(monoNS()) / 1e9
	close(stop)
	wg.Wait()
	time.Sleep(250 * time.Millisecond) // online gone for longer than 100 ms
	c0 := float64(monoNS()) / 1e9
	time.Sleep(300 * time.Millisecond)
	c1 := float64(monoNS()) / 1e9
	<-done
	wait()
	mu.Lock()
	defer mu.Unlock()
	without, n0 := maxQueued(ps, a0, a1)
	with, n1 := maxQueued(ps, b0, b1)
	after, n2 := maxQueued(ps, c0, c1)
	if n0 < 3 || n1 < 3 || n2 < 3 {
		t.Fatalf("too few progress lines (%d without online, %d with): a stalled loop", n0, n1)
	}
	u := off.block.Usage()
	t.Logf("share %d bp, queue %v, %d us kernels: most work queued %v without online, %v with, %v after (held %v)",
		share, queue, kernelUS, time.Duration(without), time.Duration(with), time.Duration(after), u.OnlineHeld)
	if after < without/2 {
		t.Errorf("online gone for 250 ms, yet at most %v queued (%v before it came): the bound stayed", time.Duration(after), time.Duration(without))
	}
	return without, with
}

// TestQueueBoundWhileOnline: 100 µs kernels, max_inflight 32: without online work the
// offline loop queues milliseconds of work; with online work active it keeps within the
// 300 µs queue budget (3 launches). So does a process whose MPS percentage leaves the
// online kernels room (memory traffic and blocks beside the online kernels' still slow
// them).
func TestQueueBoundWhileOnline(t *testing.T) {
	for _, fit := range []uint32{0, 50} {
		without, with := queueRun(t, 9000, 300*time.Microsecond, 100, fit)
		if without < int64(time.Millisecond) {
			t.Errorf("fit %d%%, without online work, at most %v queued: want max_inflight's worth (~3.2ms)", fit, time.Duration(without))
		}
		if with > int64(450*time.Microsecond) {
			t.Errorf("fit %d%%, with online work active, %v queued: want at most the 300us budget", fit, time.Duration(with))
		}
		if with < int64(150*time.Microsecond) {
			t.Errorf("fit %d%%, with online work active, at most %v queued: the budget allows 3 launches of 100us", fit, time.Duration(with))
		}
	}
}

// TestQueueAlwaysOneLaunch: kernels longer than the budget still go, one at a time.
func TestQueueAlwaysOneLaunch(t *testing.T) {
	without, with := queueRun(t, 9000, 300*time.Microsecond, 1000, 0)
	if without < int64(3*time.Millisecond) {
		t.Errorf("without online work, at most %v queued: want several 1ms launches", time.Duration(without))
	}
	if with < int64(500*time.Microsecond) || with > int64(1300*time.Microsecond) {
		t.Errorf("with online work active, %v queued: want one 1ms launch at a time", time.Duration(with))
	}
}

// TestQueueBoundUnthrottled: an offline process that is not throttled (share 100%: the
// gate's fast path) queues as much as the driver takes without online work, and is
// bounded by the queue budget while online work is active.
func TestQueueBoundUnthrottled(t *testing.T) {
	without, with := queueRun(t, ctlblock.ShareFull, 300*time.Microsecond, 100, 0)
	if without < int64(5*time.Millisecond) {
		t.Errorf("unthrottled, without online work, at most %v queued: want the driver's queue", time.Duration(without))
	}
	if with > int64(450*time.Microsecond) {
		t.Errorf("unthrottled, with online work active, %v queued: want at most the 300us budget", time.Duration(with))
	}
}

// paceBlips marks slot 0 busy for 1 ms at the given starts (ns offsets from now, on an
// absolute schedule), like an online service's requests, until the list runs out.
func paceBlips(page *ctlblock.SignalPage, starts []time.Duration) {
	t0 := time.Now()
	for _, s := range starts {
		time.Sleep(time.Until(t0.Add(s)))
		page.SetOnline(0, monoNS())
		time.Sleep(time.Millisecond)
		page.SetOnline(0, 0)
	}
}

func aheadRun(t *testing.T, ahead ctlblock.HoldAhead, starts []time.Duration) (aheadHeld, held time.Duration, launches int64) {
	t.Helper()
	page := signalPage(t)
	l := ctlblock.Limits{ShareBP: 9000, Signal: ctlblock.Signal{Role: ctlblock.SignalFollow, GPUs: 1, Ahead: ahead}}
	off := newHarness(t, l)
	off.extraEnv = append(off.extraEnv, ctlblock.EnvSignal+"="+page.Path())
	secs := starts[len(starts)-1].Seconds() + 0.3
	ch, wait := runLoop(t, off, 500, secs, "kernel")
	var last progress
	go func() {
		for p := range ch {
			last = p
		}
	}()
	time.Sleep(100 * time.Millisecond)
	paceBlips(page, starts)
	wait()
	u := off.block.Usage()
	return u.AheadHeld, u.OnlineHeld, last.launches
}

// TestHoldAheadRegularPace: requests every 20 ms (an online service at a steady 50/s):
// the offline loop (500 us kernels) learns the pace and holds launches that would still
// run when the next request is due; with hold_ahead off it does not. Requests at
// irregular moments (exponential gaps, same mean) are not predicted.
func TestHoldAheadRegularPace(t *testing.T) {
	var regular, irregular []time.Duration
	r := rand.New(rand.NewPCG(1, 2))
	at := time.Duration(0)
	for i := range 60 {
		regular = append(regular, time.Duration(i)*20*time.Millisecond)
		irregular = append(irregular, at)
		at += time.Duration(r.ExpFloat64() * float64(20*time.Millisecond))
	}
	on, onHeld, onN := aheadRun(t, ctlblock.AheadOn, regular)
	off, _, offN := aheadRun(t, ctlblock.AheadOff, regular)
	irr, _, irrN := aheadRun(t, ctlblock.AheadOn, irregular)
	t.Logf("regular pace: held ahead %v (all holds %v), %d launches; ahead off: %v, %d launches; irregular: held ahead %v, %d launches",
		on, onHeld, onN, off, offN, irr, irrN)
	if on < 20*time.Millisecond {
		t.Errorf("regular pace: held ahead only %v over 1.2 s, want the learnt pace to hold launches before requests", on)
	}
	if off != 0 {
		t.Errorf("hold_ahead off, yet held ahead %v", off)
	}
	if irr > on/4 {
		t.Errorf("irregular arrivals: held ahead %v, want little (regular pace: %v)", irr, on)
	}
	if onN < offN/2 {
		t.Errorf("holding ahead left %d launches of %d: too costly", onN, offN)
	}
}

// TestDefaultInflightIsTimeBudget: with max_inflight at its default, a throttled
// process of 20 µs kernels keeps the queue budget of GPU time in flight (300 µs: 15
// launches), not four launches (80 µs), so the GPU does not idle while the host wakes;
// and no more than that, so a cut still bites within the budget.
func TestDefaultInflightIsTimeBudget(t *testing.T) {
	off := newHarness(t, ctlblock.Limits{ShareBP: 9000})
	ps := runLoopToEnd(t, off, 20, 1.0)
	most, _ := maxQueued(ps, 0, 1e18)
	t.Logf("20 us kernels, default max_inflight: most work queued %v", time.Duration(most))
	if most < int64(150*time.Microsecond) {
		t.Errorf("at most %v queued: want about the 300us queue budget (four launches would be 80us)", time.Duration(most))
	}
	if most > int64(450*time.Microsecond) {
		t.Errorf("%v queued: want at most about the 300us queue budget", time.Duration(most))
	}
}
