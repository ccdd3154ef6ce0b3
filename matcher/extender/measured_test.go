package extender

import (
	"fmt"
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

	// A day after the controller's pods were last seen, what was measured is forgotten.
	s.Learn(nil, time.Now().Add(DefaultMeasuredTTL+time.Minute))
	for _, j := range s.PendingJobs(time.Now()) {
		if j.ID == "batch/train-1" && j.Profile.KernelUS != 0 {
			t.Errorf("after a day unseen, train-1 still has the measured kernel length: %+v", j.Profile)
		}
	}
}
