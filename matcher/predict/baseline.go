package predict

import (
	"errors"
	"fmt"
	"math"

	"github.com/muxflow/muxflow/matcher/profile"
)

// ErrNoSamples is returned when a trainer gets nothing to learn from.
var ErrNoSamples = errors.New("no training samples")

// Mean predicts the training mean for every pair: the floor any model must
// beat.
type Mean struct{ Value float64 }

// Name implements Predictor.
func (Mean) Name() string { return "mean" }

// Predict implements Predictor.
func (m Mean) Predict(_, _ profile.Profile) float64 { return m.Value }

// MeanTrainer fits Mean.
type MeanTrainer struct{}

// Fit implements Trainer.
func (MeanTrainer) Fit(s []Sample) (Predictor, error) {
	if len(s) == 0 {
		return nil, ErrNoSamples
	}
	sum := 0.0
	for _, x := range s {
		sum += x.Tput
	}
	return Mean{Value: sum / float64(len(s))}, nil
}

// Linear is least-squares linear regression over Features.
type Linear struct {
	Coef      []float64
	Intercept float64
}

// Name implements Predictor.
func (Linear) Name() string { return "linear" }

// Predict implements Predictor.
func (m Linear) Predict(a, b profile.Profile) float64 {
	y := m.Intercept
	for i, x := range Features(a, b) {
		y += m.Coef[i] * x
	}
	return clampTput(y)
}

// LinearTrainer fits Linear by ridge-regularised normal equations; the
// small ridge keeps constant features (unknown SM activity) from making the
// system singular.
type LinearTrainer struct{ Ridge float64 }

// Fit implements Trainer.
func (t LinearTrainer) Fit(s []Sample) (Predictor, error) {
	if len(s) == 0 {
		return nil, ErrNoSamples
	}
	ridge := t.Ridge
	if ridge == 0 {
		ridge = 1e-6
	}
	p := len(FeatureNames) + 1
	ata := make([]float64, p*p)
	atb := make([]float64, p)
	for _, x := range s {
		f := append(Features(x.A, x.B), 1)
		for i := 0; i < p; i++ {
			atb[i] += f[i] * x.Tput
			for j := 0; j < p; j++ {
				ata[i*p+j] += f[i] * f[j]
			}
		}
	}
	for i := 0; i < p-1; i++ {
		ata[i*p+i] += ridge * float64(len(s))
	}
	coef, err := solveSPD(ata, atb, p)
	if err != nil {
		return nil, fmt.Errorf("linear regression: %w", err)
	}
	return Linear{Coef: coef[:p-1], Intercept: coef[p-1]}, nil
}

// solveSPD solves A x = b for a symmetric positive definite A by Cholesky.
func solveSPD(a, b []float64, n int) ([]float64, error) {
	l := make([]float64, n*n)
	for i := 0; i < n; i++ {
		for j := 0; j <= i; j++ {
			sum := a[i*n+j]
			for k := 0; k < j; k++ {
				sum -= l[i*n+k] * l[j*n+k]
			}
			if i == j {
				if sum <= 0 {
					return nil, errors.New("normal equations are not positive definite")
				}
				l[i*n+i] = math.Sqrt(sum)
			} else {
				l[i*n+j] = sum / l[j*n+j]
			}
		}
	}
	y := make([]float64, n)
	for i := 0; i < n; i++ {
		sum := b[i]
		for k := 0; k < i; k++ {
			sum -= l[i*n+k] * y[k]
		}
		y[i] = sum / l[i*n+i]
	}
	x := make([]float64, n)
	for i := n - 1; i >= 0; i-- {
		sum := y[i]
		for k := i + 1; k < n; k++ {
			sum -= l[k*n+i] * x[k]
		}
		x[i] = sum / l[i*n+i]
	}
	return x, nil
}
