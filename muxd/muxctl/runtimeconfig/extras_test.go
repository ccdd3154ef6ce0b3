package runtimeconfig

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/muxflow/muxflow/policy"
	"github.com/muxflow/muxflow/tests/testenv"
)

// configure runs Configure and fails the test on an error.
func configure(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if err := Configure(args, &out, &errb); err != nil {
		t.Fatalf("Configure(%q): %v\n%s", args, err, errb.String())
	}
	return out.String()
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSetAsDefaultContainerd(t *testing.T) {
	cases := map[string]struct{ doc, table string }{
		"v2 with the key":    {"version = 2\n# mine\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"overlayfs\"\n  default_runtime_name = \"runc\"\n", "io.containerd.grpc.v1.cri"},
		"v2 without a table": {"version = 2\n", "io.containerd.grpc.v1.cri"},
		"v3":                 {v3Doc, "io.containerd.cri.v1.runtime"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "config.toml")
			os.WriteFile(cfg, []byte(tc.doc), 0o644)
			configure(t, "--runtime=containerd", "--config", cfg, "--set-as-default")
			var m map[string]any
			if _, err := toml.Decode(readFile(t, cfg), &m); err != nil {
				t.Fatal(err)
			}
			if got, _ := lookup(m, []string{"plugins", tc.table, "containerd", "default_runtime_name"}); got != RuntimeName {
				t.Fatalf("default_runtime_name is %v, want muxflow:\n%s", got, readFile(t, cfg))
			}
			if _, ok := lookup(m, runtimePath(map[string]int64{"io.containerd.grpc.v1.cri": 2, "io.containerd.cri.v1.runtime": 3}[tc.table])); !ok {
				t.Fatal("the muxflow runtime is missing")
			}
			// Idempotent; --remove takes the runtime away and makes runc the default again.
			if out := configure(t, "--runtime=containerd", "--config", cfg, "--set-as-default"); !strings.Contains(out, "nothing changed") {
				t.Errorf("second run changed the file: %s", out)
			}
			configure(t, "--runtime=containerd", "--config", cfg, "--remove")
			m = nil
			toml.Decode(readFile(t, cfg), &m)
			if got, _ := lookup(m, []string{"plugins", tc.table, "containerd", "default_runtime_name"}); got != "runc" {
				t.Errorf("after --remove default_runtime_name is %v, want runc:\n%s", got, readFile(t, cfg))
			}
			if strings.Contains(readFile(t, cfg), "muxflow-runtime") {
				t.Errorf("after --remove the file still names muxflow-runtime:\n%s", readFile(t, cfg))
			}
			if name == "v2 with the key" && !strings.Contains(readFile(t, cfg), "# mine\n") {
				t.Error("the operator's comment was lost")
			}
		})
	}
}

// TestSetAsDefaultRealContainerd: containerd 1.6 reads the default from the edited file.
func TestSetAsDefaultRealContainerd(t *testing.T) {
	containerd, err := exec.LookPath("containerd")
	if err != nil {
		t.Fatal("containerd is not installed; run tests/deps.sh (as root)")
	}
	def, err := exec.Command(containerd, "config", "default").Output()
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "config.toml")
	os.WriteFile(cfg, def, 0o644)
	configure(t, "--runtime=containerd", "--config", cfg, "--set-as-default")
	dump, err := exec.Command(containerd, "--config", cfg, "config", "dump").CombinedOutput()
	if err != nil {
		t.Fatalf("containerd rejected the file: %v\n%s", err, dump)
	}
	if !strings.Contains(string(dump), `default_runtime_name = "muxflow"`) {
		t.Errorf("containerd's default runtime is not muxflow:\n%s", dump)
	}
}

func TestSetAsDefaultDocker(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "daemon.json")
	os.WriteFile(cfg, []byte(`{"log-level": "warn", "default-runtime": "runc"}`), 0o644)
	configure(t, "--runtime=docker", "--config", cfg, "--set-as-default")
	got := readFile(t, cfg)
	for _, w := range []string{`"default-runtime": "muxflow"`, `"path": "/usr/bin/muxflow-runtime"`, `"log-level": "warn"`} {
		if !strings.Contains(got, w) {
			t.Errorf("daemon.json lacks %s:\n%s", w, got)
		}
	}
	configure(t, "--runtime=docker", "--config", cfg, "--remove")
	if got := readFile(t, cfg); strings.Contains(got, "muxflow") || !strings.Contains(got, `"log-level": "warn"`) {
		t.Errorf("after --remove:\n%s", got)
	}
	// A default that is not muxflow stays on --remove.
	os.WriteFile(cfg, []byte(`{"default-runtime": "crun", "runtimes": {"muxflow": {"path": "/usr/bin/muxflow-runtime"}}}`), 0o644)
	configure(t, "--runtime=docker", "--config", cfg, "--remove")
	if got := readFile(t, cfg); !strings.Contains(got, `"default-runtime": "crun"`) {
		t.Errorf("--remove dropped a default that was not muxflow:\n%s", got)
	}
}

func TestCrioDropIn(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "crio.conf.d", "99-muxflow.conf")
	out := configure(t, "--runtime=crio", "--config", cfg, "--set-as-default")
	if !strings.Contains(out, "systemctl restart crio") {
		t.Errorf("no restart hint: %s", out)
	}
	var m map[string]any
	if _, err := toml.Decode(readFile(t, cfg), &m); err != nil {
		t.Fatal(err)
	}
	if p, _ := lookup(m, []string{"crio", "runtime", "runtimes", "muxflow", "runtime_path"}); p != DefaultBinary {
		t.Errorf("runtime_path is %v:\n%s", p, readFile(t, cfg))
	}
	if d, _ := lookup(m, []string{"crio", "runtime", "default_runtime"}); d != RuntimeName {
		t.Errorf("default_runtime is %v", d)
	}
	// Without --set-as-default the default is not set; --remove deletes the drop-in.
	configure(t, "--runtime=crio", "--config", cfg)
	if strings.Contains(readFile(t, cfg), "default_runtime") {
		t.Errorf("default_runtime kept without --set-as-default:\n%s", readFile(t, cfg))
	}
	configure(t, "--runtime=crio", "--config", cfg, "--remove")
	if _, err := os.Stat(cfg); !os.IsNotExist(err) {
		t.Errorf("--remove left the drop-in: %v", err)
	}
	// A file muxctl did not write is the operator's: refused.
	os.WriteFile(cfg, []byte("[crio.runtime]\nlog_level = \"debug\"\n"), 0o644)
	var o, e bytes.Buffer
	if err := Configure([]string{"--runtime=crio", "--config", cfg}, &o, &e); err == nil || !strings.Contains(err.Error(), "not written by muxctl") {
		t.Errorf("an operator's file was overwritten: %v", err)
	}
}

func TestChainNvidiaContainerRuntime(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.toml")
	def := []byte(policy.DefaultTOML)
	os.WriteFile(pol, def, 0o644)
	cfg := filepath.Join(dir, "config.toml")
	os.WriteFile(cfg, []byte("version = 2\n"), 0o644)
	configure(t, "--runtime=containerd", "--config", cfg, "--policy", pol, "--chain", "nvidia-container-runtime")
	p, err := policy.Load(pol)
	if err != nil {
		t.Fatal(err)
	}
	if p.Hook.Runtime != "nvidia-container-runtime" {
		t.Errorf("[hook] runtime is %q", p.Hook.Runtime)
	}
	if !strings.Contains(readFile(t, cfg), "muxflow-runtime") {
		t.Error("the containerd runtime was not added alongside")
	}
	// Everything else in the policy is as it was (comments included), and a backup is kept.
	if a, b := strings.Count(string(def), "\n"), strings.Count(readFile(t, pol), "\n"); a != b {
		t.Errorf("the policy went from %d to %d lines", a, b)
	}
	if readFile(t, pol+BackupSuffix) != string(def) {
		t.Error("no backup of the policy")
	}
	// --chain alone, and back to runc.
	configure(t, "--policy", pol, "--chain", "runc")
	if p, _ := policy.Load(pol); p.Hook.Runtime != "runc" {
		t.Errorf("[hook] runtime is %q after --chain runc", p.Hook.Runtime)
	}
	// A missing policy file: the setting alone is written.
	fresh := filepath.Join(dir, "new.toml")
	configure(t, "--policy", fresh, "--chain", "/opt/nvidia/nvidia-container-runtime")
	if p, err := policy.Load(fresh); err != nil || p.Hook.Runtime != "/opt/nvidia/nvidia-container-runtime" {
		t.Errorf("fresh policy: %v %+v", err, p)
	}
	for _, bad := range []string{"nvidia container runtime", "rel/path", "x\"y"} {
		var o, e bytes.Buffer
		if err := Configure([]string{"--policy", pol, "--chain", bad}, &o, &e); err == nil {
			t.Errorf("--chain %q accepted", bad)
		}
	}
}

// TestSetAsDefaultContainerd2: containerd 2 reads muxflow as its default CRI runtime from
// an edited version 3 file (see TestContainerd2AcceptsConfig for where containerd 2 comes
// from).
func TestSetAsDefaultContainerd2(t *testing.T) {
	bin := os.Getenv("MUXFLOW_CONTAINERD2")
	if bin == "" {
		bin = testenv.Artifact(t, "tools/containerd")
	}
	cfg := filepath.Join(t.TempDir(), "config.toml")
	os.WriteFile(cfg, []byte(v3Doc), 0o644)
	configure(t, "--runtime=containerd", "--config", cfg, "--set-as-default")
	dump, err := exec.Command(bin, "--config", cfg, "config", "dump").CombinedOutput()
	if err != nil {
		t.Fatalf("containerd 2 rejected the file: %v\n%s", err, dump)
	}
	if !strings.Contains(string(dump), `default_runtime_name = 'muxflow'`) {
		t.Errorf("containerd 2's default runtime is not muxflow:\n%s", dump)
	}
}
