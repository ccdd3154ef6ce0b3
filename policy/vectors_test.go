package policy

import (
	"strconv"
	"testing"
	"time"

	"github.com/muxflow/muxflow/tests/testvec"
)

// TestPolicyScanVectors holds the Go decoder to testdata/policyscan.vec, which
// muxflow-runtime's policy scan (hook/native/src/policyscan.c) is held to as well: where
// the scan is sure and the decoder accepts the file, both read the same runtime, socket
// and timeout.
func TestPolicyScanVectors(t *testing.T) {
	def := Default()
	for _, r := range testvec.Load(t, "policyscan.vec") {
		t.Run(r.Name(), func(t *testing.T) {
			p, err := Parse([]byte(r.Str("doc", "")), "policyscan.vec")
			got := "ok"
			if err != nil {
				got = "invalid"
			}
			if want := r.Str("go", ""); got != want {
				t.Fatalf("%s: Go's decoder says %s (%v), the vector says go %s", r.At, got, err, want)
			}
			if err != nil || r.Str("sure", "") != "1" {
				return
			}
			if want := r.Str("runtime", def.Hook.Runtime); p.Hook.Runtime != want {
				t.Errorf("%s: runtime %q, the scan reads %q", r.At, p.Hook.Runtime, want)
			}
			if want := r.Str("socket", def.Node.Socket); p.Node.Socket != want {
				t.Errorf("%s: socket %q, the scan reads %q", r.At, p.Node.Socket, want)
			}
			var want Duration
			if err := want.UnmarshalText([]byte(r.Str("timeout", def.Hook.Timeout.D().String()))); err != nil {
				t.Fatalf("%s: timeout: %v", r.At, err)
			}
			if p.Hook.Timeout != want {
				t.Errorf("%s: timeout %v, the scan reads %v", r.At, p.Hook.Timeout.D(), want.D())
			}
		})
	}
}

// TestDurationVectors holds Go's duration notation, in which hook.timeout is written, to
// testdata/duration.vec; hook/native/src/duration.c is held to the same file.
func TestDurationVectors(t *testing.T) {
	recs := testvec.Load(t, "duration.vec")
	for _, l := range testvec.Lines(recs, "parse") {
		d, err := time.ParseDuration(l.Vals[0])
		if err != nil || d.Nanoseconds() != num(t, l.At, l.Vals[1]) {
			t.Errorf("%s: ParseDuration(%q) = %d, %v; want %s", l.At, l.Vals[0], d.Nanoseconds(), err, l.Vals[1])
		}
	}
	for _, l := range testvec.Lines(recs, "bad") {
		if d, err := time.ParseDuration(l.Vals[0]); err == nil {
			t.Errorf("%s: ParseDuration(%q) = %v; want an error", l.At, l.Vals[0], d)
		}
	}
	for _, l := range testvec.Lines(recs, "format") {
		if got := time.Duration(num(t, l.At, l.Vals[0])).String(); got != l.Vals[1] {
			t.Errorf("%s: Duration(%s).String() = %q, want %q", l.At, l.Vals[0], got, l.Vals[1])
		}
	}
}

func num(t *testing.T, at, s string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s: %q is not an integer", at, s)
	}
	return v
}
