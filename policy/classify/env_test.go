package classify

import (
	"errors"
	"strings"
	"testing"

	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/policy"
)

// TestSpecEnvFallback: where the engine cannot set annotations (Docker 20.10), the class
// and limits come from MUXFLOW_* variables, checked as annotations are; an annotation wins.
func TestSpecEnvFallback(t *testing.T) {
	p := policy.Default()
	class, lim, err := Spec(nil, []string{"PATH=/bin", "MUXFLOW_CLASS=online", "MUXFLOW_GPU_MEMORY=4GiB", "MUXFLOW_SM_PERCENT=60"}, p)
	if err != nil || class != api.Online || lim.GPUMemory != 4<<30 || lim.SMPercent != 60 {
		t.Fatalf("env: %v %v %+v", err, class, lim)
	}
	class, _, err = Spec(map[string]string{"muxflow.io/class": "offline"}, []string{"MUXFLOW_CLASS=online"}, p)
	if err != nil || class != api.Offline {
		t.Errorf("the annotation did not win over the variable: %v %v", class, err)
	}
	class, _, err = Spec(nil, []string{"MUXFLOW_CLASS=online", "MUXFLOW_CLASS=offline"}, p)
	if err != nil || class != api.Offline {
		t.Errorf("the last setting did not win: %v %v", class, err)
	}
	if class, _, err := Spec(nil, nil, p); err != nil || class != api.Class(p.Classify.Default) {
		t.Errorf("no annotation and no variable: %v %v", class, err)
	}
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"MUXFLOW_CLASS=batch"}, "muxflow: environment variable MUXFLOW_CLASS: "},
		{[]string{"MUXFLOW_CLASS=offline", "MUXFLOW_SM_PERCENT=95"}, "muxflow: environment variable MUXFLOW_SM_PERCENT: 95% is outside the offline class's range"},
		{[]string{"MUXFLOW_GPU_MEMORY=lots"}, "muxflow: environment variable MUXFLOW_GPU_MEMORY: "},
	} {
		_, _, err := Spec(nil, tc.env, p)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Spec(%q) = %v, want %q...", tc.env, err, tc.want)
		}
		var ae *AnnotationError
		if !errors.As(err, &ae) {
			t.Errorf("Spec(%q): %T is not an AnnotationError underneath", tc.env, err)
		}
	}
	// A bad annotation is still reported as the annotation.
	_, _, err = Spec(map[string]string{"muxflow.io/sm-percent": "500"}, []string{"MUXFLOW_SM_PERCENT=40"}, p)
	if err == nil || !strings.Contains(err.Error(), "annotation muxflow.io/sm-percent") {
		t.Errorf("bad annotation: %v", err)
	}
}
