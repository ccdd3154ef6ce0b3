package runtimeconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// member is one key of a JSON object, kept with its raw value so that values the tool
// does not touch are written back as they were, in the order they were.
type member struct {
	key string
	val json.RawMessage
}

// editDocker adds (or removes) runtimes.muxflow = {"path": binary} in a Docker daemon.json.
// Other keys keep their order and values; the file is re-indented with two spaces.
func editDocker(doc, binary string, remove bool) (string, error) {
	top, err := parseObject([]byte(doc))
	if err != nil {
		return "", fmt.Errorf("the file is not a JSON object: %w", err)
	}
	i := index(top, "runtimes")
	var runtimes []member
	if i >= 0 {
		if runtimes, err = parseObject(top[i].val); err != nil {
			return "", fmt.Errorf("its \"runtimes\" is not a JSON object: %w", err)
		}
	}
	j := index(runtimes, RuntimeName)
	entry, _ := json.Marshal(map[string]string{"path": binary})
	switch {
	case remove && j >= 0:
		runtimes = append(runtimes[:j], runtimes[j+1:]...)
	case !remove && j >= 0:
		runtimes[j].val = entry
	case !remove:
		runtimes = append(runtimes, member{RuntimeName, entry})
	}
	switch {
	case i >= 0 && len(runtimes) == 0 && remove:
		top = append(top[:i], top[i+1:]...)
	case i >= 0:
		top[i].val = encodeObject(runtimes)
	case len(runtimes) > 0:
		top = append(top, member{"runtimes", encodeObject(runtimes)})
	}
	var out bytes.Buffer
	if err := json.Indent(&out, encodeObject(top), "", "  "); err != nil {
		return "", fmt.Errorf("encode daemon.json: %w", err)
	}
	out.WriteByte('\n')
	return out.String(), nil
}

func index(ms []member, key string) int {
	for i, m := range ms {
		if m.key == key {
			return i
		}
	}
	return -1
}

// parseObject reads a JSON object's members in order. Empty input is an empty object (a
// fresh daemon.json); a duplicate key is an error, since Docker would read only one of them.
func parseObject(data []byte) ([]member, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("expected an object")
	}
	var ms []member
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := t.(string)
		if seen[key] {
			return nil, fmt.Errorf("key %q appears twice", key)
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("value of %q: %w", key, err)
		}
		ms = append(ms, member{key, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if dec.More() || dec.InputOffset() < int64(len(bytes.TrimRight(data, " \t\r\n"))) {
		return nil, fmt.Errorf("text after the object")
	}
	return ms, nil
}

func encodeObject(ms []member) json.RawMessage {
	var b strings.Builder
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(m.val)
	}
	b.WriteByte('}')
	return json.RawMessage(b.String())
}
