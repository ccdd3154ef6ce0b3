package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// MaxFileSize bounds a policy file; real ones are a few KiB. muxflow-runtime (C) has the
// same bound (POLICY_MAX_SIZE, checked by hook/wrapper's TestNativeConstants).
const MaxFileSize = 1 << 20

// Default returns the embedded default policy. It never fails: a test guards that.
func Default() *Policy {
	p, err := Parse([]byte(DefaultTOML), "embedded default")
	if err != nil {
		panic("embedded default policy is invalid: " + err.Error())
	}
	return p
}

// Load reads and validates a policy file.
func Load(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, MaxFileSize+1)); err != nil {
		return nil, fmt.Errorf("read policy %s: %w", path, err)
	}
	if buf.Len() > MaxFileSize {
		return nil, fmt.Errorf("policy %s is larger than %d bytes", path, MaxFileSize)
	}
	return Parse(buf.Bytes(), path)
}

// Parse decodes a policy strictly over the embedded defaults: keys the file leaves out
// keep their default, unknown keys, wrong types, bad units and out-of-range values are
// errors that name the key and its line. source names the file in error messages.
func Parse(data []byte, source string) (*Policy, error) {
	p := &Policy{}
	if source != "embedded default" {
		p = Default()
	}
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(p)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			line := pe.Position.Line
			if line == 0 && pe.LastKey != "" {
				line = keyLine(data, strings.Split(pe.LastKey, "."))
			}
			return nil, fmt.Errorf("%s: line %d: %s", source, line, cleanTOMLMessage(pe))
		}
		// Type mismatches arrive as "toml: line N (last key "k"): ...".
		return nil, fmt.Errorf("%s: %s", source, strings.TrimPrefix(err.Error(), "toml: "))
	}
	if und := md.Undecoded(); len(und) > 0 {
		var msgs []string
		for _, k := range und {
			msgs = append(msgs, fmt.Sprintf("%s: line %d: unknown key %q", source, keyLine(data, k), k.String()))
		}
		return nil, errors.New(strings.Join(msgs, "; "))
	}
	if err := p.Validate(); err != nil {
		var ve validationErrors
		if errors.As(err, &ve) {
			return nil, ve.withLines(data, source)
		}
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return p, nil
}

// Encode writes the policy as TOML (for `GET /v1/policy`).
func (p *Policy) Encode() (string, error) {
	var b strings.Builder
	if err := toml.NewEncoder(&b).Encode(p); err != nil {
		return "", fmt.Errorf("encode policy: %w", err)
	}
	return b.String(), nil
}

func cleanTOMLMessage(pe toml.ParseError) string {
	msg := pe.Message
	if pe.LastKey != "" {
		msg = fmt.Sprintf("key %q: %s", pe.LastKey, msg)
	}
	return msg
}

type fieldError struct {
	key string // dotted, as in the file: "monitor.period"
	msg string
}

type validationErrors []fieldError

func (v validationErrors) Error() string {
	var msgs []string
	for _, e := range v {
		msgs = append(msgs, e.key+": "+e.msg)
	}
	return strings.Join(msgs, "; ")
}

func (v validationErrors) withLines(data []byte, source string) error {
	sort.SliceStable(v, func(i, j int) bool { return v[i].key < v[j].key })
	var msgs []string
	for _, e := range v {
		where := source
		if line := keyLine(data, strings.Split(e.key, ".")); line > 0 {
			where = fmt.Sprintf("%s: line %d", source, line)
		} else {
			where += " (default value)"
		}
		msgs = append(msgs, fmt.Sprintf("%s: %s: %s", where, e.key, e.msg))
	}
	return errors.New(strings.Join(msgs, "; "))
}

var tableHeader = regexp.MustCompile(`^\s*\[\s*([A-Za-z0-9_.\-" ]+?)\s*\]`)

// keyLine finds the line where a key is set, following [table] headers; 0 if the file
// does not set it (the value came from the default). BurntSushi/toml keeps key positions
// private, so this small scan recovers them for messages.
func keyLine(data []byte, key []string) int {
	if len(key) == 0 {
		return 0
	}
	want := strings.Join(key, ".")
	table := ""
	for i, line := range strings.Split(string(data), "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if m := tableHeader.FindStringSubmatch(t); m != nil {
			table = strings.ReplaceAll(strings.ReplaceAll(m[1], `"`, ""), " ", "")
			if table == want {
				return i + 1
			}
			continue
		}
		eq := strings.IndexByte(t, '=')
		if eq < 0 {
			continue
		}
		k := strings.ReplaceAll(strings.ReplaceAll(strings.TrimSpace(t[:eq]), `"`, ""), " ", "")
		full := k
		if table != "" {
			full = table + "." + k
		}
		if full == want {
			return i + 1
		}
	}
	return 0
}
