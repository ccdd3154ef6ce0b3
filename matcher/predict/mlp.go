package predict

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/muxflow/muxflow/matcher/profile"
)

// MLP is a fully connected ReLU network over standardised Features with one
// linear output, the normalised throughput.
type MLP struct {
	// Sizes are the layer widths, input first, 1 last.
	Sizes []int
	// W[l] is the Sizes[l+1]×Sizes[l] weight matrix of layer l, row-major;
	// B[l] its biases.
	W, B [][]float64
	// Mean and Std standardise the inputs (Std is never 0).
	Mean, Std []float64
	// Residual networks predict a correction added to the analytic model.
	Residual bool
}

// Name implements Predictor.
func (m *MLP) Name() string { return fmt.Sprintf("mlp%v", m.Sizes[1:len(m.Sizes)-1]) }

// Predict implements Predictor.
func (m *MLP) Predict(a, b profile.Profile) float64 {
	f := Features(a, b)
	base := m.base(f)
	return clampTput(base + m.forward(m.standardise(f), nil))
}

// base is what the network's output is added to: the analytic estimate for
// residual networks (the last feature, read before standardising), else 0.
func (m *MLP) base(f []float64) float64 {
	if m.Residual {
		return f[len(f)-1]
	}
	return 0
}

func (m *MLP) standardise(f []float64) []float64 {
	for i := range f {
		f[i] = (f[i] - m.Mean[i]) / m.Std[i]
	}
	return f
}

// forward runs the network on x; when acts is not nil it receives every
// layer's output (post-ReLU for hidden layers) for backpropagation.
func (m *MLP) forward(x []float64, acts [][]float64) float64 {
	in := x
	for l := range m.W {
		rows, cols := m.Sizes[l+1], m.Sizes[l]
		var out []float64
		if acts != nil {
			out = acts[l+1][:rows]
		} else {
			out = make([]float64, rows)
		}
		w := m.W[l]
		last := l == len(m.W)-1
		for r := 0; r < rows; r++ {
			sum := m.B[l][r]
			wr := w[r*cols : (r+1)*cols]
			for c, v := range in[:cols] {
				sum += wr[c] * v
			}
			if !last && sum < 0 {
				sum = 0
			}
			out[r] = sum
		}
		in = out
	}
	return in[0]
}

// MLPTrainer fits an MLP with mini-batch Adam on mean squared error.
type MLPTrainer struct {
	// Hidden are the hidden layer widths; default 4 × 64 as in MuxFlow.
	Hidden []int
	// Epochs over the data; default 40 (longer runs overfit the few hundred
	// co-locations of a small cluster: see the package report).
	Epochs int
	// BatchSize of each step; default 32.
	BatchSize int
	// LearningRate of Adam; default 1e-3.
	LearningRate float64
	// WeightDecay (L2 on weights); default 1e-2, which pulls the residual
	// network towards the analytic prior when data say little.
	WeightDecay float64
	// Seed makes training reproducible.
	Seed uint64
	// Plain trains the network on the throughput itself instead of a
	// correction to the analytic model.
	Plain bool
	// OnEpoch, when set, sees each epoch's mean training loss.
	OnEpoch func(epoch int, loss float64)
}

func (t MLPTrainer) withDefaults() MLPTrainer {
	if len(t.Hidden) == 0 {
		t.Hidden = []int{64, 64, 64, 64}
	}
	if t.Epochs == 0 {
		t.Epochs = 40
	}
	if t.BatchSize == 0 {
		t.BatchSize = 32
	}
	if t.LearningRate == 0 {
		t.LearningRate = 1e-3
	}
	if t.WeightDecay == 0 {
		t.WeightDecay = 1e-2
	}
	return t
}

// Fit implements Trainer.
func (t MLPTrainer) Fit(s []Sample) (Predictor, error) {
	m, _, err := t.Train(s)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Train fits a network and returns it with the mean loss of every epoch.
func (t MLPTrainer) Train(s []Sample) (*MLP, []float64, error) {
	t = t.withDefaults()
	if len(s) == 0 {
		return nil, nil, ErrNoSamples
	}
	for _, h := range t.Hidden {
		if h <= 0 || h > 4096 {
			return nil, nil, fmt.Errorf("hidden layer width %d must be within 1..4096", h)
		}
	}
	if t.Epochs < 0 || t.BatchSize < 0 || !(t.LearningRate > 0) || t.WeightDecay < 0 {
		return nil, nil, fmt.Errorf("invalid training settings %+v", t)
	}
	nf := len(FeatureNames)
	xs := make([][]float64, len(s))
	ys := make([]float64, len(s))
	for i, x := range s {
		if math.IsNaN(x.Tput) || math.IsInf(x.Tput, 0) {
			return nil, nil, fmt.Errorf("sample %d has throughput %v", i, x.Tput)
		}
	}
	m := &MLP{Sizes: append(append([]int{nf}, t.Hidden...), 1), Mean: make([]float64, nf), Std: make([]float64, nf), Residual: !t.Plain}
	for i, x := range s {
		xs[i] = Features(x.A, x.B)
		ys[i] = x.Tput - m.base(xs[i])
	}
	for _, x := range xs {
		for i, v := range x {
			m.Mean[i] += v / float64(len(xs))
		}
	}
	for _, x := range xs {
		for i, v := range x {
			m.Std[i] += (v - m.Mean[i]) * (v - m.Mean[i]) / float64(len(xs))
		}
	}
	for i := range m.Std {
		// A constant feature (SM activity nobody measured) carries no
		// information; dividing by 1 keeps it harmless.
		if m.Std[i] = math.Sqrt(m.Std[i]); m.Std[i] < 1e-9 {
			m.Std[i] = 1
		}
	}
	for _, x := range xs {
		m.standardise(x)
	}
	r := rand.New(rand.NewPCG(t.Seed, 0x6d7578))
	for l := 0; l+1 < len(m.Sizes); l++ {
		in, out := m.Sizes[l], m.Sizes[l+1]
		w := make([]float64, in*out)
		std := math.Sqrt(2 / float64(in)) // He initialisation for ReLU
		for k := range w {
			w[k] = r.NormFloat64() * std
		}
		m.W = append(m.W, w)
		m.B = append(m.B, make([]float64, out))
	}
	opt := newAdam(m, t.LearningRate)
	acts := make([][]float64, len(m.Sizes))
	deltas := make([][]float64, len(m.Sizes))
	for l, n := range m.Sizes {
		acts[l] = make([]float64, n)
		deltas[l] = make([]float64, n)
	}
	order := make([]int, len(xs))
	for i := range order {
		order[i] = i
	}
	losses := make([]float64, 0, t.Epochs)
	for ep := 0; ep < t.Epochs; ep++ {
		r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		total := 0.0
		for b0 := 0; b0 < len(order); b0 += t.BatchSize {
			batch := order[b0:min(b0+t.BatchSize, len(order))]
			opt.zero()
			for _, idx := range batch {
				acts[0] = xs[idx]
				pred := m.forward(xs[idx], acts)
				err := pred - ys[idx]
				total += err * err
				m.backward(acts, deltas, 2*err/float64(len(batch)), opt)
			}
			opt.step(m, t.WeightDecay)
		}
		loss := total / float64(len(xs))
		losses = append(losses, loss)
		if t.OnEpoch != nil {
			t.OnEpoch(ep, loss)
		}
	}
	return m, losses, nil
}

// backward accumulates the gradients of one sample whose output gradient is
// g into opt.
func (m *MLP) backward(acts, deltas [][]float64, g float64, opt *adam) {
	L := len(m.W)
	deltas[L][0] = g
	for l := L - 1; l >= 0; l-- {
		rows, cols := m.Sizes[l+1], m.Sizes[l]
		d := deltas[l+1][:rows]
		in := acts[l][:cols]
		gw, gb := opt.gw[l], opt.gb[l]
		for r, dr := range d {
			if dr == 0 {
				continue
			}
			gb[r] += dr
			row := gw[r*cols : (r+1)*cols]
			for c, v := range in {
				row[c] += dr * v
			}
		}
		if l == 0 {
			break
		}
		prev := deltas[l][:cols]
		clear(prev)
		w := m.W[l]
		for r, dr := range d {
			if dr == 0 {
				continue
			}
			wr := w[r*cols : (r+1)*cols]
			for c := range prev {
				prev[c] += wr[c] * dr
			}
		}
		for c := range prev {
			if in[c] <= 0 { // ReLU gate: the unit was off
				prev[c] = 0
			}
		}
	}
}

// adam holds gradients and Adam moments shaped like the network.
type adam struct {
	gw, gb, mw, mb, vw, vb [][]float64
	lr                     float64
	t                      int
}

func newAdam(m *MLP, lr float64) *adam {
	a := &adam{lr: lr}
	for l := range m.W {
		for _, p := range []*[][]float64{&a.gw, &a.mw, &a.vw} {
			*p = append(*p, make([]float64, len(m.W[l])))
		}
		for _, p := range []*[][]float64{&a.gb, &a.mb, &a.vb} {
			*p = append(*p, make([]float64, len(m.B[l])))
		}
	}
	return a
}

func (a *adam) zero() {
	for l := range a.gw {
		clear(a.gw[l])
		clear(a.gb[l])
	}
}

func (a *adam) step(m *MLP, decay float64) {
	const b1, b2, eps = 0.9, 0.999, 1e-8
	a.t++
	c1 := 1 - math.Pow(b1, float64(a.t))
	c2 := 1 - math.Pow(b2, float64(a.t))
	upd := func(p, g, mo, ve []float64, wd float64) {
		for k := range p {
			gk := g[k] + wd*p[k]
			mo[k] = b1*mo[k] + (1-b1)*gk
			ve[k] = b2*ve[k] + (1-b2)*gk*gk
			p[k] -= a.lr * (mo[k] / c1) / (math.Sqrt(ve[k]/c2) + eps)
		}
	}
	for l := range m.W {
		upd(m.W[l], a.gw[l], a.mw[l], a.vw[l], decay)
		upd(m.B[l], a.gb[l], a.mb[l], a.vb[l], 0)
	}
}
