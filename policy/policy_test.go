package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDefaultParsesAndValidates(t *testing.T) {
	p := Default()
	if err := p.Validate(); err != nil {
		t.Fatalf("default policy invalid: %v", err)
	}
	if p.Monitor.Period.D() != 100*time.Millisecond || p.Node.Socket != "/run/muxflow/muxd.sock" {
		t.Errorf("unexpected defaults: period %v socket %q", p.Monitor.Period.D(), p.Node.Socket)
	}
	// The shipped file is the embedded default; re-encoding and parsing it again round-trips.
	enc, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	q, err := Parse([]byte(enc), "re-encoded")
	if err != nil {
		t.Fatalf("re-encoded default does not parse: %v\n%s", err, enc)
	}
	if diff := cmp.Diff(p, q); diff != "" {
		t.Errorf("round trip changed the policy (-want +got):\n%s", diff)
	}
}

func TestPartialFileKeepsDefaults(t *testing.T) {
	p, err := Parse([]byte("[alloc]\nheadroom = \"20%\"\n"), "f.toml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Alloc.Headroom != 20 || p.Alloc.Mode != "dynamic" || p.Evict.Grace.D() != 10*time.Second {
		t.Errorf("got headroom %v mode %q grace %v", p.Alloc.Headroom, p.Alloc.Mode, p.Evict.Grace.D())
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		file string
		want []string // substrings the one-sentence error must contain
	}{
		{"unknown key", "[node]\nbogus = 1\n", []string{"line 2", `unknown key "node.bogus"`}},
		{"unknown section", "\n\n[nodes]\nsocket = \"/x\"\n", []string{"line 4", `"nodes.socket"`}},
		{"wrong type", "[mps]\nenabled = \"yes\"\n", []string{"line 2", "mps.enabled", "incompatible types"}},
		{"wrong type int for string", "[hook]\nruntime = 3\n", []string{"line 2", "hook.runtime"}},
		{"bad duration", "[monitor]\nperiod = \"fast\"\n", []string{"line 2", "monitor.period", `"fast"`}},
		{"negative duration", "[evict]\ngrace = \"-1s\"\n", []string{"evict.grace", "negative"}},
		{"bad size unit", "[classes.offline]\nmemory_limit = \"8Gi\"\n", []string{"line 2", "memory_limit", "GiB"}},
		{"size without unit", "[classes.offline]\nmemory_limit = 8\n", []string{"line 2", "needs a unit"}},
		{"percent without sign", "[alloc]\nheadroom = \"10\"\n", []string{"line 2", "alloc.headroom", "%"}},
		{"percent out of range", "[alloc]\nheadroom = \"120%\"\n", []string{"alloc.headroom", "outside"}},
		{"range: headroom", "[alloc]\nheadroom = \"60%\"\n", []string{"line 2", "alloc.headroom", "at most 50%"}},
		{"range: period", "[monitor]\nperiod = \"1ms\"\n", []string{"line 2", "monitor.period", "between 10ms"}},
		{"relation: sm_min above sm_max", "[classes.offline]\nsm_min = \"95%\"\n", []string{"line 2", "classes.offline.sm_min", "above sm_max"}},
		{"relation: temperatures", "[monitor]\nsoft_temperature = 95.0\n", []string{"line 2", "soft_temperature", "below hard_temperature"}},
		{"relative path", "[node]\n\nstate_dir = \"rel/dir\"\n", []string{"line 3", "node.state_dir", "absolute"}},
		{"unclean path", "[node]\nsocket = \"/run/../etc/x\"\n", []string{"node.socket", "clean absolute"}},
		{"enum", "[alloc]\nmode = \"greedy\"\n", []string{"line 2", "alloc.mode", `"greedy"`}},
		{"range: hold queue", "[hold]\nqueue = \"0s\"\n", []string{"line 2", "hold.queue", "between 1us and 100ms"}},
		{"range: hold linger", "[hold]\nlinger = \"20ms\"\n", []string{"line 2", "hold.linger", "0 (off) or between 1us and 10ms"}},
		{"range: hold linger under 1us", "[hold]\nlinger = \"500ns\"\n", []string{"line 2", "hold.linger", "0 (off) or between 1us and 10ms"}},
		{"type: hold ahead", "[hold]\nahead = \"yes\"\n", []string{"line 2", "hold.ahead"}},
		{"range: fit_min", "[alloc]\nfit_min = \"0%\"\n", []string{"line 2", "alloc.fit_min", "between 1% and 100%"}},
		{"range: confine", "[alloc]\nconfine = \"100%\"\n", []string{"line 2", "alloc.confine", "below 100%"}},
		{"range: kernel_risk", "[evict]\nkernel_risk = \"25h\"\n", []string{"line 2", "evict.kernel_risk", "at most 24h", "got 25h0m0s"}},
		{"negative kernel_risk", "[evict]\nkernel_risk = \"-1s\"\n", []string{"evict.kernel_risk", "negative"}},
		{"type: fit", "[alloc]\nfit = \"yes\"\n", []string{"line 2", "alloc.fit"}},
		{"class default", "[classify]\ndefault = \"batch\"\n", []string{"classify.default"}},
		{"annotation key", "[classify]\nclass_annotation = \"a b\"\n", []string{"classify.class_annotation"}},
		{"bool as int", "[errors]\nrestart_mps = 1\n", []string{"line 2", "errors.restart_mps"}},
		{"syntax", "[alloc\n", []string{"line", "table name"}},
		{"duplicate key", "[alloc]\nmode = \"static\"\nmode = \"dynamic\"\n", []string{"line 3", "mode"}},
		// Issue 15: names must be non-empty and printable, durations above 0 where 0 makes
		// no sense.
		{"NUL annotation", "[classify]\n\nsm_annotation = \"\\u0000\"\n", []string{"line 3", "classify.sm_annotation", "U+0000", "printable ASCII"}},
		{"empty annotation", "[classify]\nmemory_annotation = \"\"\n", []string{"line 2", "classify.memory_annotation", "it is empty"}},
		{"newline in annotation", "[classify]\nclass_annotation = \"muxflow.io/cl\\nass\"\n", []string{"line 2", "classify.class_annotation", "U+000A"}},
		{"annotation bad prefix", "[classify]\nclass_annotation = \"Muxflow.IO/class\"\n", []string{"line 2", "classify.class_annotation", "DNS name"}},
		{"annotation bad name", "[classify]\nclass_annotation = \"muxflow.io/-class\"\n", []string{"line 2", "classify.class_annotation", "starting and ending"}},
		{"annotation not ASCII", "[classify]\nclass_annotation = \"muxflow.io/klaß\"\n", []string{"line 2", "U+00DF"}},
		{"NUL in mps.control", "[mps]\ncontrol = \"nvidia\\u0000\"\n", []string{"line 2", "mps.control", "printable"}},
		{"empty mps.control", "[mps]\ncontrol = \"\"\n", []string{"line 2", "mps.control", "must name"}},
		{"mps.control with arguments", "[mps]\ncontrol = \"nvidia-cuda-mps-control -d\"\n", []string{"line 2", "mps.control", "without spaces"}},
		{"relative mps.control path", "[mps]\ncontrol = \"bin/nvidia-cuda-mps-control\"\n", []string{"line 2", "mps.control", "clean absolute path"}},
		{"newline in hook.runtime", "[hook]\nruntime = \"runc\\n\"\n", []string{"line 2", "hook.runtime", "U+000A"}},
		{"control character in path", "[node]\nrun_dir = \"/run/mux\\u0007flow\"\n", []string{"line 2", "node.run_dir", "printable"}},
		{"node name with a newline", "[node]\nname = \"node-1\\n\"\n", []string{"line 2", "node.name", "U+000A"}},
		{"bad metrics address", "[node]\nmetrics_address = \"9400\"\n", []string{"line 2", "node.metrics_address", "host:port"}},
		{"zero grace", "[evict]\ngrace = \"0ms\"\n", []string{"line 2", "evict.grace", "must be above 0", "got 0s"}},
		{"zero recovery", "[monitor]\nrecovery = \"0s\"\n", []string{"line 2", "monitor.recovery", "must be above 0"}},
		{"zero hook timeout", "[hook]\ntimeout = \"0ms\"\n", []string{"line 2", "hook.timeout", "above 0"}},
		{"zero alloc period", "[alloc]\nperiod = \"0ms\"\n", []string{"line 2", "alloc.period", "between 10ms"}},
		{"zero monitor period", "[monitor]\nperiod = \"0ms\"\n", []string{"line 2", "monitor.period", "between 10ms"}},
		{"zero day length", "[alloc]\nday_length = \"0s\"\n", []string{"line 2", "alloc.day_length", "at least 10 alloc periods (1s)"}},
		{"day of nine periods", "[alloc]\nperiod = \"200ms\"\nday_length = \"1800ms\"\n", []string{"line 3", "alloc.day_length", "at least 10 alloc periods (2s), got 1.8s"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.file), "f.toml")
			if err == nil {
				t.Fatalf("Parse accepted %q", tc.file)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if !strings.HasPrefix(err.Error(), "f.toml") {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

// Values that stay valid: an unset node name, no backoff, an absolute program path,
// annotation keys without a prefix.
func TestValidEdgeValues(t *testing.T) {
	file := "[node]\nname = \"gpu-node-7.example\"\nmetrics_address = \":9400\"\n" +
		"[mps]\ncontrol = \"/usr/bin/nvidia-cuda-mps-control\"\n" +
		"[classify]\nsm_annotation = \"sm-percent\"\n" +
		"[evict]\nbackoff = \"0s\"\n"
	if _, err := Parse([]byte(file), "f.toml"); err != nil {
		t.Fatal(err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.toml")); err == nil || !strings.Contains(err.Error(), "missing.toml") {
		t.Errorf("missing file: got %v", err)
	}
	big := filepath.Join(dir, "big.toml")
	if err := os.WriteFile(big, []byte(strings.Repeat("#", MaxFileSize+10)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("oversized file: got %v", err)
	}
	good := filepath.Join(dir, "good.toml")
	if err := os.WriteFile(good, []byte("[evict]\ngrace = \"3s\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Load(good)
	if err != nil || p.Evict.Grace.D() != 3*time.Second {
		t.Errorf("good file: %v, grace %v", err, p.Evict.Grace.D())
	}
}

func TestUnits(t *testing.T) {
	sizes := map[string]Bytes{"0": 0, "8GiB": 8 << 30, "512MiB": 512 << 20, "1.5GB": 1.5e9, "4096": 4096, "2 KiB": 2048, "1G": 1 << 30}
	for in, want := range sizes {
		got, err := ParseBytes(in)
		if err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1GiB", "lots", "8Gi", "NaNGiB", "1e30TiB"} {
		if _, err := ParseBytes(bad); err == nil {
			t.Errorf("ParseBytes(%q) accepted", bad)
		}
	}
	if s := Bytes(8 << 30).String(); s != "8GiB" {
		t.Errorf("String = %q", s)
	}
	var p Percent
	for _, bad := range []string{"30", "abc%", "-1%", "101%"} {
		if err := p.UnmarshalText([]byte(bad)); err == nil {
			t.Errorf("Percent %q accepted", bad)
		}
	}
}
