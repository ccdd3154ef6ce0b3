package muxmatch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/muxflow/muxflow/matcher/plan"
	"github.com/muxflow/muxflow/matcher/predict"
	"github.com/muxflow/muxflow/matcher/profile"
	"github.com/muxflow/muxflow/muxd/api"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := Run(context.Background(), args, &out)
	return out.String(), err
}

func sampleReport(node string, uuids ...string) profile.NodeReport {
	r := profile.NodeReport{Node: profile.NodeInfo{Name: node}}
	for i, u := range uuids {
		r.GPUs = append(r.GPUs, profile.GPUReport{UUID: u, Index: i, Type: "H200", MemoryTotalMiB: 143771, MemoryFreeMiB: 100000,
			Health: profile.Healthy, Online: &profile.Workload{ID: "prod/svc-" + u, Profile: profile.Profile{GPUUtil: float64(10 + 30*i), MemBWUtil: 10, MemoryMiB: 20000}}})
	}
	return r
}

func writeJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "f.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestImportTrainPlan(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "lucid.csv")
	if _, err := run(t, "import-lucid", "-o", data); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, "model.json")
	out, err := run(t, "train", data, "-o", model, "--hidden", "8,8", "--epochs", "3")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "trained mlp[8 8] on 1426 samples") {
		t.Errorf("train output: %s", out)
	}
	reports := writeJSON(t, []profile.NodeReport{sampleReport("n1", "GPU-a", "GPU-b"), sampleReport("n2", "GPU-c")})
	jobs := writeJSON(t, []plan.Job{
		{ID: "batch/a", Profile: profile.Profile{GPUUtil: 40, MemBWUtil: 20, MemoryMiB: 8000}},
		{ID: "batch/b", Profile: profile.Profile{GPUUtil: 20, MemBWUtil: 5, MemoryMiB: 4000}},
	})
	for _, extra := range [][]string{nil, {"--model", model}, {"--mode", "topk", "--k", "2"}} {
		out, err = run(t, append([]string{"plan", "--reports", reports, "--jobs", jobs}, extra...)...)
		if err != nil {
			t.Fatalf("plan %v: %v", extra, err)
		}
		var pl plan.Plan
		if err := json.Unmarshal([]byte(out), &pl); err != nil {
			t.Fatalf("plan output is not a plan: %v\n%s", err, out)
		}
		// A model trained for three epochs may predict anything; the plan
		// must still account for every job.
		placed := len(pl.Assignments) + len(pl.Unassigned)
		if placed != 2 || pl.Stats.EligibleGPUs != 3 || extra == nil && len(pl.Assignments) != 2 {
			t.Errorf("plan %v: %+v", extra, pl)
		}
	}
}

func TestCommandErrors(t *testing.T) {
	bad := writeJSON(t, map[string]any{"format": "nope"})
	tests := []struct {
		args []string
		want string
	}{
		{nil, "usage"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"train"}, "exactly one DATA.csv"},
		{[]string{"train", "/nonexistent.csv"}, "open training data"},
		{[]string{"train", "x.csv", "--hidden", "a,b"}, "--hidden"},
		{[]string{"plan"}, "--reports and --jobs are required"},
		{[]string{"plan", "--reports", bad, "--jobs", bad, "--model", bad}, "unusable model file"},
		{[]string{"plan", "--reports", bad, "--jobs", bad, "--mode", "fast"}, "unknown mode"},
		{[]string{"serve"}, "exactly one of --nodes and --reports"},
		{[]string{"serve", "--reports", bad, "--interval", "1ms"}, "too short"},
		{[]string{"serve", "--reports", bad, "--listen", "127.0.0.1:0", "--measured", bad}, "serve --measured: measured profiles " + bad + ": version 0, want 1"},
		{[]string{"replay", "--windows", "0"}, "windows"},
		{[]string{"eval", "a.csv", "b.csv"}, "at most one"},
		{[]string{"train", "--no-such-flag"}, "flag provided but not defined"},
	}
	for _, tc := range tests {
		_, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("muxmatch %v: err = %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
}

func TestEvalLucid(t *testing.T) {
	out, err := run(t, "eval", "--hidden", "4", "--epochs", "2")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"mean", "linear", "analytic", "mlp[4]"} {
		if !strings.Contains(out, "\n"+m+" ") {
			t.Errorf("eval output lacks %s:\n%s", m, out)
		}
	}
}

func TestNodeSource(t *testing.T) {
	good := sampleReport("n1", "GPU-1")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/node", func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"node": good.Node, "gpus": good.GPUs, "containers": []string{"x"}})
	})
	ts := httptest.NewServer(mux)
	defer ts.Close()
	// The same report over muxd's unix socket.
	sock := filepath.Join(t.TempDir(), "muxd.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	us := &http.Server{Handler: mux}
	go us.Serve(ln)
	defer us.Close()
	broken := httptest.NewServer(http.NotFoundHandler())
	defer broken.Close()

	src := NodeSource{Endpoints: []string{ts.URL, sock, broken.URL}, Timeout: 2 * time.Second}
	got, err := src.Reports(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Node.Name != "n1" || got[1].GPUs[0].UUID != "GPU-1" {
		t.Fatalf("reports %+v", got)
	}
	if _, err := (NodeSource{Endpoints: []string{broken.URL}}).Reports(context.Background()); err == nil || !strings.Contains(err.Error(), "no node answered") {
		t.Errorf("all nodes down: err = %v", err)
	}
}

func TestFileSourceForms(t *testing.T) {
	r := sampleReport("n1", "GPU-1")
	for _, v := range []any{[]profile.NodeReport{r}, r, map[string]any{"nodes": []profile.NodeReport{r}}} {
		got, err := FileSource{Path: writeJSON(t, v)}.Reports(context.Background())
		if err != nil || len(got) != 1 || got[0].Node.Name != "n1" {
			t.Errorf("%T: %v %v", v, got, err)
		}
	}
	if _, err := (FileSource{Path: writeJSON(t, []map[string]any{{"node": map[string]string{}}})}).Reports(context.Background()); err == nil {
		t.Error("invalid report accepted")
	}
}

func TestServeEndToEnd(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	reports := writeJSON(t, []profile.NodeReport{sampleReport("gpu-a", "GPU-1")})
	jobs := writeJSON(t, []plan.Job{{ID: "batch/resnet-train-7", Profile: profile.Profile{GPUUtil: 30, MemBWUtil: 10, MemoryMiB: 2000}}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"serve", "--listen", addr, "--reports", reports, "--jobs", jobs, "--interval", "200ms"}, &bytes.Buffer{})
	}()
	var pl plan.Plan
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v1/plan")
		if err == nil && resp.StatusCode == 200 {
			json.NewDecoder(resp.Body).Decode(&pl)
			resp.Body.Close()
			break
		}
		if err == nil {
			resp.Body.Close()
		}
		if time.Now().After(deadline) {
			t.Fatal("no plan served")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(pl.Assignments) != 1 || pl.Assignments[0].Node != "gpu-a" {
		t.Fatalf("plan %+v", pl)
	}
	body := `{"Pod":{"metadata":{"name":"resnet-train-7","namespace":"batch","annotations":{"muxflow.io/class":"offline"}},"spec":{},"status":{}},"NodeNames":["gpu-a","gpu-b"]}`
	resp, err := http.Post("http://"+addr+"/filter", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var res struct{ NodeNames []string }
	json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if len(res.NodeNames) != 1 || res.NodeNames[0] != "gpu-a" {
		t.Errorf("filter kept %v, want [gpu-a]", res.NodeNames)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve returned %v after cancel", err)
	}
}

// TestReadsMuxdNodeReport decodes muxd's own GET /v1/node type: the matcher
// must accept what muxd serves, extra node fields and GPUs whose memory
// muxd could not read yet included.
func TestReadsMuxdNodeReport(t *testing.T) {
	rep := api.NodeReport{
		Node: api.NodeInfo{Name: "gpu-a", Time: time.Now(), Hostname: "gpu-a.local", Version: "dev", GPUCount: 2, MPS: api.MPSInfo{State: "running"}},
		GPUs: []profile.GPUReport{
			sampleReport("gpu-a", "GPU-1").GPUs[0],
			{UUID: "GPU-2", Index: 1, Type: "H200", Health: profile.Warning},
		},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/node", func(w http.ResponseWriter, _ *http.Request) { json.NewEncoder(w).Encode(rep) })
	ts := httptest.NewServer(mux)
	defer ts.Close()
	got, err := NodeSource{Endpoints: []string{ts.URL}}.Reports(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Node.Name != "gpu-a" || len(got[0].GPUs) != 2 {
		t.Fatalf("reports %+v", got)
	}
	p, err := plan.NewPlanner(plan.Config{Predictor: predict.Analytic{}})
	if err != nil {
		t.Fatal(err)
	}
	pl, err := p.Plan(got, []plan.Job{{ID: "b/j", Profile: profile.Profile{GPUUtil: 20, MemBWUtil: 5, MemoryMiB: 1000}}})
	if err != nil {
		t.Fatal(err)
	}
	if pl.Stats.EligibleGPUs != 1 || len(pl.Assignments) != 1 || pl.Assignments[0].GPU != "GPU-1" {
		t.Errorf("plan %+v", pl)
	}
}

func TestRecorderAppendsEachColocationOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "colocations.csv")
	c1 := profile.Colocation{A: profile.Profile{Name: "a", GPUUtil: 50, MemBWUtil: 10, MemoryMiB: 100}, B: profile.Profile{Name: "b", GPUUtil: 20, MemBWUtil: 5, MemoryMiB: 100}, ANormTput: 0.8, BNormTput: 0.9}
	c2 := c1
	c2.ANormTput = 0.7
	rep := sampleReport("n1", "GPU-1")
	rep.Colocations = []profile.Colocation{c1}
	r, err := newRecorder(path)
	if err != nil {
		t.Fatal(err)
	}
	for round, want := range []int{1, 0} {
		n, err := r.add([]profile.NodeReport{rep})
		if err != nil || n != want {
			t.Fatalf("round %d: wrote %d (%v), want %d", round, n, err, want)
		}
	}
	// A restarted recorder knows what the file holds.
	r, err = newRecorder(path)
	if err != nil {
		t.Fatal(err)
	}
	rep.Colocations = append(rep.Colocations, c2)
	if n, err := r.add([]profile.NodeReport{rep}); err != nil || n != 1 {
		t.Fatalf("after restart: wrote %d (%v), want 1", n, err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := profile.ReadCSV(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].ANormTput != 0.8 || recs[1].ANormTput != 0.7 {
		t.Errorf("file holds %+v", recs)
	}
}

func TestEveryCommandHelp(t *testing.T) {
	for _, cmd := range []string{"train", "eval", "import-lucid", "plan", "serve", "replay"} {
		for _, flagName := range []string{"--help", "-h"} {
			out, err := run(t, cmd, flagName)
			if err != nil {
				t.Errorf("muxmatch %s %s: %v", cmd, flagName, err)
			}
			if !strings.HasPrefix(out, "usage: muxmatch "+cmd) || !strings.Contains(out, "flags:") {
				t.Errorf("muxmatch %s %s printed:\n%s", cmd, flagName, out)
			}
		}
	}
}

func TestEvalTestFileAndDataFlag(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "lucid.csv")
	if _, err := run(t, "import-lucid", "-o", data); err != nil {
		t.Fatal(err)
	}
	// Split the records: train on the first rows, score on the rest.
	raw, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSpace(string(raw)), "\n")
	head, rows := lines[0], lines[1:]
	cut := len(rows) * 2 / 3
	train, test := filepath.Join(dir, "train.csv"), filepath.Join(dir, "test.csv")
	os.WriteFile(train, []byte(head+strings.Join(rows[:cut], "")), 0o600)
	os.WriteFile(test, []byte(head+strings.Join(rows[cut:], "")), 0o600)
	out, err := run(t, "eval", train, "--test", test, "--hidden", "4", "--epochs", "2")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("trained on %d co-locations, scored on %d from %s", cut, len(rows)-cut, test)
	if !strings.Contains(out, want) || !strings.Contains(out, "analytic") {
		t.Errorf("eval --test output lacks %q:\n%s", want, out)
	}
	// --data names the folder holding the data sets; a wrong one is named in the error.
	if _, err := run(t, "import-lucid", "--data", dir, "-o", filepath.Join(dir, "x.csv")); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "lucid-colocation")) {
		t.Errorf("import-lucid --data %s: err = %v", dir, err)
	}
}

// Issue 14, on muxmatch's path: a Job's first pod runs beside a service of short
// GPU-filling kernels and its node measures 3 ms kernels; the Job's next pod, whose
// annotation gives no kernel length, is then planned beside the service of long requests
// rather than beside the other filling (and lighter) one it would have gone to.
func TestServeRemembersMeasuredKernels(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	filling := profile.Profile{GPUUtil: 10, MemBWUtil: 10, MemoryMiB: 20000, RequestUS: 240, WidthPct: 100}
	longRequests := profile.Profile{GPUUtil: 40, MemBWUtil: 10, MemoryMiB: 20000, RequestUS: 20000, WidthPct: 100}
	gpu := func(uuid string, online profile.Profile, offline ...profile.Workload) profile.GPUReport {
		return profile.GPUReport{UUID: uuid, Type: "H200", MemoryTotalMiB: 143771, MemoryFreeMiB: 100000, Health: profile.Healthy,
			Online: &profile.Workload{ID: "prod/svc-" + uuid, Profile: online}, Offline: offline}
	}
	reports, kept := filepath.Join(t.TempDir(), "reports.json"), filepath.Join(t.TempDir(), "measured.json")
	setReports := func(gs ...profile.GPUReport) {
		b, _ := json.Marshal([]profile.NodeReport{{Node: profile.NodeInfo{Name: "gpu-a"}, GPUs: gs}})
		if err := os.WriteFile(reports+".new", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(reports+".new", reports); err != nil { // a round reads a whole file
			t.Fatal(err)
		}
	}
	setReports(gpu("GPU-1", filling), gpu("GPU-2", longRequests), gpu("GPU-3", filling))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"serve", "--listen", addr, "--reports", reports, "--interval", "100ms", "--measured", kept}, &bytes.Buffer{})
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve returned %v after cancel", err)
			}
		}
	}
	defer stop()
	getPlan := func() plan.Plan {
		var pl plan.Plan
		if resp, err := http.Get("http://" + addr + "/v1/plan"); err == nil {
			if resp.StatusCode == http.StatusOK {
				json.NewDecoder(resp.Body).Decode(&pl)
			}
			resp.Body.Close()
		}
		return pl
	}
	waitFor := func(what string, ok func(plan.Plan) bool) plan.Plan {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if pl := getPlan(); ok(pl) {
				return pl
			}
			if time.Now().After(deadline) {
				t.Fatalf("no plan %s within 20s: last %+v", what, getPlan())
			}
		}
	}
	filter := func(pod string) {
		t.Helper()
		body := fmt.Sprintf(`{"Pod":{"metadata":{"name":%q,"namespace":"batch","ownerReferences":[{"apiVersion":"batch/v1","kind":"Job","name":"train","uid":"u-1","controller":true}],
 "annotations":{"muxflow.io/class":"offline","muxflow.io/profile":"{\"gpu_util\":60,\"mem_bw_util\":20,\"memory_mib\":8000}"}},"spec":{},"status":{}},"NodeNames":["gpu-a"]}`, pod)
		resp, err := http.Post("http://"+addr+"/filter", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	first := waitFor("at all", func(pl plan.Plan) bool { return pl.Generation > 0 })
	filter("train-0")
	// train-0 runs beside GPU-1's service, and its node measures its kernels.
	setReports(gpu("GPU-1", filling, profile.Workload{ID: "batch/train-0", Profile: profile.Profile{GPUUtil: 60, MemBWUtil: 20, MemoryMiB: 8000, KernelUS: 3000}}),
		gpu("GPU-2", longRequests), gpu("GPU-3", filling))
	seen := waitFor("after the measurement", func(pl plan.Plan) bool { return pl.Generation > first.Generation+2 })
	filter("train-1")
	pl := waitFor("placing train-1", func(pl plan.Plan) bool {
		if pl.Generation <= seen.Generation {
			return false
		}
		for _, a := range pl.Assignments {
			if a.Job == "batch/train-1" {
				return true
			}
		}
		return false
	})
	for _, a := range pl.Assignments {
		if a.Job == "batch/train-1" && a.GPU != "GPU-2" {
			t.Errorf("train-1 placed on %s, want GPU-2 (its Job's kernels are 3 ms, GPU-1's and GPU-3's requests 240 µs): %+v", a.GPU, pl)
		}
	}
	// --measured: serve leaves what it learnt in the file when it stops.
	stop()
	b, err := os.ReadFile(kept)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Measured map[string]struct{ Profile profile.Profile } `json:"measured"`
	}
	if err := json.Unmarshal(b, &f); err != nil || f.Measured["batch/Job/train"].Profile.KernelUS != 3000 {
		t.Errorf("--measured file after serve stopped: %s (%v)", b, err)
	}
}
