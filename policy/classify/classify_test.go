package classify

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/policy"
)

func TestClassify(t *testing.T) {
	p := policy.Default()
	p.Classes.Offline.MemoryLimit = 16 << 30
	for _, tc := range []struct {
		name      string
		ann       map[string]string
		class     api.Class
		limits    api.Limits
		errSubstr string
	}{
		{"defaults", nil, api.Offline, api.Limits{}, ""},
		{"online", map[string]string{"muxflow.io/class": "online"}, api.Online, api.Limits{}, ""},
		{"limits", map[string]string{"muxflow.io/gpu-memory": "8GiB", "muxflow.io/sm-percent": "30"}, api.Offline, api.Limits{GPUMemory: 8 << 30, SMPercent: 30}, ""},
		{"kubernetes binary unit", map[string]string{"muxflow.io/gpu-memory": "8Gi"}, api.Offline, api.Limits{GPUMemory: 8 << 30}, ""},
		{"decimal unit", map[string]string{"muxflow.io/gpu-memory": "10GB"}, api.Offline, api.Limits{GPUMemory: 10e9}, ""},
		{"memory without unit", map[string]string{"muxflow.io/gpu-memory": "8192"}, "", api.Limits{}, `annotation muxflow.io/gpu-memory: "8192" needs a unit`},
		{"percent sign", map[string]string{"muxflow.io/sm-percent": "30%"}, api.Offline, api.Limits{SMPercent: 30}, ""},
		{"bad class", map[string]string{"muxflow.io/class": "batch"}, "", api.Limits{}, "annotation muxflow.io/class"},
		{"memory above class", map[string]string{"muxflow.io/gpu-memory": "32GiB"}, "", api.Limits{}, "annotation muxflow.io/gpu-memory: 32GiB is above the offline class limit of 16GiB"},
		{"memory garbage", map[string]string{"muxflow.io/gpu-memory": "lots"}, "", api.Limits{}, "annotation muxflow.io/gpu-memory"},
		{"memory zero", map[string]string{"muxflow.io/gpu-memory": "0"}, "", api.Limits{}, "annotation muxflow.io/gpu-memory"},
		{"memory huge value", map[string]string{"muxflow.io/gpu-memory": strings.Repeat("9", 100000)}, "", api.Limits{}, "100000 bytes long"},
		{"sm above class", map[string]string{"muxflow.io/sm-percent": "95"}, "", api.Limits{}, "95% is outside the offline class's range 5%..70%"},
		{"sm fraction", map[string]string{"muxflow.io/sm-percent": "0.3"}, "", api.Limits{}, "annotation muxflow.io/sm-percent"},
		{"online sm below floor", map[string]string{"muxflow.io/class": "online", "muxflow.io/sm-percent": "20"}, "", api.Limits{}, "outside the online class's range 50%..100%"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			class, lim, err := Classify(tc.ann, p)
			if tc.errSubstr != "" {
				var ae *AnnotationError
				if !errors.As(err, &ae) || !strings.Contains(err.Error(), tc.errSubstr) {
					t.Fatalf("err = %v, want an AnnotationError containing %q", err, tc.errSubstr)
				}
				if len(err.Error()) > 300 {
					t.Errorf("message is %d bytes long; it must stay one short sentence", len(err.Error()))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if class != tc.class {
				t.Errorf("class = %q, want %q", class, tc.class)
			}
			if diff := cmp.Diff(tc.limits, lim); diff != "" {
				t.Errorf("limits (-want +got):\n%s", diff)
			}
		})
	}
}
