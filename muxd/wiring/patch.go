package wiring

import (
	"bytes"
	"encoding/json"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// patchLinuxDevices writes linux.devices and linux.resources.devices (device nodes and
// their cgroup rules, which CDI injection adds) when s has any; otherwise the original
// bytes stay.
func patchLinuxDevices(top map[string]json.RawMessage, s *specs.Spec, set func(map[string]json.RawMessage, string, any) error) error {
	if s.Linux == nil || (len(s.Linux.Devices) == 0 && (s.Linux.Resources == nil || len(s.Linux.Resources.Devices) == 0)) {
		return nil
	}
	linux := map[string]json.RawMessage{}
	if raw, ok := top["linux"]; ok {
		if err := json.Unmarshal(raw, &linux); err != nil || linux == nil {
			return fmt.Errorf("config.json's linux is not an object")
		}
	}
	if err := set(linux, "devices", s.Linux.Devices); err != nil {
		return err
	}
	if s.Linux.Resources != nil && len(s.Linux.Resources.Devices) > 0 {
		res := map[string]json.RawMessage{}
		if raw, ok := linux["resources"]; ok {
			if err := json.Unmarshal(raw, &res); err != nil || res == nil {
				return fmt.Errorf("config.json's linux.resources is not an object")
			}
		}
		if err := set(res, "devices", s.Linux.Resources.Devices); err != nil {
			return err
		}
		if err := set(linux, "resources", res); err != nil {
			return err
		}
	}
	return set(top, "linux", linux)
}

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
	if err := patchLinuxDevices(top, s, set); err != nil {
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
