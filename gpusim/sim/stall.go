package sim

import "time"

// The device model runs in real time under the simulator's lock. When it has more
// events to process than the machine can keep up with (many processes' short blocks
// retiring at different moments on many SMs), catching up holds the lock, and every
// process's operations wait: they enter the model late, and a request's GPU-side time
// grows by the simulator's stall, not by anything the simulated GPU did. stallWatch
// notices such catch-ups so that gpusimd says so and a harness can tell a stall of the
// simulator from the behaviour of what it runs.

const (
	// stallMin is the catch-up that counts as a stall: longer than a short online
	// request, far longer than a step normally takes (microseconds).
	stallMin = 2 * time.Millisecond
	// stallLogEvery spaces gpusimd's warnings (each gives the totals so far).
	stallLogEvery = time.Second
)

// stallWatch sums the catch-ups of one device that held the lock for stallMin or more,
// since the start (DeviceStats, and gpusimd's warnings).
type stallWatch struct {
	count  int
	total  time.Duration
	max    time.Duration
	logged time.Time // when the last warning went out
}

// noteCatchUp records a catch-up of the model that began at start; lock held.
func (d *Device) noteCatchUp(start time.Time) {
	took := time.Since(start)
	if took < stallMin {
		return
	}
	w := &d.stalls
	w.count++
	w.total += took
	w.max = max(w.max, took)
	if now := time.Now(); now.Sub(w.logged) >= stallLogEvery {
		d.s.log.Warn("device model fell behind real time", "device", d.index, "stalls", w.count,
			"stalled_ms", ms(w.total), "max_ms", ms(w.max),
			"hint", "operations of every process waited for the simulator: latencies include its stalls")
		w.logged = now
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
