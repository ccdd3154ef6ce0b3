package extender

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	schedv1 "k8s.io/kube-scheduler/config/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/muxflow/muxflow/matcher/dataset"
)

// decodeYAML decodes one YAML document into a Kubernetes type the way the
// API machinery would: YAML → JSON → the type's JSON tags, unknown fields
// rejected, so a misspelt field in the docs fails here.
func decodeYAML(t *testing.T, doc []byte, out any) {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(doc, &v); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		t.Fatalf("%v\n%s", err, js)
	}
}

func manifest(t *testing.T, name string) []byte {
	t.Helper()
	root, err := dataset.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "matcher", "docs", "manifests", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDocumentedSchedulerConfigReachesHandlers checks the example
// KubeSchedulerConfiguration against the real config types and sends the
// documented verbs to the handler the way kube-scheduler builds its URLs
// (urlPrefix + "/" + verb).
func TestDocumentedSchedulerConfigReachesHandlers(t *testing.T) {
	var cfg schedv1.KubeSchedulerConfiguration
	decodeYAML(t, manifest(t, "kube-scheduler-config.yaml"), &cfg)
	if len(cfg.Extenders) != 1 {
		t.Fatalf("%d extenders in the documented config, want 1", len(cfg.Extenders))
	}
	ext := cfg.Extenders[0]
	if !strings.HasSuffix(ext.URLPrefix, ":8888") || ext.FilterVerb == "" || ext.PrioritizeVerb == "" || ext.BindVerb != "bind" {
		t.Fatalf("extender config %+v", ext)
	}
	s := NewServer(nil)
	s.SetPlan(testPlan(), nil)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	for _, verb := range []string{ext.FilterVerb, ext.PrioritizeVerb} {
		resp, err := http.Post(ts.URL+"/"+verb, "application/json", strings.NewReader(cachedBody))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("documented verb %q: status %d", verb, resp.StatusCode)
		}
	}
}

// TestDocumentedOfflinePod checks that the example pod is a valid Pod whose
// annotations muxmatch accepts, and that filter places it per the plan.
func TestDocumentedOfflinePod(t *testing.T) {
	var pod corev1.Pod
	decodeYAML(t, manifest(t, "offline-pod.yaml"), &pod)
	job, offline, err := jobOf(&pod)
	if err != nil || !offline {
		t.Fatalf("documented pod: offline=%v err=%v", offline, err)
	}
	if job.ID != "batch/resnet-train-7" || job.MemoryMiB != 8192 || len(job.GPUTypes) != 2 || job.Profile.GPUUtil != 97.7 {
		t.Errorf("job from the documented pod: %+v", job)
	}
	s := NewServer(nil)
	s.SetPlan(testPlan(), nil)
	names := []string{"gpu-a", "gpu-b"}
	body, _ := json.Marshal(extenderv1.ExtenderArgs{Pod: &pod, NodeNames: &names})
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/filter", bytes.NewReader(body)))
	var res extenderv1.ExtenderFilterResult
	if err := json.NewDecoder(rec.Body).Decode(&res); err != nil {
		t.Fatal(err)
	}
	if res.NodeNames == nil || len(*res.NodeNames) != 1 || (*res.NodeNames)[0] != "gpu-b" {
		t.Errorf("filter result %+v", res)
	}
}
