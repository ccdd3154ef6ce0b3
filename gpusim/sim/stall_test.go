package sim

import (
	"testing"
	"time"
)

// A catch-up of the model that held the lock for 2 ms or more counts as a stall of the
// simulator, reported in the device's stats; a short one does not.
func TestStallsAreCounted(t *testing.T) {
	s := newTestSim(t, "h100")
	d := s.Device(0)
	s.mu.Lock()
	d.noteCatchUp(time.Now())                            // a step of microseconds
	d.noteCatchUp(time.Now().Add(-3 * time.Millisecond)) // a stall of 3 ms
	d.noteCatchUp(time.Now().Add(-5 * time.Millisecond)) // and one of 5 ms
	s.mu.Unlock()
	st, ok := s.Stats(0)
	if !ok {
		t.Fatal("no stats")
	}
	if st.Stalls != 2 {
		t.Errorf("stalls = %d, want 2 (the 3 and 5 ms catch-ups, not the short one)", st.Stalls)
	}
	if st.StalledNs < 8e6 || st.StalledNs > 9e6 {
		t.Errorf("stalled %.2f ms in all, want 8 to 9", st.StalledNs/1e6)
	}
	if st.MaxStallNs < 5e6 || st.MaxStallNs > 6e6 {
		t.Errorf("longest stall %.2f ms, want 5 to 6", st.MaxStallNs/1e6)
	}
}
