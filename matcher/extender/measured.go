package extender

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/muxflow/muxflow/matcher/profile"
)

// What the nodes measured of an offline pod is remembered under the pod's controller (its
// Job, ReplicaSet or StatefulSet: the owner reference marked controller), so that the next
// pod of that controller is planned with it: above all its kernel length (kernel_us),
// which muxd measures and no one writes in an annotation, and without which the planner
// cannot keep a job of long kernels away from a service of short GPU-filling ones
// (profile.DelaysOnline). A pod whose muxflow.io/profile annotation is absent gets the
// whole measured profile; one that has it keeps it and gains only the kernel length.

// DefaultMeasuredTTL is how long a pod's controller, and a controller's measured profile,
// are kept after they were last seen.
const DefaultMeasuredTTL = 24 * time.Hour

// measured is a controller's profile as a node last reported it for one of its pods.
type measured struct {
	Profile profile.Profile `json:"profile"`
	Pod     string          `json:"pod"`
	At      time.Time       `json:"at"`
}

// owner is a pod's controller, as the filter verb last saw the pod (or a node reported
// it running).
type owner struct {
	Controller string    `json:"controller"`
	Seen       time.Time `json:"seen"`
}

// controllerOf names a pod's controller "namespace/Kind/name"; "" when it has none.
func controllerOf(pod *corev1.Pod) string {
	for _, r := range pod.OwnerReferences {
		if r.Controller != nil && *r.Controller && r.Kind != "" && r.Name != "" {
			return pod.Namespace + "/" + r.Kind + "/" + r.Name
		}
	}
	return ""
}

// noteOwner remembers a pod's controller (a Job's own controller, where ResolveJobs read
// it). s.mu held.
func (s *Server) noteOwner(pod string, controller string, now time.Time) {
	if controller == "" {
		return
	}
	if p, ok := s.jobParents[controller]; ok && p.parent != "" {
		controller = p.parent
	}
	if s.owners == nil {
		s.owners = map[string]owner{}
	}
	if s.owners[pod].Controller != controller {
		s.dirty = true
	}
	s.owners[pod] = owner{controller, now}
}

// jobParent is what ResolveJobs read of a Job: its controller ("namespace/Kind/name"; ""
// where it has none or could not be read: failed, tried again after jobRetry).
type jobParent struct {
	parent string
	seen   time.Time
	failed bool
}

const (
	// maxJobReads bounds the Jobs ResolveJobs reads in one round, and jobReadTimeout
	// each read.
	maxJobReads    = 32
	jobReadTimeout = 5 * time.Second
	// jobRetry is how long a Job that could not be read waits for another try.
	jobRetry = 10 * time.Minute
)

// ResolveJobs reads, where the extender can use the Kubernetes API (Kube), the controller
// of each pod's Job not read yet, and keeps the pod under it: a CronJob makes a new Job
// for each run, so its runs are known by the CronJob, and each learns from the last. A Job
// that cannot be read (no RBAC for jobs, the API down) keeps its own name meanwhile, with
// a warning, and is tried again after jobRetry.
func (s *Server) ResolveJobs(ctx context.Context, now time.Time) {
	if s.Kube == nil {
		return
	}
	s.mu.Lock()
	var todo []string
	for _, o := range s.owners {
		p, done := s.jobParents[o.Controller]
		if (!done || (p.failed && now.Sub(p.seen) > jobRetry)) && isJob(o.Controller) && !slices.Contains(todo, o.Controller) && len(todo) < maxJobReads {
			todo = append(todo, o.Controller)
		}
	}
	s.mu.Unlock()
	for _, job := range todo {
		ns, name := jobName(job)
		rctx, cancel := context.WithTimeout(ctx, jobReadTimeout)
		kind, ctrl, err := s.Kube.JobController(rctx, ns, name)
		cancel()
		parent := ""
		switch {
		case err != nil:
			s.Log.Warn("cannot read an offline pod's Job: its pods are known by the Job alone for now", "job", job, "retry_in", jobRetry, "err", err)
		case kind != "":
			parent = ns + "/" + kind + "/" + ctrl
		}
		s.mu.Lock()
		if s.jobParents == nil {
			s.jobParents = map[string]jobParent{}
		}
		s.jobParents[job] = jobParent{parent, now, err != nil}
		if parent != "" {
			for pod, o := range s.owners {
				if o.Controller == job {
					o.Controller = parent
					s.owners[pod] = o
					s.dirty = true
				}
			}
		}
		s.mu.Unlock()
	}
}

// isJob says whether a controller key names a Job.
func isJob(controller string) bool {
	_, name := jobName(controller)
	return name != ""
}

// jobName is the namespace and name of a "namespace/Job/name" key; "" for other kinds.
func jobName(controller string) (ns, name string) {
	ns, rest, _ := strings.Cut(controller, "/")
	if name, ok := strings.CutPrefix(rest, "Job/"); ok {
		return ns, name
	}
	return "", ""
}

// Learn takes the offline workloads the nodes report (validated reports, whose ids are
// pods "namespace/name" on Kubernetes) as what was measured of their controllers. Call it
// each round before PendingJobs.
func (s *Server) Learn(reports []profile.NodeReport, now time.Time) {
	ttl := s.MeasuredTTL
	if ttl == 0 {
		ttl = DefaultMeasuredTTL
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range reports {
		for _, g := range r.GPUs {
			for _, w := range g.Offline {
				o, ok := s.owners[w.ID]
				if !ok {
					continue
				}
				o.Seen = now // a running pod keeps its controller known
				s.owners[w.ID] = o
				if s.measured == nil {
					s.measured = map[string]measured{}
				}
				prev, had := s.measured[o.Controller]
				if !had || prev.Pod != w.ID { // not each round: the figures move every round
					s.Log.Info("measured offline profile remembered for its controller", "controller", o.Controller, "pod", w.ID, "kernel_us", w.Profile.KernelUS)
				}
				if !had || !reflect.DeepEqual(prev.Profile, w.Profile) || prev.Pod != w.ID { // sm_activity is a pointer
					s.dirty = true
				}
				s.measured[o.Controller] = measured{w.Profile, w.ID, now}
			}
		}
	}
	for id, o := range s.owners {
		if now.Sub(o.Seen) > ttl {
			delete(s.owners, id)
			s.dirty = true
		}
	}
	for c, m := range s.measured {
		if now.Sub(m.At) > ttl {
			delete(s.measured, c)
			s.dirty = true
		}
	}
	for j, p := range s.jobParents {
		if now.Sub(p.seen) > ttl {
			delete(s.jobParents, j)
		}
	}
}

// measuredFile is the form SaveMeasured writes and GET /v1/measured serves: the pods'
// controllers and what was measured of each controller's pods, with the times the TTL
// counts from.
type measuredFile struct {
	Version  int                 `json:"version"`
	Owners   map[string]owner    `json:"owners"`
	Measured map[string]measured `json:"measured"`
}

// measuredSnapshot is what the server remembers, in the file's form. s.mu held.
func (s *Server) measuredSnapshot() measuredFile {
	f := measuredFile{Version: 1, Owners: maps.Clone(s.owners), Measured: maps.Clone(s.measured)}
	if f.Owners == nil { // {} rather than null before anything was learnt
		f.Owners = map[string]owner{}
	}
	if f.Measured == nil {
		f.Measured = map[string]measured{}
	}
	return f
}

// getMeasured serves GET /v1/measured: the pods' controllers and what the nodes measured
// of each controller's pods, as --measured's file holds them.
func (s *Server) getMeasured(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	f := s.measuredSnapshot()
	s.mu.Unlock()
	writeJSON(w, f)
}

// SaveMeasured writes what Learn and the filter verb gathered to path (through a
// temporary file renamed over it, so a reader or a crash never sees half a file), where
// something changed since the last save or load, other than the times things were seen.
func (s *Server) SaveMeasured(path string) error {
	s.mu.Lock()
	if !s.dirty {
		s.mu.Unlock()
		return nil
	}
	f := s.measuredSnapshot()
	s.dirty = false
	s.mu.Unlock()
	b, err := json.Marshal(f)
	if err == nil {
		tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
		if err = os.WriteFile(tmp, b, 0o600); err == nil {
			err = os.Rename(tmp, path)
		}
	}
	if err != nil {
		s.mu.Lock()
		s.dirty = true // the next round tries again
		s.mu.Unlock()
		return fmt.Errorf("save measured profiles: %w", err)
	}
	return nil
}

// LoadMeasured reads what SaveMeasured wrote (a missing file is an empty one) and keeps
// it beside what the server holds. A file that is not such a file, or holds an invalid
// profile, is an error naming what is wrong, and nothing is taken from it.
func (s *Server) LoadMeasured(path string) error {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load measured profiles: %w", err)
	}
	var f measuredFile
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("measured profiles %s: %w", path, err)
	}
	if f.Version != 1 {
		return fmt.Errorf("measured profiles %s: version %d, want 1", path, f.Version)
	}
	for id, o := range f.Owners {
		if id == "" || o.Controller == "" {
			return fmt.Errorf("measured profiles %s: pod %q without a controller", path, id)
		}
	}
	for c, m := range f.Measured {
		if c == "" {
			return fmt.Errorf("measured profiles %s: a profile without a controller", path)
		}
		if err := m.Profile.Validate(); err != nil {
			return fmt.Errorf("measured profiles %s: controller %s: %w", path, c, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.owners == nil {
		s.owners = map[string]owner{}
	}
	if s.measured == nil {
		s.measured = map[string]measured{}
	}
	for id, o := range f.Owners {
		if _, ok := s.owners[id]; !ok {
			s.owners[id] = o
		}
	}
	for c, m := range f.Measured {
		if _, ok := s.measured[c]; !ok {
			s.measured[c] = m
		}
	}
	return nil
}

// withMeasured is a pending pod's job profile given what was measured of its controller:
// the measured one where the pod carries no profile annotation, else the annotated one
// with the measured kernel length where it gives none.
func withMeasured(p pendingJob, m measured) profile.Profile {
	if !p.annotated {
		return m.Profile
	}
	out := p.job.Profile
	if out.KernelUS == 0 {
		out.KernelUS = m.Profile.KernelUS
	}
	return out
}
