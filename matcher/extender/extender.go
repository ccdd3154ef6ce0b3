// Package extender is the Kubernetes side of the matcher: a kube-scheduler
// extender whose filter and prioritize verbs steer offline pods to the nodes
// holding the GPUs the current plan chose for them, and the HTTP surface that
// publishes the plan. Pods are offline when annotated muxflow.io/class:
// offline; their solo profile comes from muxflow.io/profile (JSON) and from
// what the nodes measured of their controller's earlier pods (measured.go), and
// their needs from muxflow.io/gpu-memory and muxflow.io/gpu-type.
package extender

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/muxflow/muxflow/matcher/plan"
	"github.com/muxflow/muxflow/matcher/profile"
	"github.com/muxflow/muxflow/policy/annotations"
)

// Pod annotations the extender reads (DESIGN.md §4, Kubernetes surface); package
// annotations names and parses them for the node too.
const (
	AnnotationClass     = annotations.Class
	AnnotationProfile   = annotations.Profile
	AnnotationGPUMemory = annotations.GPUMemory
	AnnotationGPUType   = annotations.GPUType
)

// maxBody bounds request bodies: a NodeList of 5,000 nodes is a few MB.
const maxBody = 64 << 20

// Server answers kube-scheduler extender calls from the latest plan and
// collects the offline pods it sees as pending jobs for the next round.
type Server struct {
	// WaitForPlan makes filter reject every node for an offline pod the
	// plan has not placed yet, so the pod waits (kube-scheduler retries it)
	// rather than landing on a GPU the matching did not choose. When false,
	// such pods may go to any node with an eligible GPU.
	WaitForPlan bool
	// PendingTTL forgets pods not seen in a filter call for this long
	// (they were scheduled elsewhere or deleted); default 10 minutes.
	PendingTTL time.Duration
	// MeasuredTTL forgets a pod's controller, and what the nodes measured of a
	// controller's pods, this long after they were last seen (measured.go);
	// default DefaultMeasuredTTL.
	MeasuredTTL time.Duration
	Log         *slog.Logger
	// Kube, when set, lets the extender serve kube-scheduler's bind verb: it writes the
	// GPU the plan chose on an offline pod (annotations.GPU) before binding it, so that
	// the node gives the pod exactly that GPU.
	Kube *Kube

	plan     atomic.Pointer[plan.Plan]
	reports  atomic.Pointer[[]profile.NodeReport]
	mu       sync.Mutex
	pending  map[string]pendingJob
	requeued map[string]bool     // pending pods Requeue has nudged
	owners   map[string]owner    // pod → its controller (measured.go)
	measured map[string]measured // controller → what the nodes measured of its pods
	// a Job → its controller, as ResolveJobs read it
	jobParents map[string]jobParent
	dirty      bool // owners or measured changed since SaveMeasured
}

type pendingJob struct {
	job  plan.Job
	seen time.Time
	// annotated: the pod carries a muxflow.io/profile, which what was measured of its
	// controller completes (withMeasured); told whether that was logged.
	annotated bool
	told      bool
}

// NewServer returns a Server with no plan yet.
func NewServer(log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	return &Server{WaitForPlan: true, Log: log, pending: map[string]pendingJob{}}
}

// SetPlan publishes a new plan; calls in flight keep the one they read.
func (s *Server) SetPlan(p *plan.Plan, reports []profile.NodeReport) {
	s.reports.Store(&reports)
	s.plan.Store(p)
}

// Plan returns the latest plan, or nil.
func (s *Server) Plan() *plan.Plan { return s.plan.Load() }

// PendingJobs returns the offline pods seen recently and not yet placed by
// the scheduler, for the next planning round.
func (s *Server) PendingJobs(now time.Time) []plan.Job {
	ttl := s.PendingTTL
	if ttl == 0 {
		ttl = 10 * time.Minute
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]plan.Job, 0, len(s.pending))
	for id, p := range s.pending {
		if now.Sub(p.seen) > ttl {
			delete(s.pending, id)
			continue
		}
		j := p.job
		if o, ok := s.owners[id]; ok {
			if m, ok := s.measured[o.Controller]; ok {
				j.Profile = withMeasured(p, m)
				if !p.told {
					p.told = true
					s.pending[id] = p
					s.Log.Info("pending pod planned with what the nodes measured of its controller", "pod", id, "controller", o.Controller, "measured_pod", m.Pod, "kernel_us", j.Profile.KernelUS, "annotated", p.annotated)
				}
			}
		}
		out = append(out, j)
	}
	return out
}

// Handler routes the extender verbs and the plan endpoints:
//
//	POST /filter, /prioritize      kube-scheduler extender verbs
//	POST /bind                     the bind verb (with Kube): annotate the planned GPU, bind
//	GET  /v1/plan                  the latest plan
//	GET  /v1/plan/{ns}/{name}      one pod's assignment
//	GET  /v1/measured              the profiles kept by controller (measured.go)
//	GET  /healthz
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /filter", s.filter)
	mux.HandleFunc("POST /prioritize", s.prioritize)
	mux.HandleFunc("POST /bind", s.bind)
	mux.HandleFunc("GET /v1/plan", s.getPlan)
	mux.HandleFunc("GET /v1/plan/{ns}/{name}", s.getAssignment)
	mux.HandleFunc("GET /v1/measured", s.getMeasured)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	return mux
}

func (s *Server) getPlan(w http.ResponseWriter, _ *http.Request) {
	p := s.Plan()
	if p == nil {
		httpError(w, http.StatusServiceUnavailable, "no plan yet: the first planning round has not finished")
		return
	}
	writeJSON(w, p)
}

func (s *Server) getAssignment(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("ns") + "/" + r.PathValue("name")
	if !validPodID(id) {
		httpError(w, http.StatusBadRequest, "pod must be named namespace/name with DNS-label parts")
		return
	}
	p := s.Plan()
	if p == nil {
		httpError(w, http.StatusServiceUnavailable, "no plan yet: the first planning round has not finished")
		return
	}
	if a, ok := assignmentOf(p, id); ok {
		writeJSON(w, a)
		return
	}
	reason := p.Unassigned[id]
	if reason == "" {
		reason = "not in the current plan"
	}
	httpError(w, http.StatusNotFound, fmt.Sprintf("pod %s has no assignment: %s", id, reason))
}

var podIDPart = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

func validPodID(id string) bool {
	ns, name, ok := strings.Cut(id, "/")
	return ok && len(ns) <= 63 && podIDPart.MatchString(ns) && podIDPart.MatchString(name)
}

func assignmentOf(p *plan.Plan, id string) (plan.Assignment, bool) {
	// Assignments are sorted by job id.
	lo, hi := 0, len(p.Assignments)
	for lo < hi {
		m := (lo + hi) / 2
		if p.Assignments[m].Job < id {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(p.Assignments) && p.Assignments[lo].Job == id {
		return p.Assignments[lo], true
	}
	return plan.Assignment{}, false
}

// decodeArgs reads an ExtenderArgs body as kube-scheduler sends it.
func decodeArgs(w http.ResponseWriter, r *http.Request) (*extenderv1.ExtenderArgs, error) {
	var args extenderv1.ExtenderArgs
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&args); err != nil {
		return nil, fmt.Errorf("decode extender args: %w", err)
	}
	if args.Pod == nil {
		return nil, errors.New("extender args without a pod")
	}
	if args.Nodes == nil && args.NodeNames == nil {
		return nil, errors.New("extender args without candidate nodes")
	}
	return &args, nil
}

func candidateNames(args *extenderv1.ExtenderArgs) []string {
	if args.NodeNames != nil {
		return *args.NodeNames
	}
	names := make([]string, len(args.Nodes.Items))
	for i, n := range args.Nodes.Items {
		names[i] = n.Name
	}
	return names
}

// jobOf reads an offline pod's job description from its annotations; ok is
// false for pods that are not offline.
func jobOf(pod *corev1.Pod) (plan.Job, bool, error) {
	if raw, ok := pod.Annotations[AnnotationClass]; !ok {
		return plan.Job{}, false, nil
	} else if c, err := annotations.ParseClass(AnnotationClass, raw); err != nil {
		return plan.Job{}, false, err
	} else if c != "offline" {
		return plan.Job{}, false, nil
	}
	j := plan.Job{ID: pod.Namespace + "/" + pod.Name}
	if raw, ok := pod.Annotations[AnnotationProfile]; ok {
		dec := json.NewDecoder(strings.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&j.Profile); err != nil {
			return j, true, fmt.Errorf("annotation %s: %w", AnnotationProfile, err)
		}
	}
	if raw, ok := pod.Annotations[AnnotationGPUMemory]; ok {
		mib, err := ParseMiB(raw)
		if err != nil {
			return j, true, err
		}
		j.MemoryMiB = mib
	}
	if raw, ok := pod.Annotations[AnnotationGPUType]; ok {
		ts, err := annotations.ParseGPUTypes(AnnotationGPUType, raw)
		if err != nil {
			return j, true, err
		}
		j.GPUTypes = ts
	}
	return j, true, j.Validate()
}

// ParseMiB reads a muxflow.io/gpu-memory value in MiB, as the node reads it
// (annotations.ParseMemory: "8Gi", "8GiB", "20GB"; a unit is required).
func ParseMiB(s string) (float64, error) {
	b, err := annotations.ParseMemory(AnnotationGPUMemory, s)
	if err != nil {
		return 0, err
	}
	return float64(b) / (1 << 20), nil
}

func (s *Server) filter(w http.ResponseWriter, r *http.Request) {
	args, err := decodeArgs(w, r)
	if err != nil {
		writeJSON(w, extenderv1.ExtenderFilterResult{Error: err.Error()})
		return
	}
	names := candidateNames(args)
	job, offline, err := jobOf(args.Pod)
	if err != nil {
		writeJSON(w, extenderv1.ExtenderFilterResult{Error: fmt.Sprintf("pod %s/%s: %v", args.Pod.Namespace, args.Pod.Name, err)})
		return
	}
	if !offline {
		// Not ours to steer: every candidate passes.
		writeJSON(w, filterResult(args, names, nil))
		return
	}
	s.remember(job, args.Pod)
	failed := extenderv1.FailedNodesMap{}
	keep := map[string]bool{}
	p := s.Plan()
	a, planned := plan.Assignment{}, false
	if p != nil {
		a, planned = assignmentOf(p, job.ID)
	}
	switch {
	case planned:
		for _, n := range names {
			if n == a.Node {
				keep[n] = true
			} else {
				failed[n] = fmt.Sprintf("muxflow plan %d places this pod on %s (GPU %s)", p.Generation, a.Node, a.GPU)
			}
		}
	case s.WaitForPlan:
		msg := "waiting for the muxflow matcher to place this offline pod"
		if p != nil && p.Unassigned[job.ID] != "" {
			msg = "muxflow matcher: " + p.Unassigned[job.ID]
		}
		for _, n := range names {
			failed[n] = msg
		}
	default:
		eligible := s.eligibleNodes(job)
		for _, n := range names {
			if eligible[n] {
				keep[n] = true
			} else {
				failed[n] = "no healthy GPU here with the memory and type this pod needs"
			}
		}
	}
	s.Log.Debug("filter", "pod", job.ID, "candidates", len(names), "kept", len(keep), "planned", planned)
	res := filterResult(args, names, keep)
	res.FailedNodes = failed
	writeJSON(w, res)
}

// filterResult answers in the form the request used: NodeNames for a
// node-cache-capable extender, full Nodes otherwise. keep nil keeps all.
func filterResult(args *extenderv1.ExtenderArgs, names []string, keep map[string]bool) extenderv1.ExtenderFilterResult {
	var res extenderv1.ExtenderFilterResult
	if args.NodeNames != nil {
		out := []string{}
		for _, n := range names {
			if keep == nil || keep[n] {
				out = append(out, n)
			}
		}
		res.NodeNames = &out
		return res
	}
	list := &corev1.NodeList{Items: []corev1.Node{}}
	for _, n := range args.Nodes.Items {
		if keep == nil || keep[n.Name] {
			list.Items = append(list.Items, n)
		}
	}
	res.Nodes = list
	return res
}

func (s *Server) remember(j plan.Job, pod *corev1.Pod) {
	_, annotated := pod.Annotations[AnnotationProfile]
	controller, now := controllerOf(pod), time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	told := s.pending[j.ID].told
	s.pending[j.ID] = pendingJob{job: j, seen: now, annotated: annotated, told: told}
	s.noteOwner(j.ID, controller, now)
}

// eligibleNodes lists nodes with a GPU that could take job now.
func (s *Server) eligibleNodes(j plan.Job) map[string]bool {
	out := map[string]bool{}
	rp := s.reports.Load()
	if rp == nil {
		return out
	}
	mem := j.MemoryMiB
	if mem == 0 {
		mem = j.Profile.MemoryMiB
	}
	for _, r := range *rp {
		for _, g := range r.GPUs {
			if g.Health == profile.Healthy && len(g.Offline) == 0 && g.MemoryKnown() && mem <= g.MemoryFreeMiB &&
				(len(j.GPUTypes) == 0 || contains(j.GPUTypes, g.Type)) {
				out[r.Node.Name] = true
			}
		}
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func (s *Server) prioritize(w http.ResponseWriter, r *http.Request) {
	args, err := decodeArgs(w, r)
	if err != nil {
		// The prioritize verb has no error field: answer with an HTTP
		// error, which kube-scheduler logs and treats as no preference.
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	names := candidateNames(args)
	out := make(extenderv1.HostPriorityList, len(names))
	job, offline, err := jobOf(args.Pod)
	var a plan.Assignment
	planned := false
	if p := s.Plan(); err == nil && offline && p != nil {
		a, planned = assignmentOf(p, job.ID)
	}
	for i, n := range names {
		out[i] = extenderv1.HostPriority{Host: n, Score: extenderv1.MinExtenderPriority}
		if planned && n == a.Node {
			out[i].Score = extenderv1.MaxExtenderPriority
		}
	}
	writeJSON(w, out)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		slog.Warn("write response", "err", err)
	}
}

func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
