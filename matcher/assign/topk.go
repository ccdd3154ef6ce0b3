package assign

import (
	"math"
	"slices"
)

// TopK appends to dst the indices of the k largest positive finite values of
// w, best first, and returns it. It is how the scalable mode turns one job's
// predicted weights over all GPUs into a short candidate list.
func TopK(dst []int32, w []float64, k int) []int32 {
	if k <= 0 {
		return dst
	}
	base := len(dst)
	// A size-k min-heap of indices keyed by weight: a value enters only when
	// it beats the smallest kept, so most of a long row costs one compare.
	h := dst
	for j, x := range w {
		if !(x > 0) || math.IsInf(x, 1) {
			continue
		}
		if len(h)-base < k {
			h = append(h, int32(j))
			siftUp(h[base:], w, len(h)-base-1)
			continue
		}
		if x <= w[h[base]] {
			continue
		}
		h[base] = int32(j)
		siftDown(h[base:], w, 0)
	}
	top := h[base:]
	slices.SortFunc(top, func(a, b int32) int {
		switch {
		case w[a] > w[b]:
			return -1
		case w[a] < w[b]:
			return 1
		}
		return int(a - b)
	})
	return h
}

func siftUp(h []int32, w []float64, k int) {
	for k > 0 {
		p := (k - 1) / 2
		if w[h[p]] <= w[h[k]] {
			return
		}
		h[p], h[k] = h[k], h[p]
		k = p
	}
}

func siftDown(h []int32, w []float64, k int) {
	n := len(h)
	for {
		c := 2*k + 1
		if c >= n {
			return
		}
		if c+1 < n && w[h[c+1]] < w[h[c]] {
			c++
		}
		if w[h[k]] <= w[h[c]] {
			return
		}
		h[k], h[c] = h[c], h[k]
		k = c
	}
}
