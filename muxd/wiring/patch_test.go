package wiring

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestPatchKeepsUnknownFields(t *testing.T) {
	raw := []byte(`{"ociVersion":"1.2.0","process":{"env":["A=1"],"x-new":{"k":[1,2]}},"x-top":"v","mounts":[]}`)
	var s specs.Spec
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	s.Process.Env = append(s.Process.Env, "B=2")
	out, err := Patch(raw, &s)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"ociVersion": "1.2.0",
		"process":    map[string]any{"env": []any{"A=1", "B=2"}, "x-new": map[string]any{"k": []any{float64(1), float64(2)}}},
		"x-top":      "v", "mounts": []any{},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestPatchRefusesSpecWithoutProcess(t *testing.T) {
	var s specs.Spec
	for _, raw := range []string{`{"process":7}`, `{}`, `[]`} {
		if _, err := Patch([]byte(raw), &s); err == nil {
			t.Errorf("Patch(%s) accepted it", raw)
		}
	}
}
