package predict

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"
)

// File format identity. Bump FileVersion on any incompatible change; Load
// refuses versions it does not know rather than guessing.
const (
	FileFormat  = "muxflow.predictor"
	FileVersion = 1
)

// ErrBadModel classifies model files that cannot be used.
var ErrBadModel = errors.New("unusable model file")

// modelFile is the JSON form of a trained MLP.
type modelFile struct {
	Format   string      `json:"format"`
	Version  int         `json:"version"`
	Kind     string      `json:"kind"`
	Features []string    `json:"features"`
	Sizes    []int       `json:"sizes"`
	Mean     []float64   `json:"mean"`
	Std      []float64   `json:"std"`
	Weights  [][]float64 `json:"weights"`
	Biases   [][]float64 `json:"biases"`
	Residual bool        `json:"residual"`
	Meta     ModelMeta   `json:"meta"`
}

// ModelMeta records how a model was trained.
type ModelMeta struct {
	TrainedAt time.Time `json:"trained_at,omitzero"`
	Samples   int       `json:"samples"`
	Epochs    int       `json:"epochs"`
	FinalLoss float64   `json:"final_loss"`
	Source    string    `json:"source,omitempty"`
}

// Save writes m as a versioned model file.
func Save(w io.Writer, m *MLP, meta ModelMeta) error {
	f := modelFile{Format: FileFormat, Version: FileVersion, Kind: "mlp", Features: FeatureNames,
		Sizes: m.Sizes, Mean: m.Mean, Std: m.Std, Weights: m.W, Biases: m.B, Residual: m.Residual, Meta: meta}
	enc := json.NewEncoder(w)
	if err := enc.Encode(f); err != nil {
		return fmt.Errorf("write model: %w", err)
	}
	return nil
}

// SaveFile writes m to path atomically (a reader never sees half a model).
func SaveFile(path string, m *MLP, meta ModelMeta) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("create model file: %w", err)
	}
	if err := Save(f, m, meta); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write model file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("install model file: %w", err)
	}
	return nil
}

// Load reads a model file and checks that it is complete and consistent.
func Load(r io.Reader) (*MLP, ModelMeta, error) {
	var f modelFile
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, ModelMeta{}, fmt.Errorf("%w: %v", ErrBadModel, err)
	}
	if f.Format != FileFormat {
		return nil, ModelMeta{}, fmt.Errorf("%w: format %q, want %q", ErrBadModel, f.Format, FileFormat)
	}
	if f.Version != FileVersion {
		return nil, ModelMeta{}, fmt.Errorf("%w: version %d, this muxmatch reads version %d", ErrBadModel, f.Version, FileVersion)
	}
	if f.Kind != "mlp" {
		return nil, ModelMeta{}, fmt.Errorf("%w: kind %q, want mlp", ErrBadModel, f.Kind)
	}
	if !slices.Equal(f.Features, FeatureNames) {
		return nil, ModelMeta{}, fmt.Errorf("%w: trained on features %v, this muxmatch computes %v", ErrBadModel, f.Features, FeatureNames)
	}
	n := len(FeatureNames)
	if len(f.Sizes) < 2 || f.Sizes[0] != n || f.Sizes[len(f.Sizes)-1] != 1 {
		return nil, ModelMeta{}, fmt.Errorf("%w: layer sizes %v must run from %d inputs to 1 output", ErrBadModel, f.Sizes, n)
	}
	if len(f.Weights) != len(f.Sizes)-1 || len(f.Biases) != len(f.Sizes)-1 || len(f.Mean) != n || len(f.Std) != n {
		return nil, ModelMeta{}, fmt.Errorf("%w: parameter lists do not match layer sizes %v", ErrBadModel, f.Sizes)
	}
	for l := range f.Weights {
		if f.Sizes[l+1] <= 0 || len(f.Weights[l]) != f.Sizes[l]*f.Sizes[l+1] || len(f.Biases[l]) != f.Sizes[l+1] {
			return nil, ModelMeta{}, fmt.Errorf("%w: layer %d has %d weights and %d biases for %d×%d", ErrBadModel, l, len(f.Weights[l]), len(f.Biases[l]), f.Sizes[l+1], f.Sizes[l])
		}
	}
	for _, vs := range append(append([][]float64{f.Mean, f.Std}, f.Weights...), f.Biases...) {
		for _, v := range vs {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, ModelMeta{}, fmt.Errorf("%w: non-finite parameter", ErrBadModel)
			}
		}
	}
	for _, s := range f.Std {
		if s <= 0 {
			return nil, ModelMeta{}, fmt.Errorf("%w: non-positive standard deviation", ErrBadModel)
		}
	}
	return &MLP{Sizes: f.Sizes, W: f.Weights, B: f.Biases, Mean: f.Mean, Std: f.Std, Residual: f.Residual}, f.Meta, nil
}

// LoadFile reads a model file from path.
func LoadFile(path string) (*MLP, ModelMeta, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, ModelMeta{}, fmt.Errorf("open model: %w", err)
	}
	defer f.Close()
	m, meta, err := Load(f)
	if err != nil {
		return nil, ModelMeta{}, fmt.Errorf("%s: %w", path, err)
	}
	return m, meta, nil
}
