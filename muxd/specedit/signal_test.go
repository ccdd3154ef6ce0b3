package specedit

import (
	"encoding/json"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/muxd/wiring"
)

// TestSignalPageMountedWhenMuxdHasOne: with muxd's GPU signal page in place, an online
// container gets it read-write and an offline one read-only; without it (an older muxd)
// nothing is mounted and the container is still wired.
func TestSignalPageMountedWhenMuxdHasOne(t *testing.T) {
	e := newEnv(t)
	mounted := func(id, class string) *specs.Mount {
		t.Helper()
		b, spec := e.bundle("b-"+id, []string{"NVIDIA_VISIBLE_DEVICES=0"}, map[string]string{"muxflow.io/class": class})
		_, raw, err := e.create(id, b, spec)
		if err != nil {
			t.Fatal(err)
		}
		var s specs.Spec
		must(t, json.Unmarshal(raw, &s))
		i := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == wiring.ContainerSignal })
		if i < 0 {
			return nil
		}
		return &s.Mounts[i]
	}
	if m := mounted("c0", "offline"); m != nil {
		t.Errorf("no signal page on the host, but mounted %+v", m)
	}
	page := ctlblock.SignalPagePath(e.policy.Node.RunDir)
	writeFile(t, page, "", 0o666)
	if m := mounted("c1", "online"); m == nil || m.Source != page || !slices.Contains(m.Options, "rw") {
		t.Errorf("online container: signal mount %+v, want %s read-write", m, page)
	}
	if m := mounted("c2", "offline"); m == nil || m.Source != page || !slices.Contains(m.Options, "ro") {
		t.Errorf("offline container: signal mount %+v, want %s read-only", m, page)
	}
}
