// Package testvec reads the test vectors that the C and the Go side of one rule share
// (testdata/*.vec at the repository root; the format is in testdata/README.md). The C
// tests read the same files with hook/native/tests/vec.h, so a case written once checks
// both languages.
package testvec

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Line is one line of a record: a key and its values, unquoted.
type Line struct {
	Key  string
	Vals []string
	// At is "file:line", for messages.
	At string
}

// Record is a group of lines, ended by a blank line or the end of the file.
type Record struct {
	Lines []Line
	// At is where the record starts, "file:line".
	At string
}

// Get returns the values of the first line with key.
func (r Record) Get(key string) ([]string, bool) {
	for _, l := range r.Lines {
		if l.Key == key {
			return l.Vals, true
		}
	}
	return nil, false
}

// Str returns the first value of key, or def when the record has no such line.
func (r Record) Str(key, def string) string {
	if v, ok := r.Get(key); ok && len(v) > 0 {
		return v[0]
	}
	return def
}

// Has says whether the record has a line with key.
func (r Record) Has(key string) bool {
	_, ok := r.Get(key)
	return ok
}

// Int returns the first value of key as an int64; a missing or malformed value fails t.
func (r Record) Int(t testing.TB, key string) int64 {
	t.Helper()
	s := r.Str(key, "")
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s: %s: %q is not an integer", r.At, key, s)
	}
	return v
}

// Kind is the key of the record's first line, which says what the record is.
func (r Record) Kind() string {
	if len(r.Lines) == 0 {
		return ""
	}
	return r.Lines[0].Key
}

// Name is the first value of the record's first line (by convention its name).
func (r Record) Name() string {
	if len(r.Lines) == 0 || len(r.Lines[0].Vals) == 0 {
		return ""
	}
	return r.Lines[0].Vals[0]
}

// Path is the absolute path of testdata/<name> at the repository root.
func Path(name string) string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "..", "..", "testdata", name)
}

// Load reads testdata/<name>; any error fails t.
func Load(t testing.TB, name string) []Record {
	t.Helper()
	data, err := os.ReadFile(Path(name))
	if err != nil {
		t.Fatalf("testvec: %v", err)
	}
	recs, err := Parse(name, data)
	if err != nil {
		t.Fatalf("testvec: %v", err)
	}
	if len(recs) == 0 {
		t.Fatalf("testvec: %s holds no record", name)
	}
	return recs
}

// Lines returns every line with key, across all records, in file order.
func Lines(recs []Record, key string) []Line {
	var out []Line
	for _, r := range recs {
		for _, l := range r.Lines {
			if l.Key == key {
				out = append(out, l)
			}
		}
	}
	return out
}

// Parse reads the vector format: records separated by blank lines; lines starting with
// '#' are comments; every other line is a bare key followed by values, each either a
// double-quoted string with Go's escapes (\\ \" \n \r \t \a \b \f \v \xHH \uHHHH) or a
// bare word.
func Parse(name string, data []byte) ([]Record, error) {
	var recs []Record
	var cur *Record
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		at := fmt.Sprintf("%s:%d", name, n)
		trimmed := strings.TrimSpace(text)
		switch {
		case trimmed == "":
			cur = nil
			continue
		case strings.HasPrefix(trimmed, "#"):
			continue
		}
		line, err := parseLine(trimmed)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", at, err)
		}
		line.At = at
		if cur == nil {
			recs = append(recs, Record{At: at})
			cur = &recs[len(recs)-1]
		}
		cur.Lines = append(cur.Lines, line)
	}
	return recs, sc.Err()
}

func parseLine(s string) (Line, error) {
	key, rest, _ := strings.Cut(s, " ")
	if key == "" || strings.ContainsAny(key, "\"\\") {
		return Line{}, fmt.Errorf("bad key %q", key)
	}
	l := Line{Key: key, Vals: []string{}}
	for {
		rest = strings.TrimLeft(rest, " \t")
		if rest == "" {
			return l, nil
		}
		if rest[0] != '"' {
			word, tail, _ := strings.Cut(rest, " ")
			if strings.ContainsAny(word, "\"\\") {
				return Line{}, fmt.Errorf("bare word %q holds a quote or a backslash", word)
			}
			l.Vals = append(l.Vals, word)
			rest = tail
			continue
		}
		end := 1
		for end < len(rest) && rest[end] != '"' {
			if rest[end] == '\\' {
				end++
			}
			end++
		}
		if end >= len(rest) {
			return Line{}, fmt.Errorf("unterminated string %s", rest)
		}
		quoted := rest[:end+1]
		if err := checkEscapes(quoted); err != nil {
			return Line{}, err
		}
		v, err := strconv.Unquote(quoted)
		if err != nil {
			return Line{}, fmt.Errorf("string %s: %v", quoted, err)
		}
		l.Vals = append(l.Vals, v)
		rest = rest[end+1:]
	}
}

// checkEscapes refuses the escapes of Go that the C reader does not know (octal, \U).
func checkEscapes(q string) error {
	for i := 1; i < len(q)-1; i++ {
		if q[i] != '\\' {
			continue
		}
		i++
		if !strings.ContainsRune(`\"nrtabfvxu`, rune(q[i])) {
			return fmt.Errorf("string %s: escape \\%c is not in the vector format", q, q[i])
		}
	}
	return nil
}
