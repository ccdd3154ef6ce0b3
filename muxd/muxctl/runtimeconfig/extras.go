package runtimeconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/muxflow/muxflow/policy"
)

// setTableKey sets key = value (value already written as TOML) in the table named by
// table: the key's line is replaced where the table defines it, added right after the
// table's header where it does not, and a new table is appended where the file has no
// header for it. The caller decodes the result to prove the edit.
func setTableKey(doc string, table []string, key, value string) (string, error) {
	lines, err := scanTOML(doc)
	if err != nil {
		return "", fmt.Errorf("cannot edit the file: %w", err)
	}
	keyLine := regexp.MustCompile(`^(\s*)` + regexp.QuoteMeta(key) + `\s*=`)
	in, header, at := false, -1, -1
	for i, l := range lines {
		if l.header != nil {
			in = reflect.DeepEqual(l.header, table) && !strings.HasPrefix(strings.TrimSpace(l.text), "[[")
			if in {
				header = i
			}
			continue
		}
		if in && keyLine.MatchString(l.text) {
			at = i
		}
	}
	text := make([]string, len(lines))
	for i, l := range lines {
		text[i] = l.text
	}
	switch {
	case at >= 0:
		indent := keyLine.FindStringSubmatch(text[at])[1]
		text[at] = indent + key + " = " + value
	case header >= 0:
		indent := "  "
		text = append(text[:header+1], append([]string{indent + key + " = " + value}, text[header+1:]...)...)
	default:
		var h strings.Builder
		for i, k := range table {
			if i > 0 {
				h.WriteByte('.')
			}
			h.WriteString(quoteKey(k))
		}
		tbl := "[" + h.String() + "]\n  " + key + " = " + value
		// Before muxflow's runtime block, which every run takes out and appends again,
		// so that a second run finds the file as the first left it.
		for i, l := range text {
			if l == marker {
				return strings.Join(append(text[:i:i], append([]string{tbl, ""}, text[i:]...)...), "\n"), nil
			}
		}
		out := strings.TrimRight(strings.Join(text, "\n"), "\n")
		if out != "" {
			out += "\n\n"
		}
		return out + tbl + "\n", nil
	}
	return strings.Join(text, "\n"), nil
}

// defaultContainerd makes muxflow containerd's default CRI runtime (set), or, when muxflow
// is the default, puts runc back (!set). Only default_runtime_name may change.
func defaultContainerd(doc string, set bool) (string, error) {
	var before map[string]any
	if _, err := toml.Decode(doc, &before); err != nil {
		return "", fmt.Errorf("the file is not valid TOML: %w", err)
	}
	version, err := configVersion(before)
	if err != nil {
		return "", err
	}
	table := runtimePath(version)[:3] // plugins.<cri>.containerd
	cur, _ := lookup(before, append(table[:3:3], "default_runtime_name"))
	want := RuntimeName
	if !set {
		if cur != RuntimeName {
			return doc, nil
		}
		want = "runc"
	}
	if cur == want {
		return doc, nil
	}
	out, err := setTableKey(doc, table, "default_runtime_name", tomlString(want))
	if err != nil {
		return "", err
	}
	var after map[string]any
	if _, err := toml.Decode(out, &after); err != nil {
		return "", fmt.Errorf("cannot set the default runtime safely (the result would not parse: %v); set default_runtime_name by hand", err)
	}
	if got, _ := lookup(after, append(table[:3:3], "default_runtime_name")); got != want {
		return "", fmt.Errorf("cannot set default_runtime_name (it is written in a form this tool does not edit); set it to %q by hand", want)
	}
	deleteAt(before, append(table[:3:3], "default_runtime_name"))
	deleteAt(after, append(table[:3:3], "default_runtime_name"))
	if !reflect.DeepEqual(before, after) {
		return "", fmt.Errorf("cannot set the default runtime without changing other settings; set default_runtime_name by hand")
	}
	return out, nil
}

// defaultDocker sets "default-runtime": "muxflow" (set), or drops it when it names muxflow
// (!set: Docker's default, runc, applies again).
func defaultDocker(doc string, set bool) (string, error) {
	top, err := parseObject([]byte(doc))
	if err != nil {
		return "", fmt.Errorf("the file is not a JSON object: %w", err)
	}
	i := index(top, "default-runtime")
	name, _ := json.Marshal(RuntimeName)
	var cur string
	if i >= 0 {
		_ = json.Unmarshal(top[i].val, &cur)
	}
	switch {
	case set && i >= 0:
		top[i].val = name
	case set:
		top = append(top, member{"default-runtime", name})
	case i >= 0 && cur == RuntimeName:
		top = append(top[:i], top[i+1:]...)
	default:
		return doc, nil
	}
	return indentJSON(top)
}

func indentJSON(top []member) (string, error) {
	var out bytes.Buffer
	if err := json.Indent(&out, encodeObject(top), "", "  "); err != nil {
		return "", fmt.Errorf("encode daemon.json: %w", err)
	}
	out.WriteByte('\n')
	return out.String(), nil
}

// CRI-O reads drop-in files from /etc/crio/crio.conf.d in name order; muxflow's is a file
// of its own, written whole and removed whole.
const crioDropIn = "/etc/crio/crio.conf.d/99-muxflow.conf"

// crioConfig is the drop-in: a runtime handler "muxflow" (the RuntimeClass's handler)
// whose binary is muxflow-runtime, and with setDefault CRI-O's default runtime. It is
// checked for its form only (no CRI-O on the test machines); runtime_root is left to
// CRI-O's default, the one runc uses, since muxflow-runtime hands every command to runc.
func crioConfig(binary string, setDefault bool) string {
	var b strings.Builder
	b.WriteString(marker + "\n")
	if setDefault {
		fmt.Fprintf(&b, "[crio.runtime]\ndefault_runtime = %q\n\n", RuntimeName)
	}
	fmt.Fprintf(&b, "[crio.runtime.runtimes.%s]\nruntime_path = %s\nruntime_type = \"oci\"\n", RuntimeName, tomlString(binary))
	return b.String()
}

// editCrio checks that the drop-in at hand is muxflow's own (or absent) before it is
// replaced or removed: another file at that path is the operator's.
func editCrio(doc, binary string, remove, setDefault bool) (string, error) {
	if strings.TrimSpace(doc) != "" && !strings.HasPrefix(doc, marker+"\n") {
		return "", fmt.Errorf("the file was not written by muxctl (it does not start with %q); move it away or pass another --config", marker)
	}
	if remove {
		return "", nil
	}
	out := crioConfig(binary, setDefault)
	var m map[string]any
	if _, err := toml.Decode(out, &m); err != nil {
		return "", fmt.Errorf("internal error: the CRI-O drop-in does not parse: %w", err)
	}
	return out, nil
}

// chainPolicy sets [hook] runtime = program in a muxflow policy: the OCI runtime that
// muxflow-runtime calls after it has wired a container (runc by default;
// nvidia-container-runtime to keep the NVIDIA toolkit's legacy device injection).
// The result must pass policy validation and differ from the old policy only there.
func chainPolicy(doc, source, program string) (string, error) {
	if program == "" || strings.ContainsAny(program, "\x00\n\r\"'\\ \t") || (strings.Contains(program, "/") && !strings.HasPrefix(program, "/")) {
		return "", fmt.Errorf("--chain must be a program name or an absolute path, got %q", program)
	}
	before, err := policy.Parse([]byte(doc), source)
	if err != nil {
		return "", err
	}
	out, err := setTableKey(doc, []string{"hook"}, "runtime", tomlString(program))
	if err != nil {
		return "", err
	}
	if !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	after, err := policy.Parse([]byte(out), source)
	if err != nil {
		return "", fmt.Errorf("cannot set [hook] runtime safely: %w", err)
	}
	if after.Hook.Runtime != program {
		return "", fmt.Errorf("cannot set [hook] runtime (it is written in a form this tool does not edit); set runtime = %q under [hook] by hand", program)
	}
	after.Hook.Runtime = before.Hook.Runtime
	if !reflect.DeepEqual(before, after) {
		return "", fmt.Errorf("cannot set [hook] runtime without changing other settings; set it by hand")
	}
	return out, nil
}
