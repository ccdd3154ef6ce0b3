package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/wiring"
)

// Issue 18, item 1: a bad class or limit gets the same sentence whichever way it reaches
// muxd — an annotation or its standing-in variable in a runtime create request, or a
// field of POST /v1/containers — only the name of its source differs; and nothing is
// registered.
func TestBadLimitGetsOneSentenceAtEachEntry(t *testing.T) {
	n, hook := runtimeNode(t)
	ctx := context.Background()
	bundle := filepath.Join(n.dir, "bundle")
	for _, tc := range []struct {
		name              string
		class             string // "" = the policy's default (offline)
		ann, env, field   string
		annValue          string
		apiLimits, reason string
	}{
		{"sm above the class", "offline", "muxflow.io/sm-percent", "MUXFLOW_SM_PERCENT", "limits.sm_percent", "95", `{"sm_percent":95}`, "95% is outside the offline class's range 5%..70%"},
		{"sm below the class", "offline", "muxflow.io/sm-percent", "MUXFLOW_SM_PERCENT", "limits.sm_percent", "4", `{"sm_percent":4}`, "4% is outside the offline class's range 5%..70%"},
		{"sm negative", "offline", "muxflow.io/sm-percent", "MUXFLOW_SM_PERCENT", "limits.sm_percent", "-5", `{"sm_percent":-5}`, "-5% is outside the offline class's range 5%..70%"},
		{"online sm below its floor", "online", "muxflow.io/sm-percent", "MUXFLOW_SM_PERCENT", "limits.sm_percent", "20", `{"sm_percent":20}`, "20% is outside the online class's range 50%..100%"},
		{"sm above 100", "online", "muxflow.io/sm-percent", "MUXFLOW_SM_PERCENT", "limits.sm_percent", "101%", `{"sm_percent":101}`, "101% is outside the online class's range 50%..100%"},
		{"unknown class", "", "muxflow.io/class", "MUXFLOW_CLASS", "class", "batch", `{}`, `"batch" is not online or offline`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := map[string]string{tc.ann: tc.annValue}
			env := []string{"NVIDIA_VISIBLE_DEVICES=0", tc.env + "=" + tc.annValue}
			class := tc.class
			if tc.ann == "muxflow.io/class" {
				class = tc.annValue
			} else {
				ann["muxflow.io/class"] = tc.class
				env = append(env, "MUXFLOW_CLASS="+tc.class)
			}
			code, _, body := post(t, n.socket, createPath("by-annotation", bundle, hook), specWith([]string{"NVIDIA_VISIBLE_DEVICES=0"}, ann))
			want := "muxflow: annotation " + tc.ann + ": " + tc.reason + "\n"
			if code != http.StatusBadRequest || string(body) != want {
				t.Errorf("annotation: %d %q, want 400 %q", code, body, want)
			}
			code, _, body = post(t, n.socket, createPath("by-variable", bundle, hook), specWith(env, nil))
			want = "muxflow: environment variable " + tc.env + ": " + tc.reason + "\n"
			if code != http.StatusBadRequest || string(body) != want {
				t.Errorf("variable: %d %q, want 400 %q", code, body, want)
			}
			req := fmt.Sprintf(`{"id":"by-request","class":%q,"gpus":["0"],"limits":%s}`, class, tc.apiLimits)
			code, body2 := raw(t, n.socket, "POST", "/v1/containers", req)
			var e api.Error
			if err := json.Unmarshal([]byte(body2), &e); err != nil {
				t.Fatalf("request: %d %s", code, body2)
			}
			want = "invalid request: " + tc.field + ": " + tc.reason
			if code != http.StatusBadRequest || e.Error != want {
				t.Errorf("request: %d %q, want 400 %q", code, e.Error, want)
			}
			if cs, _ := n.client.Containers(ctx); len(cs) != 0 {
				t.Errorf("registered despite the bad value: %+v", cs)
			}
		})
	}
}

// Issue 18, item 1: the MPS active-thread percentage a wired container's environment
// carries is the one in its control block (one computation, blocks.MPSThreadCeiling):
// for a container alone on its GPU, for each class and sm-percent. 0 and 100 in the block
// both mean no backstop, and then the variable is not set; nor is it for an offline
// container without an sm-percent, which alloc.fit may give the whole GPU.
func TestWiredThreadPercentIsTheControlBlocks(t *testing.T) {
	n, hook := runtimeNode(t)
	ctx := context.Background()
	bundle := filepath.Join(n.dir, "bundle")
	for i, tc := range []struct {
		class, sm string // sm "" = none
		want      uint32
	}{
		{"offline", "", 70}, // the class's sm_max, no GPU budget known yet
		{"offline", "5", 5},
		{"offline", "30", 30},
		{"offline", "30%", 30},
		{"offline", "69", 69},
		{"offline", "70", 70},
		{"online", "", 0}, // sm_max 100: no backstop
		{"online", "50", 50},
		{"online", "85", 85},
		{"online", "99", 99},
		{"online", "100", 100},
	} {
		id := "c" + strconv.Itoa(i)
		ann := map[string]string{"muxflow.io/class": tc.class}
		if tc.sm != "" {
			ann["muxflow.io/sm-percent"] = tc.sm
		}
		code, _, body := post(t, n.socket, createPath(id, bundle, hook), specWith([]string{"NVIDIA_VISIBLE_DEVICES=0"}, ann))
		if code != http.StatusOK {
			t.Fatalf("%s sm-percent %q: %d %s", tc.class, tc.sm, code, body)
		}
		var s specs.Spec
		if err := json.Unmarshal(body, &s); err != nil {
			t.Fatal(err)
		}
		var env string
		for _, kv := range s.Process.Env {
			if v, ok := strings.CutPrefix(kv, wiring.EnvThreadPercent+"="); ok {
				env = v
			}
		}
		block := n.d.controls.Block(id).Limits().MPSActiveThreadPercent
		wantEnv := strconv.FormatUint(uint64(block), 10)
		if block == 0 || block == 100 || (tc.class == "offline" && tc.sm == "") {
			wantEnv = "" // alloc.fit may give offline work the whole GPU: the block says
		}
		if block != tc.want || env != wantEnv {
			t.Errorf("%s sm-percent %q: control block %d%%, %s=%q; want %d%% and %q", tc.class, tc.sm, block, wiring.EnvThreadPercent, env, tc.want, wantEnv)
		}
		if err := n.client.Unregister(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}

// A container whose wiring fails after its registration is not left registered: muxd
// undoes the registration and removes its control block.
func TestWiringFailureUndoesTheRegistration(t *testing.T) {
	n, hook := runtimeNode(t)
	ctx := context.Background()
	bundle := filepath.Join(n.dir, "bundle")
	if err := os.Remove(filepath.Join(n.dir, "bin", "libxcuda.so")); err != nil {
		t.Fatal(err)
	}
	code, _, body := post(t, n.socket, createPath("c1", bundle, hook), specWith([]string{"NVIDIA_VISIBLE_DEVICES=0"}, nil))
	if code != http.StatusInternalServerError || !strings.HasPrefix(string(body), "muxflow: cannot wire GPU container c1: libxcuda is not installed") {
		t.Fatalf("%d %q, want 500 saying libxcuda is missing", code, body)
	}
	if cs, _ := n.client.Containers(ctx); len(cs) != 0 {
		t.Errorf("left registered: %+v", cs)
	}
	if _, err := os.Stat(filepath.Join(n.dir, "run", "c", "c1")); !os.IsNotExist(err) {
		t.Errorf("control block left behind: %v", err)
	}
}
