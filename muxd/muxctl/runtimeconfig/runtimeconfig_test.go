package runtimeconfig

import (
	"bytes"
	"github.com/muxflow/muxflow/tests/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
)

const bin = "/usr/bin/muxflow-runtime"

const v2Doc = `version = 2
# operator's comment, kept
root = "/var/lib/containerd"
imports = [
  ["not", "a", "header"],
]

[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"   # trailing comment

  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      BinaryName = ""
      Description = """
[plugins.not.a.header]
"""
`

const v3Doc = `version = 3

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'
`

func TestEditContainerdAddsAndRemoves(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		prefix    []string
	}{
		{"v2", v2Doc, runtimePath(2)},
		{"v3", v3Doc, runtimePath(3)},
		{"v2 minimal", "version = 2\n", runtimePath(2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := editContainerd(tc.doc, bin, false)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(out, tc.doc) {
				t.Errorf("the original text is not kept verbatim:\n%s", out)
			}
			var m map[string]any
			if _, err := toml.Decode(out, &m); err != nil {
				t.Fatal(err)
			}
			got, _ := lookup(m, tc.prefix)
			want := map[string]any{
				"runtime_type":    "io.containerd.runc.v2",
				"pod_annotations": []any{"muxflow.io/*"},
				"options":         map[string]any{"BinaryName": bin},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("runtime entry (-want +got):\n%s", diff)
			}
			again, err := editContainerd(out, bin, false)
			if err != nil || again != out {
				t.Errorf("second add is not a no-op (err %v):\n%s", err, cmp.Diff(out, again))
			}
			back, err := editContainerd(out, bin, true)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.doc, back); diff != "" {
				t.Errorf("remove does not restore the original (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEditContainerdReplacesOldEntry(t *testing.T) {
	old := v2Doc + `
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.muxflow]
  runtime_type = "io.containerd.runc.v1"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.muxflow.options]
    BinaryName = "/old/muxflow-runtime"

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/opt/cni/bin"
`
	out, err := editContainerd(old, bin, false)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "/old/") || strings.Count(out, "runtimes.muxflow]") != 1 {
		t.Errorf("old entry not replaced:\n%s", out)
	}
	if !strings.Contains(out, "[plugins.\"io.containerd.grpc.v1.cri\".cni]\n  bin_dir = \"/opt/cni/bin\"") {
		t.Errorf("table after the old entry lost:\n%s", out)
	}
}

func TestEditContainerdRefuses(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"version 1", "root = \"/x\"\n", "version 1"},
		{"version 4", "version = 4\n", "version 4 is not supported"},
		{"not toml", "version = 2\n[[[\n", "not valid TOML"},
		{"inline entry", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes]\n  muxflow = { runtime_type = \"x\" }\n", "by hand"},
		{"dotted entry", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes]\nmuxflow.runtime_type = \"x\"\n", "by hand"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := editContainerd(tc.doc, bin, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestEditDocker(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"empty file", "", "{\n  \"runtimes\": {\n    \"muxflow\": {\n      \"path\": \"/usr/bin/muxflow-runtime\"\n    }\n  }\n}\n"},
		{"keeps keys and order",
			`{"log-driver":"json-file","runtimes":{"nvidia":{"path":"nvidia-container-runtime","runtimeArgs":[]}},"data-root":"/srv/docker","default-ulimits":{"nofile":{"Hard":65536,"Name":"nofile","Soft":1.5e3}}}`,
			`{
  "log-driver": "json-file",
  "runtimes": {
    "nvidia": {
      "path": "nvidia-container-runtime",
      "runtimeArgs": []
    },
    "muxflow": {
      "path": "/usr/bin/muxflow-runtime"
    }
  },
  "data-root": "/srv/docker",
  "default-ulimits": {
    "nofile": {
      "Hard": 65536,
      "Name": "nofile",
      "Soft": 1.5e3
    }
  }
}
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := editDocker(tc.in, bin, false)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, out); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if again, _ := editDocker(out, bin, false); again != out {
				t.Errorf("second add changed the file:\n%s", again)
			}
			back, err := editDocker(out, bin, true)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(back, "muxflow") {
				t.Errorf("remove left the runtime:\n%s", back)
			}
			var ref bytes.Buffer
			if tc.in != "" {
				if err := jsonIndent(&ref, tc.in); err != nil {
					t.Fatal(err)
				}
			} else {
				ref.WriteString("{}\n")
			}
			if diff := cmp.Diff(ref.String(), back); diff != "" {
				t.Errorf("remove does not give back the original (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEditDockerRefuses(t *testing.T) {
	for _, in := range []string{`[1]`, `{"a":1,"a":2}`, `{"runtimes":[]}`, `{"a":1} {"b":2}`, `{"a":`} {
		if _, err := editDocker(in, bin, false); err == nil {
			t.Errorf("editDocker(%q) accepted it", in)
		}
	}
}

func TestConfigureFiles(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(v2Doc), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		err := Configure(args, &out, &errb)
		return out.String() + errb.String(), err
	}
	out, err := run("--runtime=containerd", "--config", cfg, "--dry-run")
	if err != nil || !strings.Contains(out, "BinaryName = '/usr/bin/muxflow-runtime'") {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(cfg); string(b) != v2Doc {
		t.Fatal("dry run wrote the file")
	}
	out, err = run("--runtime=containerd", "--config", cfg)
	if err != nil || !strings.Contains(out, "systemctl restart containerd") {
		t.Fatalf("configure: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(cfg + BackupSuffix); string(b) != v2Doc {
		t.Error("backup does not hold the previous file")
	}
	if st, _ := os.Stat(cfg); st.Mode().Perm() != 0o600 {
		t.Errorf("mode changed to %v", st.Mode().Perm())
	}
	if out, err = run("--runtime=containerd", "--config", cfg); err != nil || !strings.Contains(out, "nothing changed") {
		t.Errorf("second run: %v\n%s", err, out)
	}
	if _, err = run("--runtime=containerd", "--config", cfg, "--remove"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(cfg); string(b) != v2Doc {
		t.Errorf("remove did not restore the file:\n%s", b)
	}
	// A missing daemon.json is created.
	dj := filepath.Join(dir, "docker", "daemon.json")
	if _, err := run("--runtime=docker", "--config", dj, "--binary=/opt/mf/muxflow-runtime"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dj); !strings.Contains(string(b), `"path": "/opt/mf/muxflow-runtime"`) {
		t.Errorf("daemon.json:\n%s", b)
	}
	for _, bad := range [][]string{
		{"--runtime=cri-o"},
		{"--runtime=docker", "--binary=relative/path"},
		{"--runtime=docker", "--binary=/a'b"},
		{"--runtime=docker", "extra"},
	} {
		if _, err := run(append(bad, "--config", dj)...); err == nil {
			t.Errorf("Configure(%q) accepted it", bad)
		}
	}
}

// TestContainerdAcceptsConfig asks the real containerd to load the edited files.
func TestContainerdAcceptsConfig(t *testing.T) {
	containerd, err := exec.LookPath("containerd")
	if err != nil {
		t.Fatal("containerd is not installed; run tests/deps.sh (as root)")
	}
	def, err := exec.Command(containerd, "config", "default").Output()
	if err != nil {
		t.Fatalf("containerd config default: %v", err)
	}
	for _, tc := range []struct{ name, doc, want string }{
		{"v2", string(def), `[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.muxflow.options]`},
		// containerd 1.6 (Debian 12) loads a version 3 file but drops the plugins it does not
		// have, so here only "it loads" is checked; the tables containerd 2.x reads are
		// checked by TestEditContainerdAddsAndRemoves.
		{"v3", v3Doc, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "config.toml")
			if err := os.WriteFile(cfg, []byte(tc.doc), 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			if err := Configure([]string{"--runtime=containerd", "--config", cfg}, &out, &errb); err != nil {
				t.Fatal(err)
			}
			dump, err := exec.Command(containerd, "--config", cfg, "config", "dump").CombinedOutput()
			if err != nil {
				t.Fatalf("containerd config dump rejected the file: %v\n%s", err, dump)
			}
			d := string(dump)
			if tc.want == "" {
				return
			}
			for _, w := range []string{tc.want, `BinaryName = "/usr/bin/muxflow-runtime"`, `pod_annotations = ["muxflow.io/*"]`} {
				if !strings.Contains(d, w) {
					t.Errorf("dump lacks %s:\n%s", w, d)
				}
			}
		})
	}
}

// FuzzEditContainerd: on any input the editor either refuses or returns a file in which
// the muxflow runtime is exactly right and nothing else changed (editContainerd checks
// both by decoding); removing it again must then succeed.
func FuzzEditContainerd(f *testing.F) {
	f.Add(v2Doc)
	f.Add(v3Doc)
	f.Add("version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.muxflow]\nx = '''\n[a]\n'''\n")
	f.Fuzz(func(t *testing.T, doc string) {
		out, err := editContainerd(doc, bin, false)
		if err != nil {
			return
		}
		if _, err := editContainerd(out, bin, true); err != nil {
			t.Fatalf("cannot remove what was added: %v\n%s", err, out)
		}
	})
}

// TestContainerd2AcceptsConfig: containerd 2 must read the muxflow runtime from an edited
// version 3 file and from an edited version 2 file it migrates. Debian 12 ships
// containerd 1.6, which drops version 3 tables it does not know, so `make test` builds
// containerd 2 from source into build/tools (or $MUXFLOW_CONTAINERD2 names one).
func TestContainerd2AcceptsConfig(t *testing.T) {
	bin := os.Getenv("MUXFLOW_CONTAINERD2")
	if bin == "" {
		bin = testenv.Artifact(t, "tools/containerd")
	}
	v2 := "version = 2\n# comment\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  default_runtime_name = \"runc\"\n"
	for name, doc := range map[string]string{"v2": v2, "v3": v3Doc} {
		t.Run(name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "config.toml")
			if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			if err := Configure([]string{"--runtime=containerd", "--config", cfg}, &out, &errb); err != nil {
				t.Fatal(err)
			}
			dump, err := exec.Command(bin, "--config", cfg, "config", "dump").CombinedOutput()
			if err != nil {
				t.Fatalf("containerd 2 rejected the file: %v\n%s", err, dump)
			}
			for _, w := range []string{
				`[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.muxflow.options]`,
				`BinaryName = '/usr/bin/muxflow-runtime'`,
				`pod_annotations = ['muxflow.io/*']`,
			} {
				if !strings.Contains(string(dump), w) {
					t.Errorf("dump lacks %s", w)
				}
			}
		})
	}
}
