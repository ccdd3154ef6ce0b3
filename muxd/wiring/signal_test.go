package wiring

import (
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/muxflow/muxflow/muxd/api"
)

// TestPlanMountsSignalPage: the node's GPU signal page is mounted read-write into online
// containers (they publish their pending work) and read-only into offline ones (they must
// never be able to hold anyone back); none without a page; never from outside run_dir.
func TestPlanMountsSignalPage(t *testing.T) {
	ctl := api.ControlPaths{Dir: "/run/mf/c/c1", Limits: "/run/mf/c/c1/limits", Usage: "/run/mf/c/c1/usage"}
	for _, tc := range []struct {
		class  api.Class
		signal string
		want   string // "rw", "ro" or "" (no mount)
	}{
		{api.Online, "/run/mf/signal", "rw"},
		{api.Offline, "/run/mf/signal", "ro"},
		{api.Offline, "", ""},
	} {
		pl := Plan{Container: container(tc.class, ctl), Policy: testPolicy(), Preload: "/p", Signal: tc.signal}
		mods, err := pl.Modifiers()
		if err != nil {
			t.Fatal(err)
		}
		s := baseSpec()
		if err := mods.Modify(s); err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == ContainerSignal })
		switch {
		case tc.want == "" && i >= 0:
			t.Errorf("%s without a page: mounted %v", tc.class, s.Mounts[i])
		case tc.want != "" && i < 0:
			t.Errorf("%s: signal page not mounted: %v", tc.class, s.Mounts)
		case tc.want != "" && (s.Mounts[i].Source != tc.signal || !slices.Contains(s.Mounts[i].Options, tc.want)):
			t.Errorf("%s: signal mount %v, want %s from %s", tc.class, s.Mounts[i], tc.want, tc.signal)
		}
	}
	pl := Plan{Container: container(api.Online, ctl), Policy: testPolicy(), Preload: "/p", Signal: "/etc/shadow"}
	if _, err := pl.Modifiers(); err == nil {
		t.Error("a signal page outside run_dir was accepted")
	}
}
