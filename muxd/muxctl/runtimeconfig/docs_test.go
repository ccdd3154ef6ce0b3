package runtimeconfig

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/muxflow/muxflow/policy"
	"github.com/muxflow/muxflow/policy/classify"
	"github.com/muxflow/muxflow/tests/testenv"
)

// TestDocsMatchTheCode keeps docs/kubernetes.md and its example manifests in step with
// what the tool writes and what the runtime accepts.
func TestDocsMatchTheCode(t *testing.T) {
	docs := filepath.Join(testenv.Root(t), "docs")
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(docs, name))
		if err != nil {
			t.Fatalf("docs: %v", err)
		}
		return string(b)
	}
	guide := read("kubernetes.md")
	if !strings.Contains(guide, block(runtimePath(2), DefaultBinary)) {
		t.Errorf("kubernetes.md does not show the exact block the tool writes:\n%s", block(runtimePath(2), DefaultBinary))
	}
	if rc := read("examples/runtimeclass.yaml"); !strings.Contains(rc, "handler: "+RuntimeName+"\n") {
		t.Errorf("runtimeclass.yaml's handler is not %q", RuntimeName)
	}
	p := policy.Default()
	ann := regexp.MustCompile(`(?m)^\s+(muxflow\.io/[a-z-]+): "?([^"\n]+)"?$`)
	for _, name := range []string{"examples/online-inference.yaml", "examples/offline-training.yaml"} {
		y := read(name)
		if !strings.Contains(y, "runtimeClassName: "+RuntimeName+"\n") {
			t.Errorf("%s does not use the muxflow RuntimeClass", name)
		}
		got := map[string]string{}
		for _, m := range ann.FindAllStringSubmatch(y, -1) {
			got[m[1]] = m[2]
		}
		if got[p.Classify.ClassAnnotation] == "" {
			t.Errorf("%s has no %s annotation", name, p.Classify.ClassAnnotation)
		}
		for k := range got {
			if k != p.Classify.ClassAnnotation && k != p.Classify.MemoryAnnotation && k != p.Classify.SMAnnotation {
				t.Errorf("%s uses annotation %s, which the default policy does not read", name, k)
			}
		}
		if _, _, err := classify.Classify(got, p); err != nil {
			t.Errorf("%s: the default policy refuses its annotations: %v", name, err)
		}
	}
}
