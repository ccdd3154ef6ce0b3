package extender

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/muxflow/muxflow/matcher/profile"
)

// offlinePod is a filter body for an offline pod of the given controller (kind/name, ""
// for none), with a muxflow.io/profile annotation when profile is not "".
func offlinePod(name, controller, profileJSON string) string {
	owners := ""
	if controller != "" {
		var kind, cname string
		fmt.Sscanf(controller, "%s %s", &kind, &cname)
		owners = fmt.Sprintf(`,"ownerReferences":[{"apiVersion":"batch/v1","kind":%q,"name":%q,"uid":"u-1","controller":true,"blockOwnerDeletion":true}]`, kind, cname)
	}
	ann := `"muxflow.io/class":"offline"`
	if profileJSON != "" {
		ann += fmt.Sprintf(`,"muxflow.io/profile":%q`, profileJSON)
	}
	return fmt.Sprintf(`{"Pod":{"metadata":{"name":%q,"namespace":"batch"%s,"annotations":{%s}},"spec":{},"status":{}},"NodeNames":["gpu-a"]}`, name, owners, ann)
}

// running is a node report of one GPU running the given offline workloads.
func running(ws ...profile.Workload) []profile.NodeReport {
	return []profile.NodeReport{{Node: profile.NodeInfo{Name: "gpu-a"}, GPUs: []profile.GPUReport{{UUID: "GPU-1", Type: "H200", Health: profile.Healthy, Offline: ws}}}}
}

// Issue 14: the planner keeps a job of long kernels away from a service of short
// GPU-filling ones only where the job's profile carries its kernel length, which muxd
// measures and no annotation is likely to give. What the nodes measured of a pod is now
// remembered under its controller and completes the profile of the controller's next
// pending pod.
func TestPendingPodGetsItsControllersMeasuredProfile(t *testing.T) {
	s, ts := newTestServer(t)
	annotated := `{"gpu_util":60,"mem_bw_util":25,"memory_mib":6000}`
	post(t, ts.URL+"/filter", offlinePod("train-0", "Job train", annotated), nil)
	post(t, ts.URL+"/filter", offlinePod("stranger-0", "", annotated), nil)
	measured := profile.Profile{GPUUtil: 95, MemBWUtil: 40, MemoryMiB: 9000, KernelUS: 3000}
	s.Learn(running(
		profile.Workload{ID: "batch/train-0", Profile: measured},
		profile.Workload{ID: "batch/stranger-0", Profile: measured}, // no controller: nothing to remember it by
		profile.Workload{ID: "batch/never-filtered", Profile: measured},
	), time.Now())

	for _, body := range []string{
		offlinePod("train-1", "Job train", annotated),
		offlinePod("train-2", "Job train", ""),
		offlinePod("train-3", "Job train", `{"gpu_util":60,"mem_bw_util":25,"memory_mib":6000,"kernel_us":40}`),
		offlinePod("other-0", "Job other", annotated),
		offlinePod("stranger-1", "", annotated),
	} {
		post(t, ts.URL+"/filter", body, nil)
	}
	want := map[string]profile.Profile{
		"batch/train-1":    {GPUUtil: 60, MemBWUtil: 25, MemoryMiB: 6000, KernelUS: 3000}, // its own, and the measured kernel length
		"batch/train-2":    measured,                                                      // no annotation: all measured
		"batch/train-3":    {GPUUtil: 60, MemBWUtil: 25, MemoryMiB: 6000, KernelUS: 40},   // its own kernel length stands
		"batch/other-0":    {GPUUtil: 60, MemBWUtil: 25, MemoryMiB: 6000},
		"batch/stranger-1": {GPUUtil: 60, MemBWUtil: 25, MemoryMiB: 6000},
	}
	got := map[string]profile.Profile{}
	for _, j := range s.PendingJobs(time.Now()) {
		got[j.ID] = j.Profile
		if err := j.Validate(); err != nil {
			t.Errorf("job %s: %v", j.ID, err)
		}
	}
	for id, p := range want {
		if got[id] != p {
			t.Errorf("%s: profile %+v, want %+v", id, got[id], p)
		}
	}

	// GET /v1/measured shows what is kept.
	resp, err := http.Get(ts.URL + "/v1/measured")
	if err != nil {
		t.Fatal(err)
	}
	var shown measuredFile
	json.NewDecoder(resp.Body).Decode(&shown)
	resp.Body.Close()
	if m := shown.Measured["batch/Job/train"]; m.Pod != "batch/train-0" || m.Profile.KernelUS != 3000 || shown.Owners["batch/train-1"].Controller != "batch/Job/train" {
		t.Errorf("GET /v1/measured: %+v", shown)
	}

	// A day after the controller's pods were last seen, what was measured is forgotten.
	s.Learn(nil, time.Now().Add(DefaultMeasuredTTL+time.Minute))
	for _, j := range s.PendingJobs(time.Now()) {
		if j.ID == "batch/train-1" && j.Profile.KernelUS != 0 {
			t.Errorf("after a day unseen, train-1 still has the measured kernel length: %+v", j.Profile)
		}
	}
}

// muxmatch serve --measured: what was learnt survives a restart; a file that is not one
// is refused with what is wrong, and takes nothing from it.
func TestMeasuredSurviveARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "measured.json")
	s, ts := newTestServer(t)
	post(t, ts.URL+"/filter", offlinePod("train-0", "Job train", ""), nil)
	sm := 41.5
	measured := profile.Profile{GPUUtil: 95, MemBWUtil: 40, MemoryMiB: 9000, KernelUS: 3000, SMActivity: &sm}
	s.Learn(running(profile.Workload{ID: "batch/train-0", Profile: measured}), time.Now())
	if err := s.SaveMeasured(path); err != nil {
		t.Fatal(err)
	}
	// Nothing new (the same report again, with its own pointers): no write.
	os.Remove(path)
	sm2 := sm
	again := measured
	again.SMActivity = &sm2
	s.Learn(running(profile.Workload{ID: "batch/train-0", Profile: again}), time.Now())
	if err := s.SaveMeasured(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("a round that learnt nothing new rewrote the file")
	}
	post(t, ts.URL+"/filter", offlinePod("train-1", "Job train", ""), nil) // a new owner: written
	if err := s.SaveMeasured(path); err != nil {
		t.Fatal(err)
	}

	r, rts := newTestServer(t)
	if err := r.LoadMeasured(path); err != nil {
		t.Fatal(err)
	}
	post(t, rts.URL+"/filter", offlinePod("train-2", "Job train", `{"gpu_util":60,"mem_bw_util":25,"memory_mib":6000}`), nil)
	for _, j := range r.PendingJobs(time.Now()) {
		if j.ID == "batch/train-2" && j.Profile.KernelUS != 3000 {
			t.Errorf("after a restart train-2's profile is %+v, want the kernel length measured before it", j.Profile)
		}
	}
	// train-0 runs on after the restart: it is still known by its controller.
	r.Learn(running(profile.Workload{ID: "batch/train-0", Profile: profile.Profile{GPUUtil: 90, KernelUS: 5000}}), time.Now())
	for _, j := range r.PendingJobs(time.Now()) {
		if j.ID == "batch/train-2" && j.Profile.KernelUS != 5000 {
			t.Errorf("train-0's new measurement did not reach its controller: %+v", j.Profile)
		}
	}

	dir := t.TempDir()
	for name, tc := range map[string]struct{ body, want string }{
		"not JSON":            {"{", "unexpected end of JSON input"},
		"another version":     {`{"version":2}`, "version 2, want 1"},
		"a pod without owner": {`{"version":1,"owners":{"batch/x":{"controller":""}}}`, `pod "batch/x" without a controller`},
		"an invalid profile":  {`{"version":1,"measured":{"batch/Job/x":{"profile":{"gpu_util":400}}}}`, "controller batch/Job/x: invalid profile data: gpu_util 400 must be a percentage"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		os.WriteFile(p, []byte(tc.body), 0o600)
		err := r.LoadMeasured(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: err %v, want it to name the file and say %q", name, err, tc.want)
		}
	}
	for _, j := range r.PendingJobs(time.Now()) {
		if j.ID == "batch/train-2" && j.Profile.KernelUS != 5000 {
			t.Errorf("a refused file changed what was kept: %+v", j.Profile)
		}
	}
	if err := r.LoadMeasured(filepath.Join(dir, "missing.json")); err != nil {
		t.Errorf("a missing file: %v, want it read as empty", err)
	}
}

// jobsAPI answers GET .../jobs/NAME with the owner references a CronJob's Jobs carry (for
// names starting "nightly-"), none for others, and 403 for "secret-" ones.
type jobsAPI struct{ reads []string }

func (a *jobsAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.reads = append(a.reads, r.Method+" "+r.URL.Path)
	name := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
	switch {
	case strings.HasPrefix(name, "secret-"):
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`{"kind":"Status","message":"jobs.batch \"secret-1\" is forbidden"}`))
	case strings.HasPrefix(name, "nightly-"):
		fmt.Fprintf(w, `{"metadata":{"name":%q,"namespace":"batch","ownerReferences":[{"apiVersion":"batch/v1","kind":"CronJob","name":"nightly","uid":"c-1","controller":true}]}}`, name)
	default:
		fmt.Fprintf(w, `{"metadata":{"name":%q,"namespace":"batch"}}`, name)
	}
}

// A CronJob makes a new Job each run: with the Kubernetes API at hand, a Job's pods are
// known by its CronJob, so each run is planned with what the last one measured. A Job that
// cannot be read keeps its own name; each Job is read once.
func TestCronJobRunsLearnFromTheLast(t *testing.T) {
	s, ts := newTestServer(t)
	api := &jobsAPI{}
	s.Kube = newKubeFor(t, api)
	ctx := context.Background()
	measured := profile.Profile{GPUUtil: 95, MemBWUtil: 40, MemoryMiB: 9000, KernelUS: 3000}
	for _, pod := range []struct{ name, job string }{{"nightly-1-a", "nightly-1"}, {"plain-a", "plain"}, {"secret-1-a", "secret-1"}} {
		post(t, ts.URL+"/filter", offlinePod(pod.name, "Job "+pod.job, ""), nil)
	}
	s.ResolveJobs(ctx, time.Now())
	s.Learn(running(
		profile.Workload{ID: "batch/nightly-1-a", Profile: measured},
		profile.Workload{ID: "batch/plain-a", Profile: measured},
		profile.Workload{ID: "batch/secret-1-a", Profile: measured},
	), time.Now())
	// The next night's run, and other pods of the two other Jobs.
	for _, pod := range []struct{ name, job string }{{"nightly-2-a", "nightly-2"}, {"plain-b", "plain"}, {"secret-1-b", "secret-1"}, {"secret-2-a", "secret-2"}} {
		post(t, ts.URL+"/filter", offlinePod(pod.name, "Job "+pod.job, ""), nil)
	}
	s.ResolveJobs(ctx, time.Now())
	s.ResolveJobs(ctx, time.Now()) // nothing new: no reads
	got := map[string]float64{}
	for _, j := range s.PendingJobs(time.Now()) {
		got[j.ID] = j.Profile.KernelUS
	}
	want := map[string]float64{"batch/nightly-2-a": 3000, "batch/plain-b": 3000, "batch/secret-1-b": 3000, "batch/secret-2-a": 0}
	for id, k := range want {
		if got[id] != k {
			t.Errorf("%s: kernel_us %v, want %v (pending: %v)", id, got[id], k, got)
		}
	}
	if len(api.reads) != 5 || !slices.Contains(api.reads, "GET /apis/batch/v1/namespaces/batch/jobs/nightly-2") {
		t.Errorf("API reads %q, want each of the five Jobs read once", api.reads)
	}
	// A Job that could not be read is tried again later.
	s.ResolveJobs(ctx, time.Now().Add(jobRetry+time.Minute))
	if n := len(api.reads); n != 7 {
		t.Errorf("after %v, %d reads, want the two refused Jobs read again: %q", jobRetry, n, api.reads)
	}
}
