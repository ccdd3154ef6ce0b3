package muxmatch

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/muxflow/muxflow/matcher/profile"
)

// recorder appends the co-locations nodes report to a training CSV, once
// each: muxd reports every co-location since it started, so the same record
// arrives round after round.
type recorder struct {
	path string
	seen map[[32]byte]bool
}

func newRecorder(path string) (*recorder, error) {
	r := &recorder{path: path, seen: map[[32]byte]bool{}}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open record file: %w", err)
	}
	defer f.Close()
	recs, err := profile.ReadCSV(f)
	if err != nil {
		return nil, fmt.Errorf("record file %s: %w", path, err)
	}
	for _, c := range recs {
		r.seen[keyOf(c)] = true
	}
	return r, nil
}

// keyOf identifies a record by the fields the CSV keeps (not its time,
// which the CSV does not carry).
func keyOf(c profile.Colocation) [32]byte {
	b, _ := json.Marshal(struct {
		A, B   profile.Profile
		TA, TB float64
		GPU    string
	}{c.A, c.B, c.ANormTput, c.BNormTput, c.GPUType})
	return sha256.Sum256(b)
}

// add appends the new records among reports' co-locations and returns how
// many it wrote.
func (r *recorder) add(reports []profile.NodeReport) (int, error) {
	var fresh []profile.Colocation
	for _, rep := range reports {
		for _, c := range rep.Colocations {
			k := keyOf(c)
			if !r.seen[k] {
				r.seen[k] = true
				fresh = append(fresh, c)
			}
		}
	}
	if len(fresh) == 0 {
		return 0, nil
	}
	_, statErr := os.Stat(r.path)
	f, err := os.OpenFile(r.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, fmt.Errorf("open record file: %w", err)
	}
	write := profile.WriteCSVRows
	if errors.Is(statErr, fs.ErrNotExist) {
		write = profile.WriteCSV
	}
	if err := write(f, fresh); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("write record file: %w", err)
	}
	return len(fresh), nil
}
