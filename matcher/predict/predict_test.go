package predict

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/muxflow/muxflow/matcher/profile"
)

func ptr(v float64) *float64 { return &v }

// synthetic draws co-locations whose throughput follows a smooth rule the
// models can learn, with family names for cross-validation.
func synthetic(n int, seed uint64) []profile.Colocation {
	r := rand.New(rand.NewPCG(seed, 1))
	fams := []string{"f0", "f1", "f2", "f3"}
	prof := func() profile.Profile {
		return profile.Profile{Model: fams[r.IntN(len(fams))], GPUUtil: 100 * r.Float64(), MemBWUtil: 80 * r.Float64(),
			MemoryMiB: 1000 + 20000*r.Float64(), BatchSize: 32 << r.IntN(3), AMP: r.IntN(2) == 1}
	}
	tput := func(a, b profile.Profile) float64 {
		return 1 / math.Max(1, (a.GPUUtil+b.GPUUtil)/100) * (1 - 0.2*b.MemBWUtil/100)
	}
	out := make([]profile.Colocation, n)
	for i := range out {
		a, b := prof(), prof()
		out[i] = profile.Colocation{A: a, B: b, ANormTput: tput(a, b), BNormTput: tput(b, a)}
	}
	return out
}

func TestMLPTrainingReducesLoss(t *testing.T) {
	samples := Samples(synthetic(150, 1))
	for _, plain := range []bool{false, true} {
		m, losses, err := MLPTrainer{Hidden: []int{16, 16}, Epochs: 100, LearningRate: 3e-3, Seed: 3, Plain: plain, WeightDecay: 1e-5}.Train(samples)
		t.Logf("plain=%v losses %.4f %.4f %.4f", plain, losses[0], losses[len(losses)/2], losses[len(losses)-1])
		if err != nil {
			t.Fatal(err)
		}
		if len(losses) != 100 {
			t.Fatalf("%d epoch losses, want 100", len(losses))
		}
		if !(losses[len(losses)-1] < 0.5*losses[0]) {
			t.Errorf("plain=%v: loss went %.5f → %.5f; want at least halved", plain, losses[0], losses[len(losses)-1])
		}
		// Trained predictions beat the mean on held-out data of the same rule.
		test := Samples(synthetic(100, 2))
		mean, _ := MeanTrainer{}.Fit(samples)
		var pm, pb, truth []float64
		for _, s := range test {
			pm = append(pm, m.Predict(s.A, s.B))
			pb = append(pb, mean.Predict(s.A, s.B))
			truth = append(truth, s.Tput)
		}
		if MAE(pm, truth) >= MAE(pb, truth) {
			t.Errorf("plain=%v: MLP MAE %.4f not better than mean %.4f", plain, MAE(pm, truth), MAE(pb, truth))
		}
	}
}

func TestMLPFileRoundTrip(t *testing.T) {
	m, losses, err := MLPTrainer{Hidden: []int{8, 8}, Epochs: 5, Seed: 1}.Train(Samples(synthetic(40, 3)))
	if err != nil {
		t.Fatal(err)
	}
	meta := ModelMeta{Samples: 80, Epochs: 5, FinalLoss: losses[4], Source: "synthetic"}
	var buf bytes.Buffer
	if err := Save(&buf, m, meta); err != nil {
		t.Fatal(err)
	}
	got, gotMeta, err := Load(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(meta, gotMeta); diff != "" {
		t.Errorf("meta (-want +got):\n%s", diff)
	}
	for _, c := range synthetic(20, 4) {
		if a, b := m.Predict(c.A, c.B), got.Predict(c.A, c.B); a != b {
			t.Fatalf("prediction changed through the file: %v → %v", a, b)
		}
	}
	// Also through a real file, written atomically.
	path := t.TempDir() + "/model.json"
	if err := SaveFile(path, m, meta); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadFile(path); err != nil {
		t.Fatal(err)
	}
}

func TestLoadRejectsBadFiles(t *testing.T) {
	m, _, err := MLPTrainer{Hidden: []int{4}, Epochs: 1}.Train(Samples(synthetic(10, 5)))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Save(&buf, m, ModelMeta{}); err != nil {
		t.Fatal(err)
	}
	edit := func(f func(map[string]any)) string {
		var doc map[string]any
		if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		f(doc)
		out, _ := json.Marshal(doc)
		return string(out)
	}
	tests := []struct{ name, body, want string }{
		{"not json", "{", "unexpected EOF"},
		{"other format", edit(func(d map[string]any) { d["format"] = "onnx" }), `format "onnx"`},
		{"newer version", edit(func(d map[string]any) { d["version"] = 2 }), "version 2"},
		{"other kind", edit(func(d map[string]any) { d["kind"] = "gbdt" }), `kind "gbdt"`},
		{"other features", edit(func(d map[string]any) { d["features"] = []string{"x"} }), "trained on features"},
		{"bad sizes", edit(func(d map[string]any) { d["sizes"] = []int{3, 1} }), "layer sizes"},
		{"truncated weights", edit(func(d map[string]any) { d["weights"].([]any)[0] = []float64{1} }), "layer 0 has 1 weights"},
		{"zero std", edit(func(d map[string]any) { d["std"].([]any)[0] = 0 }), "standard deviation"},
		{"unknown field", edit(func(d map[string]any) { d["extra"] = 1 }), `unknown field "extra"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Load(strings.NewReader(tc.body))
			if !errors.Is(err, ErrBadModel) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrBadModel containing %q", err, tc.want)
			}
		})
	}
}

func TestMLPTrainerRejectsBadSettings(t *testing.T) {
	s := Samples(synthetic(5, 6))
	for _, tr := range []MLPTrainer{{Hidden: []int{0}}, {Hidden: []int{100000}}, {Epochs: -1}, {LearningRate: -1}} {
		if _, _, err := tr.Train(s); err == nil {
			t.Errorf("%+v: trained without error", tr)
		}
	}
	if _, _, err := (MLPTrainer{}).Train(nil); !errors.Is(err, ErrNoSamples) {
		t.Errorf("no samples: err = %v", err)
	}
	bad := s
	bad[0].Tput = math.NaN()
	if _, _, err := (MLPTrainer{Epochs: 1}).Train(bad); err == nil {
		t.Error("NaN throughput accepted")
	}
}

func TestAnalytic(t *testing.T) {
	light := profile.Profile{GPUUtil: 20, MemBWUtil: 5}
	heavy := profile.Profile{GPUUtil: 100, MemBWUtil: 80}
	a := Analytic{}
	tests := []struct {
		name    string
		x, y    profile.Profile
		lo, hi  float64
		cmpWith *[2]profile.Profile // prediction must be below this pair's
	}{
		{"two light jobs barely slow down", light, light, 0.95, 1.0, nil},
		{"heavy next to heavy halves", heavy, heavy, 0.45, 0.55, nil},
		{"heavy next to light slows less than next to heavy", heavy, light, 0.7, 1.0, nil},
		{"light next to heavy keeps most speed", light, heavy, 0.7, 1.0, &[2]profile.Profile{light, light}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := a.Predict(tc.x, tc.y)
			if p < tc.lo || p > tc.hi {
				t.Fatalf("Predict = %.3f, want within [%v, %v]", p, tc.lo, tc.hi)
			}
			if tc.cmpWith != nil && p >= a.Predict(tc.cmpWith[0], tc.cmpWith[1]) {
				t.Fatalf("Predict = %.3f not below %.3f", p, a.Predict(tc.cmpWith[0], tc.cmpWith[1]))
			}
		})
	}
	// SM activity, when both sides report it, replaces utilisation: a job
	// that is "busy" 100% of the time on 10% of the SMs leaves room.
	busyFew := profile.Profile{GPUUtil: 100, MemBWUtil: 10, SMActivity: ptr(10)}
	if p, q := a.Predict(busyFew, busyFew), a.Predict(heavy, heavy); p <= q {
		t.Errorf("SM-aware prediction %.3f should exceed utilisation-only %.3f", p, q)
	}
}

func TestLinearRecoversLinearRule(t *testing.T) {
	var s []Sample
	r := rand.New(rand.NewPCG(8, 9))
	for i := 0; i < 200; i++ {
		a := profile.Profile{GPUUtil: 100 * r.Float64(), MemBWUtil: 100 * r.Float64()}
		b := profile.Profile{GPUUtil: 100 * r.Float64(), MemBWUtil: 100 * r.Float64()}
		s = append(s, Sample{A: a, B: b, Tput: 1 - 0.3*b.GPUUtil/100 - 0.1*a.MemBWUtil/100})
	}
	p, err := LinearTrainer{Ridge: 1e-9}.Fit(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range s[:20] {
		if got := p.Predict(x.A, x.B); math.Abs(got-x.Tput) > 1e-3 {
			t.Fatalf("Predict = %v, want %v", got, x.Tput)
		}
	}
}

func TestMetrics(t *testing.T) {
	if got := MAE([]float64{1, 2, 3}, []float64{1, 3, 1}); got != 1 {
		t.Errorf("MAE = %v, want 1", got)
	}
	tests := []struct {
		x, y []float64
		want float64
	}{
		{[]float64{1, 2, 3, 4}, []float64{10, 20, 30, 40}, 1},
		{[]float64{1, 2, 3, 4}, []float64{4, 3, 2, 1}, -1},
		{[]float64{1, 2, 2, 3}, []float64{1, 2, 2, 3}, 1}, // ties averaged
		{[]float64{1, 2, 3}, []float64{1, 100, 1000}, 1},  // rank, not value
	}
	for _, tc := range tests {
		if got := Spearman(tc.x, tc.y); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Spearman(%v, %v) = %v, want %v", tc.x, tc.y, got, tc.want)
		}
	}
	if got := Spearman([]float64{1, 1}, []float64{1, 2}); !math.IsNaN(got) {
		t.Errorf("Spearman of a constant = %v, want NaN", got)
	}
}

func TestLeaveOneModelOut(t *testing.T) {
	recs := synthetic(120, 10)
	rep, err := LeaveOneModelOut(recs, LinearTrainer{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Folds) != 4 {
		t.Fatalf("%d folds, want one per family (4)", len(rep.Folds))
	}
	for _, f := range rep.Folds {
		// Every test sample involves the held-out family, every training
		// sample does not: sizes add up to all records, twice.
		if f.Train+f.Test != 2*len(recs) {
			t.Errorf("fold %s: %d train + %d test samples, want %d", f.Held, f.Train, f.Test, 2*len(recs))
		}
	}
	mean, err := LeaveOneModelOut(recs, MeanTrainer{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.MAE >= mean.MAE {
		t.Errorf("linear MAE %.4f not better than mean %.4f on a learnable rule", rep.MAE, mean.MAE)
	}
	recs[3].A.Model = ""
	if _, err := LeaveOneModelOut(recs, MeanTrainer{}); err == nil {
		t.Error("record without family accepted")
	}
}
