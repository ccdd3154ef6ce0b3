package front

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/muxflow/muxflow/policy"
)

func TestConstantsMatchPolicy(t *testing.T) {
	if DefaultPolicyPath != policy.DefaultPath {
		t.Errorf("DefaultPolicyPath %q != policy.DefaultPath %q", DefaultPolicyPath, policy.DefaultPath)
	}
	if got := policy.Default().Hook.Runtime; got != DefaultRuntime {
		t.Errorf("DefaultRuntime %q != the embedded policy's %q", DefaultRuntime, got)
	}
	if rt, ok := scanRuntime(policy.DefaultTOML); !ok || rt != DefaultRuntime {
		t.Errorf("scanRuntime(default policy) = %q, %v", rt, ok)
	}
}

func TestScanRuntime(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      string
		ok        bool
	}{
		{"empty", "", "runc", true},
		{"basic", "[hook]\nruntime = \"crun\"\n", "crun", true},
		{"literal and comment", "[node]\nruntime = 'x'\n[hook] # the hook\n  runtime = '/usr/local/bin/crun' # ours\n", "/usr/local/bin/crun", true},
		{"other tables only", "[mps]\nenabled = false\n[hook.extra]\nruntime = \"no\"\n", "runc", true},
		{"dotted top-level", "hook.runtime = \"crun\"\n", "", false},
		{"inline table", "hook = { runtime = \"crun\" }\n", "", false},
		{"quoted key", "[hook]\n\"runtime\" = \"crun\"\n", "", false},
		{"quoted header", "[\"hook\"]\nruntime = \"crun\"\n", "", false},
		{"escape", "[hook]\nruntime = \"c\\u0072un\"\n", "", false},
		{"twice", "[hook]\nruntime = \"a\"\nruntime = \"b\"\n", "", false},
		{"multi-line string", "[hook]\nruntime = \"\"\"crun\"\"\"\n", "", false},
		{"trailing junk", "[hook]\nruntime = \"crun\" x\n", "", false},
		{"array of tables", "[[hook]]\nruntime = \"crun\"\n", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := scanRuntime(tc.doc)
			if got != tc.want || ok != tc.ok {
				t.Errorf("scanRuntime = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
			// Whenever the scanner is sure, the real decoder agrees.
			if ok {
				if p, err := policy.Parse([]byte(tc.doc), "t.toml"); err == nil && p.Hook.Runtime != got {
					t.Errorf("policy.Parse says %q", p.Hook.Runtime)
				}
			}
		})
	}
}

func FuzzScanRuntime(f *testing.F) {
	f.Add(policy.DefaultTOML)
	f.Add("[hook]\nruntime = 'crun'\n")
	f.Add("hook.runtime = \"x\"\n")
	f.Fuzz(func(t *testing.T, doc string) {
		got, ok := scanRuntime(doc)
		if !ok {
			return
		}
		p, err := policy.Parse([]byte(doc), "fuzz.toml")
		if err == nil && p.Hook.Runtime != got {
			t.Fatalf("scanRuntime = %q, the policy decoder says %q\n%s", got, p.Hook.Runtime, doc)
		}
	})
}

type call struct {
	Path string
	Argv []string
}

func setup(t *testing.T, policyDoc string) (*Front, *[]call, string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.MkdirAll(bin, 0o755)
	for _, n := range []string{"muxflow-runtime", HookName, "myrunc"} {
		os.WriteFile(filepath.Join(bin, n), []byte("#!/bin/sh\n"), 0o755)
	}
	pol := filepath.Join(dir, "policy.toml")
	os.WriteFile(pol, []byte(strings.ReplaceAll(policyDoc, "BIN", bin)), 0o644)
	var calls []call
	f := &Front{
		Exec:   func(path string, argv, _ []string) error { calls = append(calls, call{path, argv}); return nil },
		Self:   filepath.Join(bin, "muxflow-runtime"),
		Cwd:    dir,
		Getenv: func(k string) string { return map[string]string{PolicyEnv: pol}[k] },
		Stderr: &bytes.Buffer{},
	}
	return f, &calls, dir
}

func bundle(t *testing.T, dir string, spec any) string {
	t.Helper()
	b := filepath.Join(dir, "bundle")
	os.MkdirAll(b, 0o755)
	data, _ := json.Marshal(spec)
	os.WriteFile(filepath.Join(b, "config.json"), data, 0o644)
	return b
}

func TestFrontDecides(t *testing.T) {
	plain := map[string]any{"process": map[string]any{"env": []string{"PATH=/bin"}}}
	gpu := map[string]any{"process": map[string]any{"env": []string{"NVIDIA_VISIBLE_DEVICES=0"}}}
	bad := map[string]any{"process": map[string]any{"env": []string{"NVIDIA_VISIBLE_DEVICES=../x"}}}
	const goodPolicy = "[hook]\nruntime = \"BIN/myrunc\"\n"
	for _, tc := range []struct {
		name   string
		policy string
		spec   any
		args   func(b string) []string
		// wantHook: handed to the full wrapper; else to the runtime.
		wantHook bool
	}{
		{"non-GPU create", goodPolicy, plain, func(b string) []string { return []string{"--log", "l", "create", "--bundle", b, "c1"} }, false},
		{"GPU create", goodPolicy, gpu, func(b string) []string { return []string{"create", "--bundle", b, "c1"} }, true},
		{"GPU run", goodPolicy, gpu, func(b string) []string { return []string{"run", "-b", b, "c1"} }, true},
		{"bad GPU request", goodPolicy, bad, func(b string) []string { return []string{"create", "--bundle", b, "c1"} }, true},
		{"crun --config", goodPolicy, plain, func(b string) []string {
			return []string{"create", "--config", b + "/config.json", "--bundle", b, "c1"}
		}, true},
		{"delete", goodPolicy, plain, func(string) []string { return []string{"delete", "--force", "c1"} }, false},
		{"unparseable args", goodPolicy, plain, func(string) []string { return []string{"create"} }, true},
		{"missing bundle", goodPolicy, plain, func(b string) []string { return []string{"create", "--bundle", b + "/nope", "c1"} }, true},
		{"not json", goodPolicy, "not an object", func(b string) []string { return []string{"create", "--bundle", b, "c1"} }, true},
		{"policy unsure", "hook.runtime = \"BIN/myrunc\"\n", plain, func(b string) []string { return []string{"create", "--bundle", b, "c1"} }, true},
		{"runtime is self", "[hook]\nruntime = \"BIN/muxflow-runtime\"\n", plain, func(string) []string { return []string{"state", "c1"} }, true},
		{"runtime missing", "[hook]\nruntime = \"BIN/none\"\n", plain, func(string) []string { return []string{"state", "c1"} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, calls, dir := setup(t, tc.policy)
			b := bundle(t, dir, tc.spec)
			orig, _ := os.ReadFile(filepath.Join(b, "config.json"))
			args := tc.args(b)
			if err := f.Run(args); err != nil {
				t.Fatal(err)
			}
			bin := filepath.Dir(f.Self)
			want := []call{{filepath.Join(bin, "myrunc"), append([]string{"myrunc"}, args...)}}
			if tc.wantHook {
				want = []call{{filepath.Join(bin, HookName), append([]string{HookName, WrapperCommand}, args...)}}
			}
			if diff := cmp.Diff(want, *calls); diff != "" {
				t.Errorf("exec (-want +got):\n%s", diff)
			}
			if got, _ := os.ReadFile(filepath.Join(b, "config.json")); !bytes.Equal(got, orig) {
				t.Error("the first stage changed config.json")
			}
		})
	}
}

func TestFrontSymlinkedConfigGoesToWrapper(t *testing.T) {
	f, calls, dir := setup(t, "[hook]\nruntime = \"BIN/myrunc\"\n")
	outside := filepath.Join(dir, "outside.json")
	os.WriteFile(outside, []byte(`{"process":{"env":[]}}`), 0o644)
	b := filepath.Join(dir, "b")
	os.MkdirAll(b, 0o755)
	os.Symlink(outside, filepath.Join(b, "config.json"))
	if err := f.Run([]string{"create", "--bundle", b, "c1"}); err != nil {
		t.Fatal(err)
	}
	if len(*calls) != 1 || filepath.Base((*calls)[0].Path) != HookName {
		t.Errorf("exec = %+v; a config.json outside the bundle must go to the wrapper (which refuses it)", *calls)
	}
}

func TestFrontWithoutHookFailsClearly(t *testing.T) {
	f, calls, dir := setup(t, "[hook]\nruntime = \"BIN/myrunc\"\n")
	os.Remove(filepath.Join(filepath.Dir(f.Self), HookName))
	b := bundle(t, dir, map[string]any{"process": map[string]any{"env": []string{"NVIDIA_VISIBLE_DEVICES=0"}}})
	log := filepath.Join(dir, "log.json")
	err := f.Run([]string{"--log", log, "--log-format", "json", "create", "--bundle", b, "c1"})
	if err == nil || !strings.Contains(err.Error(), "muxflow-hook is not installed") || len(*calls) != 0 {
		t.Fatalf("err = %v, calls %v", err, *calls)
	}
	var entry map[string]string
	data, _ := os.ReadFile(log)
	if json.Unmarshal(bytes.TrimSpace(data), &entry); entry["level"] != "error" || entry["msg"] != err.Error() {
		t.Errorf("runtime log = %s", data)
	}
}
