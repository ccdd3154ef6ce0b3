package profile

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// CSVHeader is the column list of the co-location CSV that `muxmatch train`
// reads and `muxmatch import-lucid` writes: one co-location per row, A's solo
// profile, B's solo profile, then both measured normalised throughputs.
// Columns may come in any order; every one must be present (sm_activity,
// name, model, speed and gpu_type may be empty).
var CSVHeader = []string{
	"a_name", "a_model", "a_gpu_util", "a_mem_bw_util", "a_memory_mib", "a_sm_activity", "a_amp", "a_batch_size", "a_speed",
	"b_name", "b_model", "b_gpu_util", "b_mem_bw_util", "b_memory_mib", "b_sm_activity", "b_amp", "b_batch_size", "b_speed",
	"a_norm_tput", "b_norm_tput", "gpu_type",
}

// WriteCSV writes records in the CSVHeader format, header first.
func WriteCSV(w io.Writer, recs []Colocation) error {
	return writeCSV(w, recs, true)
}

// WriteCSVRows writes records without the header, to append to a file that
// has one.
func WriteCSVRows(w io.Writer, recs []Colocation) error {
	return writeCSV(w, recs, false)
}

func writeCSV(w io.Writer, recs []Colocation, header bool) error {
	cw := csv.NewWriter(w)
	if header {
		if err := cw.Write(CSVHeader); err != nil {
			return fmt.Errorf("write csv header: %w", err)
		}
	}
	for i, c := range recs {
		row := append(profileFields(c.A), profileFields(c.B)...)
		row = append(row, fmtFloat(c.ANormTput), fmtFloat(c.BNormTput), c.GPUType)
		if err := cw.Write(row); err != nil {
			return fmt.Errorf("write csv record %d: %w", i, err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	return nil
}

func profileFields(p Profile) []string {
	sm := ""
	if p.SMActivity != nil {
		sm = fmtFloat(*p.SMActivity)
	}
	amp := "0"
	if p.AMP {
		amp = "1"
	}
	return []string{p.Name, p.Model, fmtFloat(p.GPUUtil), fmtFloat(p.MemBWUtil), fmtFloat(p.MemoryMiB), sm, amp,
		strconv.Itoa(p.BatchSize), fmtFloat(p.Speed)}
}

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// ReadCSV parses co-location records in the CSVHeader format and validates
// each. Errors name the line and column.
func ReadCSV(r io.Reader) ([]Colocation, error) {
	cr := csv.NewReader(r)
	cr.TrimLeadingSpace = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: empty co-location csv (want header %s)", ErrInvalid, strings.Join(CSVHeader, ","))
	}
	if err != nil {
		return nil, fmt.Errorf("read csv header: %w", err)
	}
	col := make(map[string]int, len(header))
	for i, h := range header {
		h = strings.TrimSpace(h)
		if _, dup := col[h]; dup {
			return nil, fmt.Errorf("%w: csv header repeats column %q", ErrInvalid, h)
		}
		col[h] = i
	}
	known := make(map[string]bool, len(CSVHeader))
	for _, h := range CSVHeader {
		known[h] = true
		if _, ok := col[h]; !ok {
			return nil, fmt.Errorf("%w: csv header lacks column %q", ErrInvalid, h)
		}
	}
	for _, h := range header {
		if !known[strings.TrimSpace(h)] {
			return nil, fmt.Errorf("%w: csv header has unknown column %q", ErrInvalid, h)
		}
	}
	var out []Colocation
	for {
		row, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		line, _ := cr.FieldPos(0)
		if err != nil {
			return nil, fmt.Errorf("read csv: %w", err)
		}
		p := rowParser{row: row, col: col, line: line}
		c := Colocation{
			A:         p.profile("a_"),
			B:         p.profile("b_"),
			ANormTput: p.float("a_norm_tput"),
			BNormTput: p.float("b_norm_tput"),
			GPUType:   p.str("gpu_type"),
		}
		if p.err != nil {
			return nil, p.err
		}
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("csv line %d: %w", line, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// rowParser keeps the first error so a row is parsed in one readable block.
type rowParser struct {
	row  []string
	col  map[string]int
	line int
	err  error
}

func (p *rowParser) str(name string) string { return strings.TrimSpace(p.row[p.col[name]]) }

func (p *rowParser) fail(name, v, want string) {
	if p.err == nil {
		p.err = fmt.Errorf("%w: csv line %d column %s: %q is not %s", ErrInvalid, p.line, name, v, want)
	}
}

func (p *rowParser) float(name string) float64 {
	s := p.str(name)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		p.fail(name, s, "a number")
	}
	return v
}

func (p *rowParser) optFloat(name string, def float64) float64 {
	if p.str(name) == "" {
		return def
	}
	return p.float(name)
}

func (p *rowParser) profile(prefix string) Profile {
	pr := Profile{
		Name:      p.str(prefix + "name"),
		Model:     p.str(prefix + "model"),
		GPUUtil:   p.float(prefix + "gpu_util"),
		MemBWUtil: p.float(prefix + "mem_bw_util"),
		MemoryMiB: p.float(prefix + "memory_mib"),
		Speed:     p.optFloat(prefix+"speed", 0),
	}
	if s := p.str(prefix + "sm_activity"); s != "" {
		v := p.float(prefix + "sm_activity")
		pr.SMActivity = &v
	}
	switch s := strings.ToLower(p.str(prefix + "amp")); s {
	case "1", "true":
		pr.AMP = true
	case "0", "false", "":
	default:
		p.fail(prefix+"amp", s, "0, 1, true or false")
	}
	if s := p.str(prefix + "batch_size"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			p.fail(prefix+"batch_size", s, "an integer")
		}
		pr.BatchSize = n
	}
	return pr
}
