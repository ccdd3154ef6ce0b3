package classify

import (
	"errors"
	"strings"
	"testing"

	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/policy"
)

// The three entries (annotation, standing-in variable, API request) give the same reason
// for the same bad value; only the name of the source differs.
func TestSameReasonAtEachEntry(t *testing.T) {
	p := policy.Default()
	p.Classes.Offline.MemoryLimit = 16 << 30
	for _, tc := range []struct {
		ann, env, field, text string
		lim                   api.Limits
		reason                string
	}{
		{"muxflow.io/sm-percent", EnvSMPercent, FieldSMPercent, "95", api.Limits{SMPercent: 95}, "95% is outside the offline class's range 5%..70%"},
		{"muxflow.io/sm-percent", EnvSMPercent, FieldSMPercent, "-1", api.Limits{SMPercent: -1}, "-1% is outside the offline class's range 5%..70%"},
		{"muxflow.io/gpu-memory", EnvGPUMemory, FieldGPUMemory, "32Gi", api.Limits{GPUMemory: 32 << 30}, "32GiB is above the offline class limit of 16GiB"},
	} {
		ann := map[string]string{"muxflow.io/class": "offline", tc.ann: tc.text}
		_, _, err := Classify(ann, p)
		want := "muxflow: annotation " + tc.ann + ": " + tc.reason
		if err == nil || err.Error() != want {
			t.Errorf("annotation %s=%q: %v, want %q", tc.ann, tc.text, err, want)
		}
		_, _, err = Spec(nil, []string{"MUXFLOW_CLASS=offline", tc.env + "=" + tc.text}, p)
		want = "muxflow: environment variable " + tc.env + ": " + tc.reason
		if err == nil || err.Error() != want {
			t.Errorf("variable %s=%q: %v, want %q", tc.env, tc.text, err, want)
		}
		_, err = Request(api.RegisterRequest{ID: "c1", Class: api.Offline, GPUs: []string{"0"}, Limits: tc.lim}, p)
		want = "invalid request: " + tc.field + ": " + tc.reason
		var fe *FieldError
		if err == nil || err.Error() != want || !errors.Is(err, api.ErrInvalid) || !errors.As(err, &fe) {
			t.Errorf("request %+v: %v, want an api.ErrInvalid %q", tc.lim, err, want)
		}
	}
	_, err := Request(api.RegisterRequest{ID: "c1", Class: "batch", GPUs: []string{"0"}}, p)
	if want := `invalid request: class: "batch" is not online or offline`; err == nil || err.Error() != want {
		t.Errorf("request class batch: %v, want %q", err, want)
	}
}

// A Registration holds what the check accepted: the request's class and limits as they
// were, its GPUs copied.
func TestRequestMakesARegistration(t *testing.T) {
	gpus := []string{"0", "GPU-5e9d0000"}
	in := api.RegisterRequest{ID: "c1", Class: api.Offline, GPUs: gpus, Limits: api.Limits{GPUMemory: 8 << 30, SMPercent: 30}, Namespace: "k8s.io", Pod: "ml/train-0"}
	reg, err := Request(in, policy.Default())
	if err != nil {
		t.Fatal(err)
	}
	gpus[0] = "7"
	got := reg.Request()
	if got.ID != "c1" || got.Class != api.Offline || got.Limits != in.Limits || got.GPUs[0] != "0" || got.Namespace != "k8s.io" || got.Pod != "ml/train-0" {
		t.Errorf("registration = %+v", got)
	}
	for _, bad := range []api.RegisterRequest{
		{ID: "../x", Class: api.Offline, GPUs: []string{"0"}},
		{ID: "c1", Class: api.Offline},
		{ID: "c1", Class: api.Offline, GPUs: []string{"/dev/sda"}},
		{ID: "c1", Class: "", GPUs: []string{"0"}},
	} {
		if _, err := Request(bad, policy.Default()); !errors.Is(err, api.ErrInvalid) || strings.Count(err.Error(), "\n") != 0 {
			t.Errorf("Request(%+v) = %v, want one api.ErrInvalid sentence", bad, err)
		}
	}
}
