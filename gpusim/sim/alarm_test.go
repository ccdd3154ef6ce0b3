package sim

import (
	"testing"
	"time"
)

// TestAlarm: an armed alarm fires, a later setting replaces an earlier one, a stopped
// alarm stays quiet, and so does the fallback timer.
func TestAlarm(t *testing.T) {
	for _, fallback := range []bool{false, true} {
		fired := make(chan struct{}, 16)
		fire := func(*alarm) { fired <- struct{}{} }
		a := newAlarm(fire)
		if fallback {
			a.close()
			a = &alarm{fire: fire, fd: -1}
			a.timer = time.AfterFunc(time.Hour, func() { fire(a) })
			a.timer.Stop()
		} else if a.timer != nil {
			t.Fatal("no timerfd on Linux: the alarm fell back to a Go timer")
		}
		wait := func(within time.Duration) bool {
			select {
			case <-fired:
				return true
			case <-time.After(within):
				return false
			}
		}
		a.set(500 * time.Microsecond)
		if !wait(5 * time.Second) {
			t.Fatalf("fallback %v: an alarm set 500 µs ahead did not fire", fallback)
		}
		a.set(time.Hour)
		a.set(time.Millisecond)
		if !wait(5 * time.Second) {
			t.Fatalf("fallback %v: re-armed from 1 h to 1 ms, the alarm did not fire", fallback)
		}
		a.set(0)
		if !wait(5 * time.Second) {
			t.Fatalf("fallback %v: an alarm set to 0 did not fire at once", fallback)
		}
		a.set(20 * time.Millisecond)
		a.stop()
		if wait(60 * time.Millisecond) {
			t.Errorf("fallback %v: a stopped alarm fired", fallback)
		}
		a.close()
	}
}
