package extender

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/muxflow/muxflow/matcher/plan"
	"github.com/muxflow/muxflow/matcher/profile"
)

// filterBody is an ExtenderArgs body as kube-scheduler's HTTPExtender sends
// it for an extender without a node cache: the whole Pod and a NodeList, Go
// field names as keys (the types have no json tags), NodeNames null.
const filterBody = `{"Pod":{"metadata":{"name":"resnet-train-7","namespace":"batch","uid":"2c1f0a4e-8d1b-4f7e-9a57-3b1e1c7d9f10",
 "resourceVersion":"48213","creationTimestamp":"2026-11-29T09:00:00Z",
 "labels":{"app":"resnet-train"},
 "annotations":{"muxflow.io/class":"offline","muxflow.io/gpu-memory":"8GiB","muxflow.io/gpu-type":"H200, A100",
   "muxflow.io/profile":"{\"gpu_util\":60,\"mem_bw_util\":25,\"memory_mib\":6000,\"batch_size\":64}"}},
 "spec":{"containers":[{"name":"train","image":"pytorch/pytorch:2.5","resources":{"limits":{"nvidia.com/gpu":"1"},"requests":{"cpu":"4","memory":"16Gi","nvidia.com/gpu":"1"}}}],
   "restartPolicy":"Never","schedulerName":"default-scheduler","runtimeClassName":"muxflow","priority":0,
   "tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}]},
 "status":{"phase":"Pending","qosClass":"Burstable"}},
 "Nodes":{"metadata":{"resourceVersion":"99"},"items":[
  {"metadata":{"name":"gpu-a","labels":{"kubernetes.io/hostname":"gpu-a","nvidia.com/gpu.product":"H200"}},
   "spec":{"podCIDR":"10.244.1.0/24"},
   "status":{"capacity":{"cpu":"64","memory":"512Gi","nvidia.com/gpu":"8"},"allocatable":{"cpu":"63","memory":"500Gi","nvidia.com/gpu":"8"},
     "conditions":[{"type":"Ready","status":"True","lastHeartbeatTime":"2026-11-29T09:00:00Z","lastTransitionTime":"2026-11-01T00:00:00Z","reason":"KubeletReady","message":"kubelet is posting ready status"}]}},
  {"metadata":{"name":"gpu-b","labels":{"kubernetes.io/hostname":"gpu-b"}},"spec":{},"status":{"allocatable":{"nvidia.com/gpu":"8"}}},
  {"metadata":{"name":"cpu-c","labels":{"kubernetes.io/hostname":"cpu-c"}},"spec":{},"status":{}}]},
 "NodeNames":null}`

// cachedBody is the node-cache-capable form: NodeNames instead of Nodes.
const cachedBody = `{"Pod":{"metadata":{"name":"resnet-train-7","namespace":"batch",
 "annotations":{"muxflow.io/class":"offline","muxflow.io/profile":"{\"gpu_util\":60,\"mem_bw_util\":25,\"memory_mib\":6000}"}},
 "spec":{"containers":[{"name":"train","image":"x"}]},"status":{}},
 "Nodes":null,"NodeNames":["gpu-a","gpu-b","cpu-c"]}`

const onlineBody = `{"Pod":{"metadata":{"name":"web-0","namespace":"prod","annotations":{"muxflow.io/class":"online"}},"spec":{"containers":[{"name":"s","image":"x"}]},"status":{}},
 "Nodes":null,"NodeNames":["gpu-a","gpu-b"]}`

func testPlan() *plan.Plan {
	return &plan.Plan{Generation: 3, Assignments: []plan.Assignment{
		{Job: "batch/other", Node: "gpu-a", GPU: "GPU-1"},
		{Job: "batch/resnet-train-7", Node: "gpu-b", GPU: "GPU-9", GPUType: "H200", Tput: 0.8, OnlineTput: 0.9, Weight: 0.8},
	}, Unassigned: map[string]string{"batch/late": plan.ReasonOutbid}}
}

func newTestServer(t *testing.T) (*Server, *httptest.Server) {
	t.Helper()
	s := NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, ts
}

func post(t *testing.T, url, body string, out any) int {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode
}

func nodeNames(r extenderv1.ExtenderFilterResult) []string {
	if r.NodeNames != nil {
		return *r.NodeNames
	}
	var out []string
	for _, n := range r.Nodes.Items {
		out = append(out, n.Name)
	}
	return out
}

func TestFilterFollowsPlan(t *testing.T) {
	for _, tc := range []struct{ name, body string }{{"node list", filterBody}, {"node names", cachedBody}} {
		t.Run(tc.name, func(t *testing.T) {
			s, ts := newTestServer(t)
			s.SetPlan(testPlan(), nil)
			var res extenderv1.ExtenderFilterResult
			if code := post(t, ts.URL+"/filter", tc.body, &res); code != 200 {
				t.Fatalf("status %d", code)
			}
			if res.Error != "" {
				t.Fatalf("error %q", res.Error)
			}
			if diff := cmp.Diff([]string{"gpu-b"}, nodeNames(res)); diff != "" {
				t.Errorf("kept nodes (-want +got):\n%s", diff)
			}
			if (tc.body == filterBody) != (res.Nodes != nil) {
				t.Errorf("answer form does not match the request form: %+v", res)
			}
			if len(res.FailedNodes) != 2 || !strings.Contains(res.FailedNodes["gpu-a"], "places this pod on gpu-b") {
				t.Errorf("failed nodes %v", res.FailedNodes)
			}
			// Full node objects come back intact for the non-cached form.
			if res.Nodes != nil && res.Nodes.Items[0].Status.Allocatable.Name("nvidia.com/gpu", "").String() != "8" {
				t.Errorf("node object changed: %+v", res.Nodes.Items[0].Status)
			}
		})
	}
}

func TestFilterUnplannedAndOnline(t *testing.T) {
	s, ts := newTestServer(t)
	var res extenderv1.ExtenderFilterResult
	post(t, ts.URL+"/filter", filterBody, &res)
	if len(nodeNames(res)) != 0 || !strings.Contains(res.FailedNodes["gpu-a"], "waiting for the muxflow matcher") {
		t.Fatalf("unplanned offline pod passed: %+v", res)
	}
	// The pod is remembered as a pending job with its annotations applied.
	jobs := s.PendingJobs(time.Now())
	want := []plan.Job{{ID: "batch/resnet-train-7", MemoryMiB: 8192, GPUTypes: []string{"H200", "A100"},
		Profile: profile.Profile{GPUUtil: 60, MemBWUtil: 25, MemoryMiB: 6000, BatchSize: 64}}}
	if diff := cmp.Diff(want, jobs); diff != "" {
		t.Errorf("pending jobs (-want +got):\n%s", diff)
	}
	if got := s.PendingJobs(time.Now().Add(time.Hour)); len(got) != 0 {
		t.Errorf("stale pending jobs kept: %v", got)
	}

	// Without WaitForPlan, nodes with an eligible GPU pass.
	s.WaitForPlan = false
	s.SetPlan(&plan.Plan{}, []profile.NodeReport{
		{Node: profile.NodeInfo{Name: "gpu-a"}, GPUs: []profile.GPUReport{{UUID: "G1", Type: "H200", MemoryTotalMiB: 80000, MemoryFreeMiB: 4000, Health: profile.Healthy}}},
		{Node: profile.NodeInfo{Name: "gpu-b"}, GPUs: []profile.GPUReport{{UUID: "G2", Type: "H200", MemoryTotalMiB: 80000, MemoryFreeMiB: 40000, Health: profile.Healthy}}},
	})
	res = extenderv1.ExtenderFilterResult{}
	post(t, ts.URL+"/filter", filterBody, &res)
	if diff := cmp.Diff([]string{"gpu-b"}, nodeNames(res)); diff != "" {
		t.Errorf("fallback filter (-want +got):\n%s", diff)
	}

	// Online pods are not steered.
	res = extenderv1.ExtenderFilterResult{}
	post(t, ts.URL+"/filter", onlineBody, &res)
	if diff := cmp.Diff([]string{"gpu-a", "gpu-b"}, nodeNames(res)); diff != "" {
		t.Errorf("online pod (-want +got):\n%s", diff)
	}
}

func TestFilterRejectsBadRequests(t *testing.T) {
	_, ts := newTestServer(t)
	tests := []struct{ name, body, want string }{
		{"not json", "{", "decode extender args"},
		{"no pod", `{"NodeNames":["a"]}`, "without a pod"},
		{"no nodes", `{"Pod":{"metadata":{"name":"p"}}}`, "without candidate nodes"},
		{"bad profile", strings.Replace(cachedBody, `\"gpu_util\":60`, `\"gpu_util\":600`, 1), "gpu_util"},
		{"unknown profile field", strings.Replace(cachedBody, `\"gpu_util\":60`, `\"gpu_utilisation\":60`, 1), "unknown field"},
		{"bad memory", strings.Replace(filterBody, `"8GiB"`, `"lots"`, 1), "annotation muxflow.io/gpu-memory: \"lots\" is not a size"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var res extenderv1.ExtenderFilterResult
			if code := post(t, ts.URL+"/filter", tc.body, &res); code != 200 {
				t.Fatalf("status %d", code)
			}
			if !strings.Contains(res.Error, tc.want) {
				t.Fatalf("Error = %q, want it to contain %q", res.Error, tc.want)
			}
		})
	}
	if code := post(t, ts.URL+"/prioritize", "{", nil); code != http.StatusBadRequest {
		t.Errorf("prioritize bad body: status %d", code)
	}
}

func TestPrioritize(t *testing.T) {
	s, ts := newTestServer(t)
	s.SetPlan(testPlan(), nil)
	var got extenderv1.HostPriorityList
	if code := post(t, ts.URL+"/prioritize", filterBody, &got); code != 200 {
		t.Fatalf("status %d", code)
	}
	want := extenderv1.HostPriorityList{{Host: "gpu-a", Score: 0}, {Host: "gpu-b", Score: 10}, {Host: "cpu-c", Score: 0}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// The answer is a bare JSON array of {"Host","Score"}, as kube-scheduler
	// decodes it.
	resp, _ := http.Post(ts.URL+"/prioritize", "application/json", strings.NewReader(cachedBody))
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.HasPrefix(raw, []byte(`[{"Host":"gpu-a","Score":0}`)) {
		t.Errorf("wire form %s", raw)
	}
}

func TestPlanEndpoints(t *testing.T) {
	s, ts := newTestServer(t)
	get := func(path string) (int, string) {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/v1/plan"); code != http.StatusServiceUnavailable {
		t.Errorf("no plan yet: status %d", code)
	}
	s.SetPlan(testPlan(), nil)
	tests := []struct {
		path string
		code int
		want string
	}{
		{"/v1/plan", 200, `"generation":3`},
		{"/v1/plan/batch/resnet-train-7", 200, `"gpu":"GPU-9"`},
		{"/v1/plan/batch/late", 404, plan.ReasonOutbid},
		{"/v1/plan/batch/nobody", 404, "not in the current plan"},
		{"/v1/plan/Bad_NS/x", 400, "namespace/name"},
		{"/healthz", 200, "ok"},
	}
	for _, tc := range tests {
		code, body := get(tc.path)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s = %d %s, want %d containing %q", tc.path, code, body, tc.code, tc.want)
		}
	}
}

func TestParseMiB(t *testing.T) {
	tests := []struct {
		in   string
		want float64
		ok   bool
	}{
		{"8GiB", 8192, true}, {"512MiB", 512, true}, {"1.5GiB", 1536, true}, {"16Gi", 16384, true},
		{"2048", 0, false}, {"1TiB", 1 << 20, true}, {"-1GiB", 0, false}, {"GiB", 0, false},
		{"8GB", 8e9 / (1 << 20), true}, {"0", 0, true},
	}
	for _, tc := range tests {
		got, err := ParseMiB(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseMiB(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
