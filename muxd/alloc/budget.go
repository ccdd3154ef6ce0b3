package alloc

import (
	"math"
	"slices"
	"time"
)

// Claim is one offline container's claim on a GPU's offline budget.
type Claim struct {
	// Weight sets its part relative to the others (its class priority + 1).
	Weight float64
	// Cap is its own ceiling (its muxflow.io/sm-percent, else the class's sm_max), 0..1.
	Cap float64
}

// SplitBudget divides one GPU's offline budget among the offline containers on it by
// weighted max-min fairness (water-filling): every container gets the same level × its
// weight, except that none gets more than its own Cap, and what a capped container leaves
// is shared by the others the same way. The parts never sum to more than budget, and
// none is above its Cap.
//
// It returns each container's share and its uncapped part (level × weight): the part of
// the budget it would get if its own cap did not bind. share = min(cap, part).
func SplitBudget(budget float64, claims []Claim) (shares, parts []float64) {
	shares = make([]float64, len(claims))
	parts = make([]float64, len(claims))
	if budget <= 0 || math.IsNaN(budget) {
		return shares, parts
	}
	order := make([]int, 0, len(claims))
	var w float64
	for i, c := range claims {
		if c.Weight > 0 {
			order = append(order, i)
			w += c.Weight
		}
	}
	if w == 0 {
		return shares, parts
	}
	capOf := func(i int) float64 { return clamp(claims[i].Cap, 0, 1) }
	// Fill in order of cap per unit of weight: the first ones to reach their cap are
	// fixed there, and the rest share what is left.
	slices.SortStableFunc(order, func(a, b int) int {
		ra, rb := capOf(a)/claims[a].Weight, capOf(b)/claims[b].Weight
		switch {
		case ra < rb:
			return -1
		case ra > rb:
			return 1
		}
		return 0
	})
	left, wLeft := budget, w
	level := math.Inf(1)
	for k, i := range order {
		c := claims[i]
		if capOf(i) >= left*c.Weight/wLeft {
			level = left / wLeft
			for _, j := range order[k:] {
				shares[j] = math.Min(capOf(j), level*claims[j].Weight)
			}
			break
		}
		shares[i] = capOf(i)
		left -= capOf(i)
		wLeft -= c.Weight
	}
	if math.IsInf(level, 1) {
		// Every cap binds: the budget left over is what any of them could have had more.
		level = 0
		for _, i := range order {
			level = math.Max(level, capOf(i)/claims[i].Weight)
		}
		level += left / w
	}
	for _, i := range order {
		parts[i] = level * claims[i].Weight
	}
	return shares, parts
}

// WidthMemory is how long the widest online kernel seen on a GPU keeps sizing its
// offline MPS budget (FitBudget) after it was last seen: a service's kernel shapes are
// stable, and a narrower reading in between is only a sample that missed the wide one.
const WidthMemory = 30 * time.Second

// Width remembers the widest online kernel seen on one GPU (a share of its SMs) within
// WidthMemory.
type Width struct {
	w  float64
	at time.Time
}

// Observe notes this period's widest online launch (0: none sampled) and returns the
// width to fit.
func (t *Width) Observe(w float64, now time.Time) float64 {
	if w > 0 && (w >= t.w || now.Sub(t.at) > WidthMemory) {
		t.w, t.at = w, now
	}
	if t.w > 0 && now.Sub(t.at) > 2*WidthMemory {
		t.w = 0 // nothing sampled for a long while: the kernels are unknown again
	}
	return t.w
}

// Whole is the offline MPS budget of a GPU whose online kernels no offline part leaves
// room for (FitBudget): every SM, each container's own sm-percent still its cap
// (muxd/blocks MPSClaim).
const Whole = 1.0

// FitBudget is a GPU's offline MPS active-thread budget (0..1, split among its offline
// containers like the launch-gate ceiling) given the width of its online kernels (the
// share of its SMs the widest one needs resident; 0: unknown). MPS preempts nothing, so
// an online kernel starts on all its SMs at once only if the offline contexts leave
// them: the budget is 1 - width, at most max, when that leaves offline at least fitMin
// (fits). Kernels too wide for that get the whole GPU (Whole): an online kernel that needs
// nearly every SM waits for the last offline block in its way wherever the offline blocks
// run, so a part of the SMs would gain it nothing and only stretch the offline kernels,
// leaving more of them running when a request arrives; the launch gate's time share, at
// most max, bounds offline work there, and the online kernels rely on the launch holds.
// An unknown width keeps max.
func FitBudget(width, max, fitMin float64) (budget float64, fits bool) {
	if width <= 0 || width > 1 {
		return max, false
	}
	room := 1 - width
	if room < fitMin {
		return Whole, false
	}
	return math.Min(max, room), true
}

// BusMax is the share of a GPU's memory bandwidth that the online kernels and the offline
// ones running beside them may ask for together before running beside them costs the
// online kernels time: past it they queue for memory, which no SM split divides.
const BusMax = 0.9

// busDecay weighs the readings Bus sums: each period's counts for 0.9 of the one before
// (about the latest ten periods, a second at the default 100 ms). NVML's per-process
// figures are whole percents, so one period's ratio of a few percent is mostly rounding.
const busDecay = 0.9

// busMinUtil is how much utilisation (summed over the weighted readings) a class's
// bandwidth per unit of running time is read from: about half a second of kernels at the
// default period.
const busMinUtil = 0.2

// BusUse is one period's reading of a GPU's memory bandwidth by class, from NVML's
// per-process samples: the utilisation (share of the window its kernels ran) and the
// memory utilisation (share of the bandwidth it moved, window average) of the online
// processes, summed, and of the offline ones (Mem summed; Util the time any of them ran,
// estimated as the larger of the largest single process's and the GPU's utilisation less
// the online processes'). Known is false when the samples carry no memory utilisation.
type BusUse struct {
	OnlineUtil, OnlineMem   float64
	OfflineUtil, OfflineMem float64
	Known                   bool
}

// Bus remembers, for WidthMemory, that a GPU's online and offline kernels together ask
// for more memory bandwidth than BusMax while they run: the offline kernels then must not
// run beside the online ones (their MPS budget does not fit), whatever the SM split.
type Bus struct {
	sum BusUse // the readings, weighted by busDecay
	at  time.Time
}

// Observe takes this period's reading and says whether the GPU's kernels contend for
// memory bandwidth (now or within WidthMemory), with the two classes' bandwidth while
// they run (shares of the bus; 0: not enough readings yet).
func (b *Bus) Observe(u BusUse, now time.Time) (bound bool, online, offline float64) {
	if u.Known {
		s := &b.sum
		s.OnlineUtil = busDecay*s.OnlineUtil + clamp(u.OnlineUtil, 0, 1)
		s.OnlineMem = busDecay*s.OnlineMem + clamp(u.OnlineMem, 0, 1)
		s.OfflineUtil = busDecay*s.OfflineUtil + clamp(u.OfflineUtil, 0, 1)
		s.OfflineMem = busDecay*s.OfflineMem + clamp(u.OfflineMem, 0, 1)
	}
	if b.sum.OnlineUtil >= busMinUtil {
		online = clamp(b.sum.OnlineMem/b.sum.OnlineUtil, 0, 1)
	}
	if b.sum.OfflineUtil >= busMinUtil {
		offline = clamp(b.sum.OfflineMem/b.sum.OfflineUtil, 0, 1)
	}
	if u.Known && online > 0 && offline > 0 && online+offline > BusMax {
		b.at = now
	}
	return !b.at.IsZero() && now.Sub(b.at) < WidthMemory, online, offline
}

// FitTurn is how long, on average, each offline container of a GPU whose containers
// together may hold more of its MPS budget than it has gets to be the one that fits it
// (FitHeld's turn): MPS fixes a process's active-thread percentage when it starts, so a
// job that started alone keeps the whole budget after a neighbour comes, and the jobs
// outside the fitted set get little done; taking turns gives each its time unbounded.
const FitTurn = 2 * time.Second

// TurnAt is whose turn it is at now (an index into held, -1 when none may fit): the
// containers whose percentages are 1..100 take turns in order, in cycles of FitTurn
// each on average, each turn as long as its share of their summed percentages. A job
// holding more SMs does more in a turn, so its longer turn keeps what the GPU gets done
// close to what the largest alone would, while every job still gets its time.
func TurnAt(held []uint32, now time.Time) int {
	var sum, n int64
	for _, h := range held {
		if mayFit(h) {
			sum += int64(h)
			n++
		}
	}
	if n == 0 {
		return -1
	}
	cycle := n * int64(FitTurn)
	at := float64(now.UnixNano()%cycle) / float64(cycle) * float64(sum) // in percents
	last := -1
	for i, h := range held {
		if mayFit(h) {
			if at < float64(h) {
				return i
			}
			at -= float64(h)
			last = i
		}
	}
	return last // rounding at the cycle's end
}

// mayFit: a container whose processes hold h percent may fit an MPS budget (0 is
// unknown, above 100 the whole GPU).
func mayFit(h uint32) bool { return h > 0 && h <= 100 }

// FitHeld chooses which of a GPU's offline containers may run as fitting its MPS budget
// when together they may hold more of it than it has. held is each container's
// percentage (what its processes may hold, 1..100; anything else never fits), budget the
// GPU's in percent, turn the container whose turn it is (FitTurn; out of range: none).
// Where they all fit it returns them all; otherwise the container whose turn it is, if it
// fits alone, and beside it the others whose percentages sum highest in the room it
// leaves (then more of them). Those outside the set stay bounded, so that the SMs the
// fitted ones may hold and the online kernels' room never overlap.
func FitHeld(held []uint32, budget float64, turn int) []bool {
	fit := make([]bool, len(held))
	if !(budget >= 0.5) { // NaN too
		return fit
	}
	room := int(math.Floor(math.Min(budget, 100) + 0.5))
	sum := 0
	for i, h := range held {
		if mayFit(h) {
			fit[i] = true
			sum += int(h)
		}
	}
	if sum <= room {
		return fit // the usual case: they all fit
	}
	clear(fit)
	if turn >= 0 && turn < len(held) && mayFit(held[turn]) && int(held[turn]) <= room {
		fit[turn] = true
		room -= int(held[turn])
	}
	// 0/1 knapsack over whole percents: value is the sum first, then the count.
	n := len(held)
	step := int64(n + 1)
	best := make([]int64, room+1)
	take := make([][]bool, n) // take[i][w]: item i is in the best set of weight <= w over items 0..i
	for i := range n {
		take[i] = make([]bool, room+1)
		h := int(held[i])
		if fit[i] || !mayFit(held[i]) || h > room {
			continue
		}
		v := int64(h)*step + 1
		for w := room; w >= h; w-- {
			if c := best[w-h] + v; c > best[w] {
				best[w], take[i][w] = c, true
			}
		}
	}
	for i, w := n-1, room; i >= 0; i-- {
		if take[i][w] {
			fit[i] = true
			w -= int(held[i])
		}
	}
	return fit
}

// TurnOffer is the MPS part (0..1) to offer the new processes of an offline container on
// a GPU whose budget (0..1) leaves the online kernels room: its split part where that
// fits beside what the other offline containers' processes may already hold (othersHeld,
// percent, summed), else the whole budget up to its own cap. MPS fixes a process's
// percentage when it starts, so a container that does not fit beside its neighbours
// takes turns as the one that fits (FitHeld) whatever it is offered; offered only the
// part its neighbours leave, it would spend its turns on a fraction of the SMs the budget
// has, and the GPU would do less than the largest alone.
func TurnOffer(part, budget, cap float64, othersHeld uint32) float64 {
	if FitsBeside(part, budget, othersHeld) {
		return part
	}
	return math.Max(part, math.Min(cap, budget))
}

// FitsBeside says whether processes holding part (0..1) of a GPU's MPS budget (0..1) fit
// it beside those of the other offline containers (othersHeld, percent, summed), counted
// in whole percents as FitHeld counts them.
func FitsBeside(part, budget float64, othersHeld uint32) bool {
	room := math.Floor(math.Min(budget*100, 100) + 0.5)
	return float64(othersHeld)+math.Floor(part*100+1e-6) <= room
}

// BoundedFloor is the least part of its split of the offline ceiling that an offline
// container which does not fit the MPS budget keeps beside containers that do
// (BoundedBeside): it progresses, however much of the budget they hold.
const BoundedFloor = 0.25

// BoundedBeside is the part of its split of a GPU's offline ceiling that an offline
// container which does not fit the MPS budget keeps where others fit it, holding fitted
// percent of the SMs between them against a budget of budget percent. A fitted container
// runs as often as the whole ceiling allows (FitHeld's set keeps to its SMs); one that
// does not fit may take any SM, and beside them the SMs it can take without taking the
// online kernels' room are only those the fitted ones leave of the budget: it keeps that
// share of its split, at least BoundedFloor.
func BoundedBeside(budget, fitted float64) float64 {
	if !(budget > 0) || !(fitted > 0) { // NaN too
		return 1
	}
	return clamp(1-fitted/budget, BoundedFloor, 1)
}
