package sim

// Where a busy device's model time goes. A node running many processes' short kernels
// holds a thousand residencies on a hundred-odd SM sets, and every event (a residency
// ending) used to visit all of them: to advance their work, to find the next end, to
// sum each kernel's bandwidth and to find the residencies that ended. Each kernel now
// keeps its own residencies, the earliest ends on its work clock in a heap, and its
// blocks' summed speed, all updated where a residency comes, goes or changes speed, so
// an event costs what changed, not what is on the SMs.

// endMark is a residency's end on its kernel's work clock, as of its version ver (a
// residency that changed speed or left has a newer version: the mark is stale).
type endMark struct {
	end float64
	r   *residency
	ver uint32
}

// endHeap is a min-heap of endMarks by end (not container/heap, which boxes every
// element it is pushed in an interface, on the model's busiest path).
type endHeap []endMark

func (h *endHeap) push(m endMark) {
	*h = append(*h, m)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p].end <= a[i].end {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *endHeap) pop() {
	a := *h
	n := len(a) - 1
	a[0] = a[n]
	a[n] = endMark{}
	a = a[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && a[l].end < a[m].end {
			m = l
		}
		if r := l + 1; r < n && a[r].end < a[m].end {
			m = r
		}
		if m == i {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
}

// first is kernel k's residency that ends first on its work clock, nil if none has a
// speed yet; stale marks on the way are dropped.
func (k *op) first() *residency {
	for len(k.ends) > 0 {
		if m := k.ends[0]; m.r.ver == m.ver {
			return m.r
		}
		k.ends.pop()
	}
	return nil
}

// newRes is a residency like r, from the ones that left if any (a busy device places
// and retires hundreds of thousands a second; reusing them spares the collector).
// Its version goes on from its last life, so marks left from then stay stale.
func (d *Device) newRes(r residency) *residency {
	n := len(d.freeRes)
	if n == 0 {
		q := new(residency)
		*q = r
		q.ver = 0
		return q
	}
	q := d.freeRes[n-1]
	d.freeRes[n-1] = nil
	d.freeRes = d.freeRes[:n-1]
	v := q.ver
	*q = r
	q.ver = v + 1
	return q
}

// addRes records a new residency r on its set and its kernel; lock held.
func (d *Device) addRes(r *residency) {
	k := r.k
	r.set.res = append(r.set.res, r)
	r.ki = len(k.res)
	k.res = append(k.res, r)
	if len(k.res) == 1 {
		k.rki = len(d.resKern)
		d.resKern = append(d.resKern, k)
	}
	d.nres++
	if r.base > 0 {
		k.ends.push(endMark{r.end, r, r.ver})
	}
}

// dropRes forgets residency r (its blocks have left the SMs); lock held.
func (d *Device) dropRes(r *residency) {
	k := r.k
	r.ver++ // its end marks are stale
	k.bwBase -= float64(r.n*r.set.n) * r.base
	last := k.res[len(k.res)-1]
	k.res[r.ki], last.ki = last, r.ki
	k.res[len(k.res)-1] = nil
	k.res = k.res[:len(k.res)-1]
	d.nres--
	d.freeRes = append(d.freeRes, r)
	if len(k.res) > 0 {
		return
	}
	k.bwBase, k.ends = 0, k.ends[:0]
	lastK := d.resKern[len(d.resKern)-1]
	d.resKern[k.rki], lastK.rki = lastK, k.rki
	d.resKern[len(d.resKern)-1] = nil
	d.resKern = d.resKern[:len(d.resKern)-1]
}

// setBase gives residency r a new base speed, its work left unchanged; lock held.
func (d *Device) setBase(r *residency, b float64) {
	k := r.k
	left := r.remaining()
	k.bwBase += float64(r.n*r.set.n) * (b - r.base)
	r.base, r.end = b, k.work+left/b
	r.ver++
	k.ends.push(endMark{r.end, r, r.ver})
	if len(k.ends) > 2*len(k.res)+32 {
		// mostly stale marks: start again from the residencies
		k.ends = k.ends[:0]
		for _, q := range k.res {
			if q.base > 0 {
				k.ends.push(endMark{q.end, q, q.ver})
			}
		}
	}
}
