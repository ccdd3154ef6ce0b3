package kubeapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

func TestConnectAndDo(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := Connect("", "", ""); !errors.Is(err, ErrNotInCluster) {
		t.Errorf("no server outside a pod: %v, want ErrNotInCluster", err)
	}
	if _, err := Connect("ftp://x", "", ""); err == nil {
		t.Error("an ftp:// server was accepted")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Authorization") != "Bearer t0k":
			w.WriteHeader(http.StatusUnauthorized)
		case r.URL.EscapedPath() == "/api/v1/namespaces/ml/pods/a%2Fb/binding":
			w.WriteHeader(http.StatusCreated)
		case r.Method == http.MethodGet && r.URL.Path == "/apis/batch/v1/namespaces/ml/jobs/j":
			w.Write([]byte(`{"metadata":{"name":"j"}}`))
		case r.Method == http.MethodGet && r.URL.Path == "/apis/batch/v1/namespaces/ml/jobs/garbled":
			w.Write([]byte(`{"metadata":`))
		default:
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"kind":"Status","message":"Precondition failed: UID in precondition"}`))
		}
	}))
	defer srv.Close()
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("t0k\n"), 0o600)
	c, err := Connect(srv.URL, tok, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Do(context.Background(), http.MethodPost, PodPath("ml", "a/b", "/binding"), "application/json", map[string]any{}); err != nil {
		t.Errorf("binding (an escaped name): %v", err)
	}
	err = c.Do(context.Background(), http.MethodPatch, PodPath("ml", "x", ""), "application/merge-patch+json", map[string]any{})
	var st *StatusError
	if !errors.As(err, &st) || st.Code != http.StatusConflict || st.Message != "Precondition failed: UID in precondition" {
		t.Errorf("a refused patch: %v, want a 409 StatusError carrying the API's message", err)
	}
	var job struct {
		Metadata struct{ Name string } `json:"metadata"`
	}
	if err := c.Get(context.Background(), "/apis/batch/v1/namespaces/ml/jobs/j", &job); err != nil || job.Metadata.Name != "j" {
		t.Errorf("get: %v, %+v", err, job)
	}
	if err := c.Get(context.Background(), "/apis/batch/v1/namespaces/ml/jobs/garbled", &job); err == nil {
		t.Error("a garbled answer was decoded")
	}
	if err := c.Get(context.Background(), "/apis/batch/v1/namespaces/ml/jobs/gone", &job); !errors.As(err, &st) || st.Code != http.StatusConflict {
		t.Errorf("a refused get: %v, want a StatusError", err)
	}
}
