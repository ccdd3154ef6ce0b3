package extender

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/muxflow/muxflow/matcher/plan"
	"github.com/muxflow/muxflow/policy/annotations"
)

// bind is kube-scheduler's bind verb. For an offline pod the current plan places on the
// chosen node, it first records the plan's GPU on the pod (annotations.GPU, with the plan
// generation), as HAMi's scheduler records its device choice: the node reads it when it
// creates the pod's containers (containerd passes muxflow.io/* pod annotations to the
// muxflow runtime) and gives the pod exactly that GPU. Then it binds the pod. Any other
// pod is only bound.
func (s *Server) bind(w http.ResponseWriter, r *http.Request) {
	var args extenderv1.ExtenderBindingArgs
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&args); err != nil {
		writeJSON(w, extenderv1.ExtenderBindingResult{Error: fmt.Sprintf("decode binding args: %v", err)})
		return
	}
	id := args.PodNamespace + "/" + args.PodName
	if !validPodID(id) || args.Node == "" {
		writeJSON(w, extenderv1.ExtenderBindingResult{Error: "binding args need a pod namespace, name and node"})
		return
	}
	if s.Kube == nil {
		writeJSON(w, extenderv1.ExtenderBindingResult{Error: "this muxmatch has no Kubernetes API access for the bind verb (muxmatch serve --kube-server)"})
		return
	}
	ctx := r.Context()
	if p := s.Plan(); p != nil {
		if a, ok := assignmentOf(p, id); ok {
			if a.Node != args.Node {
				writeJSON(w, extenderv1.ExtenderBindingResult{Error: fmt.Sprintf("muxflow plan %d places pod %s on %s, not %s", p.Generation, id, a.Node, args.Node)})
				return
			}
			ann := map[string]string{annotations.GPU: a.GPU, annotations.PlanGeneration: strconv.FormatInt(p.Generation, 10)}
			if err := s.Kube.Annotate(ctx, args.PodNamespace, args.PodName, string(args.PodUID), ann); err != nil {
				writeJSON(w, extenderv1.ExtenderBindingResult{Error: fmt.Sprintf("record the planned GPU on pod %s: %v", id, err)})
				return
			}
			s.Log.Info("bound offline pod to its planned GPU", "pod", id, "node", a.Node, "gpu", a.GPU, "plan", p.Generation)
		}
	}
	if err := s.Kube.Bind(ctx, args.PodNamespace, args.PodName, string(args.PodUID), args.Node); err != nil {
		writeJSON(w, extenderv1.ExtenderBindingResult{Error: fmt.Sprintf("bind pod %s: %v", id, err)})
		return
	}
	// Bound: no longer a pending job for the next planning round.
	s.mu.Lock()
	delete(s.pending, id)
	s.mu.Unlock()
	writeJSON(w, extenderv1.ExtenderBindingResult{})
}

// Requeue tells kube-scheduler about offline pods the latest plan places for the first
// time. A pod the extender held ("waiting for the muxflow matcher…") sits in the
// scheduler's unschedulable queue, which is only retried on a cluster event or after
// minutes; an update of the pod itself is such an event. So each newly placed pending pod
// gets muxflow.io/plan-generation set to the plan that placed it (the bind verb writes it
// again with the GPU). Without Kube it does nothing.
func (s *Server) Requeue(ctx context.Context) {
	p := s.Plan()
	if s.Kube == nil || p == nil {
		return
	}
	var todo []plan.Assignment
	s.mu.Lock()
	if s.requeued == nil {
		s.requeued = map[string]bool{}
	}
	for id := range s.pending {
		if a, ok := assignmentOf(p, id); ok && !s.requeued[id] {
			todo = append(todo, a)
			s.requeued[id] = true
		}
	}
	for id := range s.requeued {
		if _, ok := s.pending[id]; !ok {
			delete(s.requeued, id) // bound or forgotten
		}
	}
	s.mu.Unlock()
	for _, a := range todo {
		ns, name, _ := strings.Cut(a.Job, "/")
		err := s.Kube.Annotate(ctx, ns, name, "", map[string]string{annotations.PlanGeneration: strconv.FormatInt(p.Generation, 10)})
		if err != nil {
			s.Log.Warn("cannot requeue a newly placed pod", "pod", a.Job, "err", err)
			s.mu.Lock()
			delete(s.requeued, a.Job) // try again next round
			s.mu.Unlock()
			continue
		}
		s.Log.Info("requeued a newly placed pod", "pod", a.Job, "node", a.Node, "gpu", a.GPU, "plan", p.Generation)
	}
}
