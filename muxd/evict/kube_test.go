package evict

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestKubernetesEviction(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			APIVersion, Kind string
			Metadata         struct{ Name, Namespace string }
			DeleteOptions    struct{ GracePeriodSeconds int64 }
		}
		json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization")+" "+body.Kind+" "+body.Metadata.Namespace+"/"+body.Metadata.Name)
		mu.Unlock()
		if body.Metadata.Name == "guarded" {
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(`{"message":"Cannot evict pod as it would violate the pod's disruption budget."}`))
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	var fellBack []string
	k := &Kubernetes{Server: srv.URL, Token: "t0k", HTTP: srv.Client(),
		Fallback: stopFunc(func(tg Target) { fellBack = append(fellBack, tg.ID) })}

	// The pod's process exits after the API call (as the kubelet would stop it).
	cmd, done := spawn(t, "trap 'exit 0' TERM; while :; do sleep 0.05; done")
	go func() { time.Sleep(200 * time.Millisecond); cmd.Process.Signal(syscall.SIGTERM) }()
	if err := k.Stop(context.Background(), Target{ID: "c1", Pod: "ml/train-0", PID: cmd.Process.Pid}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	<-done
	if len(got) != 1 || got[0] != "POST /api/v1/namespaces/ml/pods/train-0/eviction Bearer t0k Eviction ml/train-0" {
		t.Errorf("API calls: %v", got)
	}
	if len(fellBack) != 0 {
		t.Errorf("fell back although the pod went: %v", fellBack)
	}
	err := k.Stop(context.Background(), Target{ID: "c2", Pod: "ml/guarded", PID: 1}, time.Second)
	if err == nil || !strings.Contains(err.Error(), "PodDisruptionBudget") {
		t.Errorf("a refused eviction: %v", err)
	}
	k.Stop(context.Background(), Target{ID: "plain", PID: 1}, time.Second)
	if len(fellBack) != 1 || fellBack[0] != "plain" {
		t.Errorf("a target without pod did not go to the fallback: %v", fellBack)
	}
}
