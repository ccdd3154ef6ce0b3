package runtimeconfig

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/BurntSushi/toml"
)

// RuntimeName is the runtime muxflow adds; Kubernetes' RuntimeClass "muxflow" names it.
const RuntimeName = "muxflow"

// PodAnnotations is what containerd passes from pods to the runtime.
const PodAnnotations = "muxflow.io/*"

// marker precedes the block the tool writes, so that a reader of the file knows where
// it came from; --remove takes it away with the block.
const marker = "# muxflow: added by `muxctl runtime configure` (see docs/kubernetes.md)"

// criPlugin is the CRI plugin's table in each containerd config version.
var criPlugin = map[int64]string{
	2: "io.containerd.grpc.v1.cri",    // containerd 1.x (and 2.x, which migrates it)
	3: "io.containerd.cri.v1.runtime", // containerd 2.x
}

func runtimePath(version int64) []string {
	return []string{"plugins", criPlugin[version], "containerd", "runtimes", RuntimeName}
}

// editContainerd adds (or, with remove, takes away) the muxflow runtime in a containerd
// config. Everything outside the muxflow runtime's tables is kept byte for byte: the edit
// removes muxflow's own table lines and appends a fresh block, then proves by decoding both
// documents that nothing else changed.
func editContainerd(doc, binary string, remove bool) (string, error) {
	var before map[string]any
	if _, err := toml.Decode(doc, &before); err != nil {
		return "", fmt.Errorf("the file is not valid TOML: %w", err)
	}
	version, err := configVersion(before)
	if err != nil {
		return "", err
	}
	prefix := runtimePath(version)
	lines, err := scanTOML(doc)
	if err != nil {
		return "", fmt.Errorf("cannot edit the file: %w", err)
	}
	var kept []string
	drop := false
	for i, l := range lines {
		if l.header != nil {
			drop = hasPrefix(l.header, prefix)
		}
		if drop || (l.text == marker && i+1 < len(lines) && hasPrefix(lines[i+1].header, prefix)) {
			continue
		}
		kept = append(kept, l.text)
	}
	out := strings.TrimRight(strings.Join(kept, "\n"), "\n")
	if !remove {
		if out != "" {
			out += "\n\n"
		}
		out += block(prefix, binary)
	}
	if out != "" {
		out += "\n"
	}
	var after map[string]any
	if _, err := toml.Decode(out, &after); err != nil {
		return "", fmt.Errorf("cannot edit the file safely (the result would not parse: %v); add the runtime by hand", err)
	}
	// The muxflow entry must be exactly what we wrote (or gone), and nothing else may differ.
	got, ok := lookup(after, prefix)
	if remove && ok {
		return "", fmt.Errorf("the %s runtime is defined in a form this tool does not edit (an inline table or dotted keys); remove it by hand", RuntimeName)
	}
	if !remove {
		want := map[string]any{
			"runtime_type":    "io.containerd.runc.v2",
			"pod_annotations": []any{PodAnnotations},
			"options":         map[string]any{"BinaryName": binary},
		}
		if !ok || !reflect.DeepEqual(got, want) {
			return "", fmt.Errorf("the %s runtime is also defined in a form this tool does not edit (an inline table or dotted keys); remove it by hand and run again", RuntimeName)
		}
	}
	deleteAt(before, prefix)
	deleteAt(after, prefix)
	if !reflect.DeepEqual(before, after) {
		return "", fmt.Errorf("cannot edit the file without changing other settings; add the runtime by hand")
	}
	return out, nil
}

func configVersion(m map[string]any) (int64, error) {
	v, ok := m["version"]
	if !ok {
		return 0, fmt.Errorf("the file has no version key (containerd config version 1); migrate it with `containerd config migrate` first")
	}
	n, ok := v.(int64)
	if !ok || criPlugin[n] == "" {
		return 0, fmt.Errorf("containerd config version %v is not supported; versions 2 and 3 are", v)
	}
	return n, nil
}

func block(prefix []string, binary string) string {
	var h strings.Builder
	for i, k := range prefix {
		if i > 0 {
			h.WriteByte('.')
		}
		h.WriteString(quoteKey(k))
	}
	return fmt.Sprintf("%s\n[%s]\n  runtime_type = \"io.containerd.runc.v2\"\n  pod_annotations = [%q]\n\n[%s.options]\n  BinaryName = %s\n",
		marker, h.String(), PodAnnotations, h.String(), tomlString(binary))
}

// tomlString writes s as a TOML literal string when it can, else as a basic string.
func tomlString(s string) string {
	if !strings.ContainsAny(s, "'\n\r") {
		return "'" + s + "'"
	}
	return fmt.Sprintf("%q", s)
}

func lookup(m map[string]any, path []string) (any, bool) {
	var cur any = m
	for _, k := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = mm[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// deleteAt removes the value at path and then every table on the path left empty, so that
// a document that only gained (or lost) muxflow's tables compares equal to the original.
func deleteAt(m map[string]any, path []string) {
	for n := len(path); n > 0; n-- {
		parent, ok := lookup(m, path[:n-1])
		if !ok {
			return
		}
		mm, ok := parent.(map[string]any)
		if !ok {
			return
		}
		if n < len(path) {
			if child, ok := mm[path[n-1]].(map[string]any); !ok || len(child) > 0 {
				return
			}
		}
		delete(mm, path[n-1])
	}
}
