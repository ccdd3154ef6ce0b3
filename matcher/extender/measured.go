package extender

import (
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
	profile profile.Profile
	pod     string
	at      time.Time
}

// owner is a pod's controller, as the filter verb last saw the pod.
type owner struct {
	controller string
	seen       time.Time
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

// noteOwner remembers a pod's controller. s.mu held.
func (s *Server) noteOwner(pod string, controller string, now time.Time) {
	if controller == "" {
		return
	}
	if s.owners == nil {
		s.owners = map[string]owner{}
	}
	s.owners[pod] = owner{controller, now}
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
				o.seen = now // a running pod keeps its controller known
				s.owners[w.ID] = o
				if s.measured == nil {
					s.measured = map[string]measured{}
				}
				if prev, had := s.measured[o.controller]; !had || prev.profile.KernelUS != w.Profile.KernelUS {
					s.Log.Info("measured offline profile remembered for its controller", "controller", o.controller, "pod", w.ID, "kernel_us", w.Profile.KernelUS)
				}
				s.measured[o.controller] = measured{w.Profile, w.ID, now}
			}
		}
	}
	for id, o := range s.owners {
		if now.Sub(o.seen) > ttl {
			delete(s.owners, id)
		}
	}
	for c, m := range s.measured {
		if now.Sub(m.at) > ttl {
			delete(s.measured, c)
		}
	}
}

// withMeasured is a pending pod's job profile given what was measured of its controller:
// the measured one where the pod carries no profile annotation, else the annotated one
// with the measured kernel length where it gives none.
func withMeasured(p pendingJob, m measured) profile.Profile {
	if !p.annotated {
		return m.profile
	}
	out := p.job.Profile
	if out.KernelUS == 0 {
		out.KernelUS = m.profile.KernelUS
	}
	return out
}
