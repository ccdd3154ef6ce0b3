package extender

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// fakeAPI records the requests a Kube client makes.
type fakeAPI struct {
	mu   sync.Mutex
	reqs []string // "METHOD PATH BODY"
	fail string   // a path prefix answered 409
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.reqs = append(f.reqs, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type")+" "+r.Header.Get("Authorization")+" "+string(body))
	fail := f.fail
	f.mu.Unlock()
	if fail != "" && strings.HasPrefix(r.URL.Path, fail) {
		w.WriteHeader(http.StatusConflict)
		w.Write([]byte(`{"kind":"Status","message":"Precondition failed: UID in precondition: x, UID in object meta: y"}`))
		return
	}
	w.Write([]byte(`{}`))
}

func newKubeFor(t *testing.T, api http.Handler) *Kube {
	ts := httptest.NewServer(api)
	t.Cleanup(ts.Close)
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("s3cret\n"), 0o600)
	k, err := NewKube(ts.URL, tok, "")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestBindRecordsPlannedGPU(t *testing.T) {
	s, ts := newTestServer(t)
	api := &fakeAPI{}
	s.Kube = newKubeFor(t, api)
	s.SetPlan(testPlan(), nil)

	var res extenderv1.ExtenderBindingResult
	post(t, ts.URL+"/bind", `{"PodName":"resnet-train-7","PodNamespace":"batch","PodUID":"u-1","Node":"gpu-b"}`, &res)
	if res.Error != "" {
		t.Fatal(res.Error)
	}
	if len(api.reqs) != 2 {
		t.Fatalf("requests = %q, want a patch then a binding", api.reqs)
	}
	patch, bind := api.reqs[0], api.reqs[1]
	if !strings.HasPrefix(patch, "PATCH /api/v1/namespaces/batch/pods/resnet-train-7 application/merge-patch+json Bearer s3cret ") ||
		!strings.Contains(patch, `"muxflow.io/gpu":"GPU-9"`) || !strings.Contains(patch, `"muxflow.io/plan-generation":"3"`) || !strings.Contains(patch, `"uid":"u-1"`) {
		t.Errorf("patch = %s", patch)
	}
	var b struct {
		Metadata struct{ Name, UID string }
		Target   struct{ Kind, Name string }
	}
	body := bind[strings.Index(bind, "{"):]
	json.Unmarshal([]byte(body), &b)
	if !strings.HasPrefix(bind, "POST /api/v1/namespaces/batch/pods/resnet-train-7/binding ") || b.Target.Name != "gpu-b" || b.Target.Kind != "Node" || b.Metadata.UID != "u-1" {
		t.Errorf("binding = %s", bind)
	}

	// An online pod (or any pod outside the plan) is only bound.
	api.reqs = nil
	post(t, ts.URL+"/bind", `{"PodName":"web-0","PodNamespace":"prod","PodUID":"u-2","Node":"gpu-a"}`, &res)
	if res.Error != "" || len(api.reqs) != 1 || !strings.HasPrefix(api.reqs[0], "POST /api/v1/namespaces/prod/pods/web-0/binding") {
		t.Errorf("online pod: %q, %v", api.reqs, res.Error)
	}

	// A node other than the plan's is refused, and nothing is written.
	api.reqs = nil
	post(t, ts.URL+"/bind", `{"PodName":"resnet-train-7","PodNamespace":"batch","PodUID":"u-1","Node":"gpu-a"}`, &res)
	if !strings.Contains(res.Error, "muxflow plan 3 places pod batch/resnet-train-7 on gpu-b, not gpu-a") || len(api.reqs) != 0 {
		t.Errorf("wrong node: %q, %v", api.reqs, res.Error)
	}

	// The API's refusal reaches kube-scheduler.
	api.fail = "/api/v1/namespaces/batch/pods/resnet-train-7"
	post(t, ts.URL+"/bind", `{"PodName":"resnet-train-7","PodNamespace":"batch","PodUID":"u-1","Node":"gpu-b"}`, &res)
	if !strings.Contains(res.Error, "record the planned GPU on pod batch/resnet-train-7") || !strings.Contains(res.Error, "Precondition failed") {
		t.Errorf("refused patch: %v", res.Error)
	}
}

func TestBindWithoutKube(t *testing.T) {
	_, ts := newTestServer(t)
	var res extenderv1.ExtenderBindingResult
	post(t, ts.URL+"/bind", `{"PodName":"a","PodNamespace":"b","Node":"n"}`, &res)
	if !strings.Contains(res.Error, "--kube-server") {
		t.Errorf("error = %q", res.Error)
	}
}

func TestRequeueNudgesNewlyPlacedPodsOnce(t *testing.T) {
	s, ts := newTestServer(t)
	api := &fakeAPI{}
	s.Kube = newKubeFor(t, api)
	s.SetPlan(testPlan(), nil)
	var res extenderv1.ExtenderFilterResult
	post(t, ts.URL+"/filter", filterBody, &res) // the extender sees batch/resnet-train-7
	s.Requeue(context.Background())
	if len(api.reqs) != 1 || !strings.HasPrefix(api.reqs[0], "PATCH /api/v1/namespaces/batch/pods/resnet-train-7 ") ||
		!strings.Contains(api.reqs[0], `{"metadata":{"annotations":{"muxflow.io/plan-generation":"3"}}}`) {
		t.Fatalf("requests = %q", api.reqs)
	}
	s.Requeue(context.Background())
	if len(api.reqs) != 1 {
		t.Errorf("the pod was nudged again: %q", api.reqs)
	}
}
