package wiring

import (
	"bytes"
	"encoding/json"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Patch writes the parts of s that the wiring changes back into the original config.json
// bytes. Only those keys are re-encoded; every other byte of every other field — including
// fields this runtime-spec version does not know — is kept as it was, so a newer runtime's
// settings survive muxflow's edit.
func Patch(raw []byte, s *specs.Spec) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("decode config.json: %w", err)
	}
	var proc map[string]json.RawMessage
	if err := json.Unmarshal(top["process"], &proc); err != nil || proc == nil || s.Process == nil {
		return nil, fmt.Errorf("config.json has no process object")
	}
	set := func(m map[string]json.RawMessage, key string, v any) error {
		enc, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode %s: %w", key, err)
		}
		if _, had := m[key]; !had && string(enc) == "null" {
			return nil // still absent: do not add "key": null
		}
		m[key] = enc
		return nil
	}
	for _, kv := range []struct {
		m   map[string]json.RawMessage
		key string
		v   any
	}{
		{proc, "env", s.Process.Env},
		{top, "mounts", s.Mounts},
		{top, "hooks", s.Hooks},
		{top, "annotations", s.Annotations},
	} {
		if err := set(kv.m, kv.key, kv.v); err != nil {
			return nil, err
		}
	}
	if err := set(top, "process", proc); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(top); err != nil {
		return nil, fmt.Errorf("encode config.json: %w", err)
	}
	return buf.Bytes(), nil
}
