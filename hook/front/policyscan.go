package front

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
)

// PolicyEnv overrides where the policy is read from. containerd starts runtimes with
// BinaryName and no extra arguments, so the environment (inherited from containerd through
// the shim) is the one way to point muxflow-runtime at another file.
const PolicyEnv = "MUXFLOW_POLICY"

// DefaultPolicyPath is policy.DefaultPath; a test keeps the two equal.
const DefaultPolicyPath = "/etc/muxflow/policy.toml"

// DefaultRuntime is the embedded default policy's hook.runtime; a test keeps them equal.
const DefaultRuntime = "runc"

// maxPolicySize bounds the policy file read on the fast path.
const maxPolicySize = 1 << 20

// QuickRuntime finds hook.runtime without decoding the whole policy: it recognises only
// `runtime = "..."` (or '...') inside a [hook] table, which is how the shipped policy and
// every hand-written one say it. Anything it cannot be sure about — dotted or quoted keys
// that could mean hook.runtime, escapes, a repeated key, an unreadable file — makes it
// answer ok=false, and the caller falls back to the full policy decoder.
func QuickRuntime(getenv func(string) string) (runtime string, ok bool) {
	path := getenv(PolicyEnv)
	if path == "" {
		path = DefaultPolicyPath
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) && getenv(PolicyEnv) == "" {
		return DefaultRuntime, true // no policy file: the embedded default applies
	}
	if err != nil {
		return "", false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPolicySize+1))
	if err != nil || len(data) > maxPolicySize {
		return "", false
	}
	return scanRuntime(string(data))
}

func scanRuntime(doc string) (string, bool) {
	table := ""
	found := ""
	for line := range strings.Lines(doc) {
		t := strings.TrimSpace(line)
		if t == "" || t[0] == '#' {
			continue
		}
		if t[0] == '[' {
			end := strings.IndexByte(t, ']')
			if end < 0 || strings.HasPrefix(t, "[[") {
				return "", false
			}
			table = strings.TrimSpace(t[1:end])
			if rest := strings.TrimSpace(t[end+1:]); rest != "" && rest[0] != '#' {
				return "", false
			}
			if strings.ContainsAny(table, `"'`) && strings.Contains(table, "hook") {
				return "", false // a quoted header that might be [hook]
			}
			continue
		}
		key, val, hasEq := strings.Cut(t, "=")
		key = strings.TrimSpace(key)
		if table == "" && hasEq && (key == "hook" || strings.HasPrefix(key, "hook.") || strings.HasPrefix(key, `"hook"`) || strings.HasPrefix(key, `'hook'`)) {
			return "", false // hook.runtime written as a dotted key or an inline table
		}
		if table != "hook" || !hasEq {
			continue
		}
		if key != "runtime" {
			if strings.Contains(key, "runtime") {
				return "", false // "runtime" quoted or dotted: let the real decoder decide
			}
			continue
		}
		v, ok := quotedValue(strings.TrimSpace(val))
		if !ok || found != "" {
			return "", false
		}
		found = v
	}
	if found == "" {
		return DefaultRuntime, true
	}
	return found, true
}

// quotedValue reads a basic string without escapes or a literal string, followed by
// nothing but an optional comment.
func quotedValue(s string) (string, bool) {
	if len(s) < 2 || (s[0] != '"' && s[0] != '\'') || strings.HasPrefix(s, `"""`) || strings.HasPrefix(s, "'''") {
		return "", false
	}
	q := s[0]
	end := strings.IndexByte(s[1:], q)
	if end < 0 {
		return "", false
	}
	v := s[1 : 1+end]
	if q == '"' && strings.ContainsRune(v, '\\') {
		return "", false
	}
	if rest := strings.TrimSpace(s[2+end:]); rest != "" && rest[0] != '#' {
		return "", false
	}
	return v, v != ""
}
