package xcudatest

import (
	"math"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
)

// Online-aware gating (issue 14): an online process's libxcuda publishes pending work in
// the node's GPU signal page; an offline process's libxcuda holds its launches while the
// page says so, within its hold budget.

func monoNS() uint64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0)
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

func signalPage(t *testing.T) *ctlblock.SignalPage {
	t.Helper()
	s, err := ctlblock.OpenSignalPage(filepath.Join(t.TempDir(), ctlblock.SignalFile), 0o666)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func signalHarness(t *testing.T, page string, sig ctlblock.Signal) *harness {
	t.Helper()
	l := ctlblock.Unlimited()
	l.Signal = sig
	h := newHarness(t, l)
	h.extraEnv = append(h.extraEnv, ctlblock.EnvSignal+"="+page)
	return h
}

// heldSample is the offline container's online-held time at a moment.
type heldSample struct {
	at   time.Time
	held time.Duration
}

func sampleHeld(h *harness) heldSample {
	return heldSample{time.Now(), h.block.Usage().OnlineHeld}
}

// heldFraction is the share of wall time held between two samples.
func heldFraction(a, b heldSample) float64 {
	return float64(b.held-a.held) / float64(b.at.Sub(a.at))
}

// drain keeps reading progress lines and returns the latest launch count seen so far.
func drain(ch <-chan progress, last *progress) {
	for {
		select {
		case p, ok := <-ch:
			if !ok {
				return
			}
			*last = p
		default:
			return
		}
	}
}

// TestOnlineHoldsOffline: an offline loop holds (up to its 80% default budget) while an
// online loop on the same GPU launches, keeps progressing meanwhile, and stops holding
// once the online process has finished (it clears its slot when it synchronises and
// exits).
func TestOnlineHoldsOffline(t *testing.T) {
	page := signalPage(t)
	off := signalHarness(t, page.Path(), ctlblock.Signal{Role: ctlblock.SignalFollow, GPUs: 1 << 3})
	on := signalHarness(t, page.Path(), ctlblock.Signal{Role: ctlblock.SignalPublish, GPUs: 1 << 3})
	offCh, offWait := runLoop(t, off, 200, 2.6, "kernel")
	var last progress
	time.Sleep(400 * time.Millisecond)
	drain(offCh, &last)
	s0 := sampleHeld(off)
	if s0.held != 0 {
		t.Errorf("offline held %v before any online work", s0.held)
	}
	onCh, onWait := runLoop(t, on, 200, 1.0, "kernel")
	time.Sleep(250 * time.Millisecond)
	if v := page.Online(3); v == 0 {
		t.Errorf("online process launching, but its GPU's slot is 0")
	}
	drain(offCh, &last)
	s1, l1 := sampleHeld(off), last.launches
	time.Sleep(600 * time.Millisecond)
	drain(offCh, &last)
	s2, l2 := sampleHeld(off), last.launches
	for range onCh {
	}
	onWait()
	if v := page.Online(3); v != 0 {
		t.Errorf("online process exited, but its GPU's slot still says %d", v)
	}
	time.Sleep(100 * time.Millisecond)
	s3 := sampleHeld(off)
	time.Sleep(500 * time.Millisecond)
	s4 := sampleHeld(off)
	for range offCh {
	}
	offWait()

	during, after := heldFraction(s1, s2), heldFraction(s3, s4)
	t.Logf("offline held %.2f of the time while online launched, %.2f after; %d launches meanwhile", during, after, l2-l1)
	if during < 0.5 || during > 0.9 {
		t.Errorf("while online launched, offline held %.2f of the time, want 0.5..0.9 (budget 0.8)", during)
	}
	if l2 <= l1 {
		t.Errorf("offline made no launch while online launched (%d → %d): the hold is not bounded", l1, l2)
	}
	if after > 0.02 {
		t.Errorf("after online finished, offline still held %.2f of the time", after)
	}
	if u := off.block.Usage(); u.Throttled < u.OnlineHeld {
		t.Errorf("throttled %v does not include online-held %v", u.Throttled, u.OnlineHeld)
	}
}

// TestHoldIsBounded: a page that says "online busy" forever (an online container that
// keeps writing its slot) costs offline at most its hold budget, here 50% of every
// 10 ms; a corrupt slot (far future, far past) costs nothing.
func TestHoldIsBounded(t *testing.T) {
	page := signalPage(t)
	off := signalHarness(t, page.Path(), ctlblock.Signal{Role: ctlblock.SignalFollow, GPUs: 1,
		HoldMaxBP: 5000, HoldPeriod: 10 * time.Millisecond})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
				page.SetOnline(0, monoNS())
			}
		}
	}()
	ch, wait := runLoop(t, off, 200, 2.0, "kernel")
	var last progress
	time.Sleep(300 * time.Millisecond)
	drain(ch, &last)
	s1, l1 := sampleHeld(off), last.launches
	time.Sleep(700 * time.Millisecond)
	drain(ch, &last)
	s2, l2 := sampleHeld(off), last.launches
	close(stop)
	<-done
	// Corrupt values: far in the future, far in the past (but not 0).
	page.SetOnline(0, math.MaxUint64)
	time.Sleep(300 * time.Millisecond)
	s3 := sampleHeld(off)
	page.SetOnline(0, 1)
	time.Sleep(300 * time.Millisecond)
	s4 := sampleHeld(off)
	for range ch {
	}
	wait()
	busy, corrupt := heldFraction(s1, s2), heldFraction(s3, s4)
	t.Logf("held %.2f of the time under a page that is always busy (budget 0.5), %.3f under corrupt values; %d launches meanwhile", busy, corrupt, l2-l1)
	if busy < 0.3 || busy > 0.6 {
		t.Errorf("always-busy page: offline held %.2f of the time, want 0.3..0.6 (budget 0.5)", busy)
	}
	if l2 <= l1 {
		t.Errorf("always-busy page: offline made no launch (%d → %d)", l1, l2)
	}
	if corrupt > 0.01 {
		t.Errorf("corrupt slot values held offline %.3f of the time, want 0", corrupt)
	}
}

// TestNoSignalPageUnchanged: without a signal page (or without a role) the offline
// loop runs exactly as without the feature: never held, GPU kept busy.
func TestNoSignalPageUnchanged(t *testing.T) {
	page := signalPage(t)
	page.SetOnline(0, math.MaxUint64-1) // would be "busy" if anything looked at it
	for name, c := range map[string]struct {
		page string
		sig  ctlblock.Signal
	}{
		"no page": {filepath.Join(t.TempDir(), "missing"), ctlblock.Signal{Role: ctlblock.SignalFollow, GPUs: 1}},
		"no role": {page.Path(), ctlblock.Signal{GPUs: 1}},
	} {
		t.Run(name, func(t *testing.T) {
			h := signalHarness(t, c.page, c.sig)
			stop := make(chan struct{})
			go func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(time.Millisecond):
						page.SetOnline(0, monoNS())
					}
				}
			}()
			defer close(stop)
			ch, wait := runLoop(t, h, 2000, 1.2, "kernel")
			var ps []progress
			for p := range ch {
				ps = append(ps, p)
			}
			wait()
			if ws := shareWindows(ps); len(ws) < 1 || ws[0] < 0.9 {
				t.Errorf("GPU share %v, want ≥ 0.9", ws)
			}
			if u := h.block.Usage(); u.Throttled != 0 || u.OnlineHeld != 0 {
				t.Errorf("throttled %v, online-held %v: want 0", u.Throttled, u.OnlineHeld)
			}
		})
	}
}

// TestHoldSleepsUntilTheClear: a holding offline process sleeps on the slot's idle_seq
// futex until the online side clears the slot, instead of waking every 50 µs to look.
// Under online requests of 1.5 ms every 3.5 ms it holds about the time they are busy
// (the wake reaches it: its waits time out after 1 ms, which would hold each request
// 0.5 ms too long) and sleeps a few times per request, not once per 50 µs of it. The
// requests come from an online process under libxcuda and from the Go page (what muxd
// uses to clear a stale slot).
func TestHoldSleepsUntilTheClear(t *testing.T) {
	for _, by := range []string{"online process", "Go page"} {
		t.Run(by, func(t *testing.T) {
			page := signalPage(t)
			page.SetFollowers([]uint32{1}) // as muxd counts the offline container below
			// Hold-ahead off: it would learn the requests' pace and hold before each.
			// Empty kernels: the stub driver never blocks the loop, so its sleeps are
			// its holds'.
			// No linger either: the hold is to end with the clear.
			off := signalHarness(t, page.Path(), ctlblock.Signal{Role: ctlblock.SignalFollow, GPUs: 1, Ahead: ctlblock.AheadOff, Linger: ctlblock.NoLinger})
			ch, wait := runLoop(t, off, 0, 2.0, "kernel")
			var p1, p2 progress
			time.Sleep(300 * time.Millisecond)
			drain(ch, &p1)
			s1 := sampleHeld(off)
			var busy time.Duration
			requests := 0
			if by == "online process" {
				on := signalHarness(t, page.Path(), ctlblock.Signal{Role: ctlblock.SignalPublish, GPUs: 1})
				out, err := on.command("xctest", "requests", "dlsym", "1500", "2000", "1.0").Output()
				kv := keyValues(string(out))
				if err != nil || kv["errors"] != "0" {
					t.Fatalf("online requests: %v\n%s", err, out)
				}
				requests = int(atoi(t, kv["requests"]))
				secs, _ := strconv.ParseFloat(kv["busy"], 64)
				busy = time.Duration(secs * float64(time.Second))
			} else {
				requests, busy = pageRequests(page, 1500*time.Microsecond, 2*time.Millisecond, time.Second, nil)
			}
			drain(ch, &p2)
			s2 := sampleHeld(off)
			for range ch {
			}
			wait()
			if p1.launches == 0 || p2.launches == 0 || requests == 0 {
				t.Fatalf("no progress (offline launches %d, %d; %d online requests)", p1.launches, p2.launches, requests)
			}
			span := s2.at.Sub(s1.at)
			held, busyFrac := heldFraction(s1, s2), float64(busy)/float64(span)
			sleeps := float64(p2.nvcsw-p1.nvcsw) / float64(requests)
			t.Logf("%d requests busy %.2f of %v; offline held %.2f, %d launches, %.1f sleeps per request",
				requests, busyFrac, span, held, p2.launches-p1.launches, sleeps)
			if held > busyFrac+0.1 {
				t.Errorf("offline held %.2f of the time, the online requests were busy %.2f: the clear does not end its holds", held, busyFrac)
			}
			if held < busyFrac/2 {
				t.Errorf("offline held %.2f of the time, the online requests were busy %.2f: it does not hold for them", held, busyFrac)
			}
			if sleeps > 8 {
				t.Errorf("offline slept %.1f times per 1.5 ms request: it polls instead of waiting for the clear", sleeps)
			}
		})
	}
}

// TestHoldLingersAfterTheClear: a follower whose kernels would take the SMs the online
// kernels need keeps holding for its linger after online work ends (an online service
// with requests queued starts the next one within it), for at most a twentieth of the
// mean time between the requests it saw start; with the linger off, an idle time in the
// future (the page is the online containers' to write) or none, it holds for the work
// alone. The online side is the Go page, publishing 1 ms requests as libxcuda does.
func TestHoldLingersAfterTheClear(t *testing.T) {
	const busy = time.Millisecond
	for _, tc := range []struct {
		name   string
		linger time.Duration
		gap    time.Duration // idle between two requests
		idleAt func() uint64 // what the online side publishes as the end of its work
		want   time.Duration // hold past the work, per request
	}{
		{"5ms linger", 5 * time.Millisecond, 150 * time.Millisecond, monoNS, 5 * time.Millisecond},
		{"a twentieth of the time between requests", 5 * time.Millisecond, 20 * time.Millisecond, monoNS, 1100 * time.Microsecond},
		{"off", ctlblock.NoLinger, 150 * time.Millisecond, monoNS, 0},
		{"idle time in the future", 5 * time.Millisecond, 150 * time.Millisecond, func() uint64 { return monoNS() + uint64(time.Hour) }, 0},
		{"no idle time", 5 * time.Millisecond, 150 * time.Millisecond, func() uint64 { return 0 }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page := signalPage(t)
			page.SetFollowers([]uint32{1})
			off := signalHarness(t, page.Path(), ctlblock.Signal{Role: ctlblock.SignalFollow, GPUs: 1, Ahead: ctlblock.AheadOff, Linger: tc.linger})
			ch, wait := runLoop(t, off, 0, 2.5, "kernel")
			var p1 progress
			time.Sleep(300 * time.Millisecond)
			drain(ch, &p1)
			s1 := sampleHeld(off)
			requests, worked := pageRequests(page, busy, tc.gap, 1800*time.Millisecond, tc.idleAt)
			s2 := sampleHeld(off)
			for range ch {
			}
			wait()
			if p1.launches == 0 || requests == 0 {
				t.Fatalf("no progress (offline launches %d, %d requests)", p1.launches, requests)
			}
			// What the offline process held past the requests' own time. On a busy
			// machine it notices a request's start late (at its next launch), which
			// lowers this, and wakes late from the clear, which raises it, by up to a
			// millisecond or so on average; a 5 ms linger where none is due stands out.
			past := (s2.held - s1.held - worked) / time.Duration(requests)
			t.Logf("%d requests of %v; offline held %v past each", requests, worked/time.Duration(requests), past)
			if hi := tc.want*14/10 + 1500*time.Microsecond; past > hi {
				t.Errorf("offline held %v past each request, want about %v (at most %v)", past, tc.want, hi)
			}
			if lo := tc.want / 2; tc.want >= time.Millisecond && past < lo {
				t.Errorf("offline held %v past each request, want about %v (at least %v)", past, tc.want, lo)
			}
		})
	}
}

// pageRequests publishes online requests in slot 0 of the page for about d, as an online
// process's libxcuda does: each busy for busy, then idle for gap; idleAt, when not nil,
// gives the end-of-work time stored before each clear. It returns how many there were
// and their busy time as measured.
func pageRequests(page *ctlblock.SignalPage, busy, gap, d time.Duration, idleAt func() uint64) (requests int, worked time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); requests++ {
		start := time.Now()
		page.SetOnline(0, monoNS())
		time.Sleep(busy)
		if idleAt != nil {
			page.SetIdleAt(0, idleAt())
		}
		page.SetOnline(0, 0)
		worked += time.Since(start)
		time.Sleep(gap)
	}
	return requests, worked
}

// TestHoldCoversASyncUnderWay (layout version 8): a slot whose launch time is older than
// the hold window still holds followers while an online synchronisation that began after
// it is under way (sync_ns) — one long online kernel would otherwise go stale mid-way —
// and no longer once the synchronisation is over (cleared), more than a second old, or
// from the future.
func TestHoldCoversASyncUnderWay(t *testing.T) {
	const window = 2 * time.Millisecond
	for _, tc := range []struct {
		name string
		sync func(now uint64) uint64
		want bool // held for most of the time
	}{
		{"under way", func(now uint64) uint64 { return now }, true},
		{"began 500 ms ago", func(now uint64) uint64 { return now - uint64(500*time.Millisecond) }, true},
		{"none", func(uint64) uint64 { return 0 }, false},
		{"more than a second old", func(now uint64) uint64 { return now - uint64(1100*time.Millisecond) }, false},
		{"from the future", func(now uint64) uint64 { return now + uint64(time.Hour) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page := signalPage(t)
			page.SetFollowers([]uint32{1})
			off := signalHarness(t, page.Path(), ctlblock.Signal{Role: ctlblock.SignalFollow, GPUs: 1, Ahead: ctlblock.AheadOff,
				Linger: ctlblock.NoLinger, HoldWindow: window, HoldPeriod: time.Second, HoldMaxBP: 9500})
			ch, wait := runLoop(t, off, 0, 1.6, "kernel")
			time.Sleep(300 * time.Millisecond)
			// The last launch long before the window; the synchronisation as the case says.
			now := monoNS()
			page.SetSyncAt(0, tc.sync(now))
			page.SetOnline(0, now-uint64(50*time.Millisecond))
			s1 := sampleHeld(off)
			time.Sleep(300 * time.Millisecond)
			s2 := sampleHeld(off)
			page.SetSyncAt(0, 0)
			time.Sleep(50 * time.Millisecond)
			s3 := sampleHeld(off)
			time.Sleep(300 * time.Millisecond)
			s4 := sampleHeld(off)
			page.SetOnline(0, 0)
			for range ch {
			}
			wait()
			// A hold is counted when it ends: take the time up to the clear.
			during, after := float64(s3.held-s1.held)/float64(s2.at.Sub(s1.at)), heldFraction(s3, s4)
			t.Logf("held %.2f of the time with the synchronisation, %.3f once it is cleared", during, after)
			if tc.want && (during < 0.7 || during > 1.3) {
				t.Errorf("a synchronisation under way: offline held %.2f of the time, want about all of it until the clear", during)
			}
			if !tc.want && during > 0.05 {
				t.Errorf("offline held %.2f of the time, want none (the slot is stale)", during)
			}
			if after > 0.05 {
				t.Errorf("synchronisation cleared, slot stale: offline still held %.3f of the time", after)
			}
		})
	}
}
