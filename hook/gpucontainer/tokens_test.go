package gpucontainer

import (
	"bytes"
	"encoding/json"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/muxflow/muxflow/tests/testvec"
)

// gpuTokens reads the token list of testdata/gputokens.vec, which muxflow-runtime's fast
// path (hook/native/src/specscan.c) is held to as well.
func gpuTokens(t testing.TB) ([][]byte, []testvec.Record) {
	recs := testvec.Load(t, "gputokens.vec")
	var toks [][]byte
	for _, l := range testvec.Lines(recs, "token") {
		toks = append(toks, []byte(l.Vals[0]))
	}
	if len(toks) == 0 {
		t.Fatal("gputokens.vec lists no token")
	}
	return toks, recs
}

func holdsToken(raw []byte, toks [][]byte) bool {
	for _, tok := range toks {
		if bytes.Contains(raw, tok) {
			return true
		}
	}
	return false
}

// TestGPUTokenVectors: every spec of testdata/gputokens.vec that the fast path clears
// (maybe_gpu 0) is no GPU container for Detect, and maybe_gpu agrees with the token list.
func TestGPUTokenVectors(t *testing.T) {
	toks, recs := gpuTokens(t)
	for _, r := range recs {
		if r.Kind() != "spec" {
			continue
		}
		raw := []byte(r.Str("json", ""))
		maybe := r.Str("maybe_gpu", "") == "1"
		if holdsToken(raw, toks) != maybe {
			t.Errorf("%s: maybe_gpu %v disagrees with the token list", r.At, maybe)
		}
		if maybe {
			continue
		}
		var s specs.Spec
		if json.Unmarshal(raw, &s) != nil {
			continue // not a spec: only the C scan reads it
		}
		if gpus, err := Detect(&s); gpus != nil || err != nil {
			t.Errorf("%s: Detect = %v, %v for a spec the fast path clears", r.At, gpus, err)
		}
	}
}

// FuzzGPUTokens: any spec that holds none of the tokens of testdata/gputokens.vec is no
// GPU container for Detect (the premise of muxflow-runtime's fast path).
func FuzzGPUTokens(f *testing.F) {
	toks, recs := gpuTokens(f)
	for _, r := range recs {
		if r.Kind() == "spec" {
			f.Add([]byte(r.Str("json", "")))
		}
	}
	f.Add([]byte(`{"process":{"env":["A=1","NVIDIA_VISIBLE_DEVICES=all"]},"linux":{"devices":[{"path":"/dev/nvidia-uvm"}]}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if holdsToken(raw, toks) {
			return
		}
		var s specs.Spec
		if json.Unmarshal(raw, &s) != nil {
			return
		}
		if gpus, err := Detect(&s); gpus != nil || err != nil {
			t.Fatalf("Detect = %v, %v for a spec without any token: %s", gpus, err, raw)
		}
	})
}
