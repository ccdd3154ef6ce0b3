package runtimeconfig

import (
	"fmt"
	"strings"
)

// A tomlLine is one physical line of a TOML file, classified well enough to edit tables in
// place: whether it is a table header (and which key path it names) or part of a value.
type tomlLine struct {
	text   string
	header []string // non-nil for [table] and [[array]] headers
}

// scanTOML splits a TOML document into lines and finds the table headers, tracking
// multi-line strings and multi-line arrays/inline tables so that a line inside a value that
// happens to start with '[' is not taken for a header. It does not validate the document;
// the caller decodes the edited result with a real parser.
func scanTOML(doc string) ([]tomlLine, error) {
	var out []tomlLine
	depth := 0 // open [ and { inside a value
	inML := "" // the delimiter of the multi-line string we are inside, if any
	for n, line := range strings.Split(doc, "\n") {
		l := tomlLine{text: line}
		t := strings.TrimSpace(line)
		if depth == 0 && inML == "" && strings.HasPrefix(t, "[") {
			path, err := parseHeader(t)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n+1, err)
			}
			l.header = path
			out = append(out, l)
			continue
		}
		var err error
		depth, inML, err = scanValue(line, depth, inML)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// scanValue advances the bracket depth and multi-line string state over one line.
func scanValue(line string, depth int, inML string) (int, string, error) {
	for i := 0; i < len(line); i++ {
		if inML != "" {
			if inML == `"""` && line[i] == '\\' {
				i++
				continue
			}
			if strings.HasPrefix(line[i:], inML) {
				i += len(inML) - 1
				inML = ""
			}
			continue
		}
		switch c := line[i]; c {
		case '#':
			return depth, inML, nil
		case '"', '\'':
			d := string(c)
			if strings.HasPrefix(line[i:], d+d+d) {
				inML = d + d + d
				i += 2
				continue
			}
			j := i + 1
			for ; j < len(line); j++ {
				if c == '"' && line[j] == '\\' {
					j++
					continue
				}
				if line[j] == c {
					break
				}
			}
			if j >= len(line) {
				return 0, "", fmt.Errorf("unterminated string")
			}
			i = j
		case '[', '{':
			depth++
		case ']', '}':
			depth--
			if depth < 0 {
				return 0, "", fmt.Errorf("unbalanced %q", c)
			}
		}
	}
	return depth, inML, nil
}

// parseHeader reads the key path of a "[a.'b'."c.d"]" or "[[a.b]]" header line.
func parseHeader(t string) ([]string, error) {
	s := strings.TrimPrefix(t, "[")
	array := strings.HasPrefix(s, "[")
	if array {
		s = s[1:]
	}
	var path []string
	var cur strings.Builder
	have := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
		case c == '"' || c == '\'':
			j := i + 1
			for ; j < len(s) && s[j] != c; j++ {
				if c == '"' && s[j] == '\\' {
					return nil, fmt.Errorf("escapes in table names are not supported: %s", t)
				}
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unterminated quoted key in %s", t)
			}
			cur.WriteString(s[i+1 : j])
			have = true
			i = j
		case c == '.':
			if !have {
				return nil, fmt.Errorf("empty key in %s", t)
			}
			path = append(path, cur.String())
			cur.Reset()
			have = false
		case c == ']':
			if !have {
				return nil, fmt.Errorf("empty key in %s", t)
			}
			path = append(path, cur.String())
			rest := s[i+1:]
			if array {
				if !strings.HasPrefix(rest, "]") {
					return nil, fmt.Errorf("bad array-of-tables header %s", t)
				}
				rest = rest[1:]
			}
			if r := strings.TrimSpace(rest); r != "" && !strings.HasPrefix(r, "#") {
				return nil, fmt.Errorf("text after table header %s", t)
			}
			return path, nil
		case isBareKey(c):
			cur.WriteByte(c)
			have = true
		default:
			return nil, fmt.Errorf("unexpected %q in table header %s", c, t)
		}
	}
	return nil, fmt.Errorf("unterminated table header %s", t)
}

func isBareKey(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// quoteKey writes a key for a header: bare when possible, else a basic string.
func quoteKey(k string) string {
	for i := 0; i < len(k); i++ {
		if !isBareKey(k[i]) {
			return `"` + k + `"`
		}
	}
	return k
}

func hasPrefix(path, prefix []string) bool {
	if len(path) < len(prefix) {
		return false
	}
	for i := range prefix {
		if path[i] != prefix[i] {
			return false
		}
	}
	return true
}
