package extender

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/muxflow/muxflow/muxd/kubeapi"
)

// Kube is the little of the Kubernetes API the extender uses: annotate a pod, then bind
// it (the bind verb), and read a Job's controller (measured.go) (muxd/kubeapi speaks the
// REST).
type Kube struct {
	api *kubeapi.Client
}

// NewKube builds a client from a server URL, a token file and a CA file; empty values
// fall back to the in-cluster service account.
func NewKube(server, tokenFile, caFile string) (*Kube, error) {
	c, err := kubeapi.Connect(server, tokenFile, caFile)
	if errors.Is(err, kubeapi.ErrNotInCluster) {
		return nil, fmt.Errorf("no Kubernetes API server: give --kube-server or run in a pod")
	}
	if err != nil {
		return nil, err
	}
	return &Kube{api: c}, nil
}

// Annotate merges annotations into a pod's metadata; uid guards against a pod of the
// same name created since the scheduler read it.
func (k *Kube) Annotate(ctx context.Context, ns, name, uid string, ann map[string]string) error {
	meta := map[string]any{"annotations": ann}
	if uid != "" {
		meta["uid"] = uid // a precondition: the patch fails on another pod of this name
	}
	return k.api.Do(ctx, http.MethodPatch, kubeapi.PodPath(ns, name, ""),
		"application/merge-patch+json", map[string]any{"metadata": meta})
}

// Bind binds a pod to a node, as kube-scheduler's default binder does.
func (k *Kube) Bind(ctx context.Context, ns, name, uid, node string) error {
	b := map[string]any{
		"apiVersion": "v1", "kind": "Binding",
		"metadata": map[string]any{"name": name, "namespace": ns, "uid": uid},
		"target":   map[string]any{"apiVersion": "v1", "kind": "Node", "name": node},
	}
	return k.api.Do(ctx, http.MethodPost, kubeapi.PodPath(ns, name, "/binding"), "application/json", b)
}

// JobController reads a Job's controller (the CronJob that made it, typically) from its
// owner references: its kind and name, both "" where it has none.
func (k *Kube) JobController(ctx context.Context, ns, name string) (kind, controller string, err error) {
	var job struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := k.api.Get(ctx, "/apis/batch/v1/namespaces/"+url.PathEscape(ns)+"/jobs/"+url.PathEscape(name), &job); err != nil {
		return "", "", err
	}
	for _, r := range job.Metadata.OwnerReferences {
		if r.Controller != nil && *r.Controller && r.Kind != "" && r.Name != "" {
			return r.Kind, r.Name, nil
		}
	}
	return "", "", nil
}
