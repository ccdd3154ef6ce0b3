// Package dataset loads the public measurements the matcher learns from and
// is judged on: the Lucid co-location pairs (solo profiles and normalised
// throughputs of DL training jobs sharing a GPU) and the Alibaba GPU cluster
// trace, both under ../shared/data relative to the repository root.
package dataset

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/muxflow/muxflow/matcher/profile"
)

// ErrNoData is returned when the shared data folder is missing.
var ErrNoData = errors.New("shared data not found")

// RepoRoot walks up from the working directory to the folder holding go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// SharedDir returns ../shared/data/<name> relative to the repository root,
// or ErrNoData naming the path when it is absent.
func SharedDir(name string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "..", "shared", "data", name)
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("%w: %s (the matcher's tests and benchmarks read it; see shared/data/README.md)", ErrNoData, dir)
	}
	return dir, nil
}

// table reads a CSV with a header into rows addressed by column name.
type table struct {
	col  map[string]int
	rows [][]string
	name string
}

func readTable(path string, required ...string) (*table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	cr := csv.NewReader(f)
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("read %s header: %w", path, err)
	}
	t := &table{col: map[string]int{}, name: filepath.Base(path)}
	for i, h := range header {
		t.col[strings.TrimSpace(h)] = i
	}
	for _, r := range required {
		if _, ok := t.col[r]; !ok {
			return nil, fmt.Errorf("%s lacks column %q", path, r)
		}
	}
	for {
		row, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		t.rows = append(t.rows, row)
	}
	return t, nil
}

func (t *table) str(row []string, name string) string { return strings.TrimSpace(row[t.col[name]]) }

func (t *table) float(i int, name string) (float64, error) {
	s := t.str(t.rows[i], name)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%s line %d column %s: %q is not a number", t.name, i+2, name, s)
	}
	return v, nil
}

// LucidKey names one job configuration of the Lucid data.
type LucidKey struct {
	Model, Dataset string
	BatchSize      int
	AMP            bool
}

func (k LucidKey) String() string {
	amp := ""
	if k.AMP {
		amp = "/amp"
	}
	return fmt.Sprintf("%s/%s/bs%d%s", k.Model, k.Dataset, k.BatchSize, amp)
}

// Lucid is the lucid-colocation data: solo profiles by configuration and the
// measured pairs as co-location records.
type Lucid struct {
	Solo  map[LucidKey]profile.Profile
	Pairs []profile.Colocation
}

// LoadLucid reads solo.csv and pairs.csv from dir (see shared/data/README.md).
// Pairs whose configurations lack a solo profile are an error: silently
// dropping them would bias every evaluation.
func LoadLucid(dir string) (*Lucid, error) {
	solo, err := readTable(filepath.Join(dir, "solo.csv"), "model", "dataset", "batchsize", "amp", "speed", "gpu_util", "gmem_util", "gmem")
	if err != nil {
		return nil, err
	}
	out := &Lucid{Solo: map[LucidKey]profile.Profile{}}
	for i := range solo.rows {
		k, err := lucidKey(solo, i, "model", "dataset", "batchsize", "amp")
		if err != nil {
			return nil, err
		}
		var p profile.Profile
		p.Name, p.Model, p.AMP, p.BatchSize = k.String(), k.Model, k.AMP, k.BatchSize
		for _, f := range []struct {
			col string
			dst *float64
		}{{"speed", &p.Speed}, {"gpu_util", &p.GPUUtil}, {"gmem_util", &p.MemBWUtil}, {"gmem", &p.MemoryMiB}} {
			if *f.dst, err = solo.float(i, f.col); err != nil {
				return nil, err
			}
		}
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("solo.csv line %d: %w", i+2, err)
		}
		out.Solo[k] = p
	}
	pairs, err := readTable(filepath.Join(dir, "pairs.csv"), "model1", "dataset1", "batchsize1", "amp1", "speed1",
		"model2", "dataset2", "batchsize2", "amp2", "speed2")
	if err != nil {
		return nil, err
	}
	for i := range pairs.rows {
		k1, err := lucidKey(pairs, i, "model1", "dataset1", "batchsize1", "amp1")
		if err != nil {
			return nil, err
		}
		k2, err := lucidKey(pairs, i, "model2", "dataset2", "batchsize2", "amp2")
		if err != nil {
			return nil, err
		}
		a, ok1 := out.Solo[k1]
		b, ok2 := out.Solo[k2]
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("pairs.csv line %d: no solo profile for %v or %v", i+2, k1, k2)
		}
		c := profile.Colocation{A: a, B: b}
		if c.ANormTput, err = pairs.float(i, "speed1"); err != nil {
			return nil, err
		}
		if c.BNormTput, err = pairs.float(i, "speed2"); err != nil {
			return nil, err
		}
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("pairs.csv line %d: %w", i+2, err)
		}
		out.Pairs = append(out.Pairs, c)
	}
	return out, nil
}

func lucidKey(t *table, i int, model, ds, bs, amp string) (LucidKey, error) {
	row := t.rows[i]
	b, err := strconv.Atoi(t.str(row, bs))
	if err != nil {
		return LucidKey{}, fmt.Errorf("%s line %d column %s: %q is not an integer", t.name, i+2, bs, t.str(row, bs))
	}
	a := t.str(row, amp)
	if a != "0" && a != "1" {
		return LucidKey{}, fmt.Errorf("%s line %d column %s: %q is not 0 or 1", t.name, i+2, amp, a)
	}
	return LucidKey{Model: t.str(row, model), Dataset: t.str(row, ds), BatchSize: b, AMP: a == "1"}, nil
}

// DataDir returns <base>/<name> when base is given (muxmatch --data), else SharedDir(name);
// either way ErrNoData names the path when it is absent.
func DataDir(base, name string) (string, error) {
	if base == "" {
		return SharedDir(name)
	}
	dir := filepath.Join(base, name)
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("%w: %s (--data names the folder holding %s/)", ErrNoData, dir, name)
	}
	return dir, nil
}
