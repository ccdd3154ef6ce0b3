package assign

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func BenchmarkDenseMaximize(b *testing.B) {
	for _, n := range []int{1000, 2048, 4096} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, uint64(n)))
			w := make([]float64, n*n)
			for k := range w {
				w[k] = r.Float64()
			}
			var s Dense
			for b.Loop() {
				if _, err := s.Maximize(w, n, n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// randomTopK approximates top-k lists of a uniform n×n matrix without
// drawing it: the k best of n uniform values lie in [1-k/n, 1].
func randomTopK(n, k int, seed uint64) *Candidates {
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	g := &Candidates{Rows: n, Cols: n, Start: make([]int, 1, n+1)}
	for i := 0; i < n; i++ {
		for c := 0; c < k; c++ {
			g.Col = append(g.Col, int32(r.IntN(n)))
			g.Weight = append(g.Weight, 1-r.Float64()*float64(k)/float64(n))
		}
		g.Start = append(g.Start, len(g.Col))
	}
	return g
}

func BenchmarkSparseTopK(b *testing.B) {
	g := randomTopK(20000, 64, 9)
	var s Sparse
	b.Run("n=20000,k=64,cold", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.MaxWeightMatching(g, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	m, err := s.MaxWeightMatching(g, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("n=20000,k=64,warm-same", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.MaxWeightMatching(g, &m.Prices); err != nil {
				b.Fatal(err)
			}
		}
	})
}
