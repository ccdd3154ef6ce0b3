package ctlblock

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fieldLayout is one field's place in a struct, as Go or C sees it.
type fieldLayout struct {
	Name   string
	Offset uintptr
	Size   uintptr
}

type layoutCase struct {
	cType string
	goVal any
}

var layoutCases = []layoutCase{
	{"xcuda_header", rawHeader{}},
	{"xcuda_limits", rawLimits{}},
	{"xcuda_proc", rawProc{}},
	{"xcuda_usage", rawUsage{}},
	{"xcuda_signal_slot", rawSignalSlot{}},
	{"xcuda_signal", rawSignal{}},
}

func goLayout(t *testing.T, v any) []fieldLayout {
	t.Helper()
	rt := reflect.TypeOf(v)
	out := []fieldLayout{{Name: "sizeof", Size: rt.Size()}}
	for i := range rt.NumField() {
		f := rt.Field(i)
		name := f.Tag.Get("c")
		if name == "" {
			t.Fatalf("%s.%s has no c tag", rt.Name(), f.Name)
		}
		out = append(out, fieldLayout{Name: name, Offset: f.Offset, Size: f.Type.Size()})
	}
	return out
}

// TestLayoutMatchesHeader compiles xcuda_ctl.h with gcc and fails on any
// size or offset drift between the C header and the Go mirror.
func TestLayoutMatchesHeader(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatalf("gcc is needed to check the control block layout against xcuda_ctl.h (install gcc): %v", err)
	}
	_, self, _, _ := runtime.Caller(0)
	include := filepath.Join(filepath.Dir(self), "..", "include")
	var src strings.Builder
	src.WriteString("#include <stdio.h>\n#include <stddef.h>\n#include \"xcuda_ctl.h\"\nint main(void) {\n")
	want := map[string][]fieldLayout{}
	for _, c := range layoutCases {
		fields := goLayout(t, c.goVal)
		want[c.cType] = fields
		fmt.Fprintf(&src, "printf(\"%s sizeof 0 %%zu\\n\", sizeof(%s));\n", c.cType, c.cType)
		for _, f := range fields[1:] {
			fmt.Fprintf(&src, "printf(\"%s %s %%zu %%zu\\n\", offsetof(%s, %s), sizeof(((%s *)0)->%s));\n",
				c.cType, f.Name, c.cType, f.Name, c.cType, f.Name)
		}
	}
	src.WriteString("return 0;\n}\n")
	dir := t.TempDir()
	cfile := filepath.Join(dir, "layout.c")
	if err := os.WriteFile(cfile, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "layout")
	if out, err := exec.Command(gcc, "-std=c11", "-Wall", "-Werror", "-I", include, "-o", bin, cfile).CombinedOutput(); err != nil {
		t.Fatalf("compile layout probe: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("run layout probe: %v", err)
	}
	got := map[string][]fieldLayout{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var typ, name string
		var off, size uintptr
		if _, err := fmt.Sscanf(line, "%s %s %d %d", &typ, &name, &off, &size); err != nil {
			t.Fatalf("parse probe line %q: %v", line, err)
		}
		got[typ] = append(got[typ], fieldLayout{Name: name, Offset: off, Size: size})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Go mirror drifted from xcuda_ctl.h (-go +c):\n%s", diff)
	}
}

// TestConstantsMatchHeader guards the constants the two sides must agree on.
func TestConstantsMatchHeader(t *testing.T) {
	_, self, _, _ := runtime.Caller(0)
	hdr, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "include", "xcuda_ctl.h"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("#define XCUDA_CTL_VERSION %du", Version),
		fmt.Sprintf("#define XCUDA_LIMITS_MAGIC %#xull", LimitsMagic),
		fmt.Sprintf("#define XCUDA_USAGE_MAGIC %#xull", UsageMagic),
		fmt.Sprintf("#define XCUDA_MAX_DEVICES %d", MaxDevices),
		fmt.Sprintf("#define XCUDA_MAX_PROCS %d", MaxProcs),
		fmt.Sprintf("#define XCUDA_SHARE_FULL %du", ShareFull),
		fmt.Sprintf("#define XCUDA_DEFAULT_MAX_INFLIGHT %du", DefaultMaxInFlight),
		fmt.Sprintf("#define XCUDA_MAX_INFLIGHT_CAP %du", MaxInFlightCap),
		fmt.Sprintf("#define XCUDA_DEFAULT_DIR %q", ContainerDir),
		fmt.Sprintf("#define XCUDA_ENV_CONTROL_BLOCK %q", EnvDir),
		fmt.Sprintf("#define XCUDA_LIMITS_FILE %q", LimitsFile),
		fmt.Sprintf("#define XCUDA_USAGE_FILE %q", UsageFile),
		fmt.Sprintf("#define XCUDA_PROC_DRAINING %#xu", procDraining),
		fmt.Sprintf("#define XCUDA_SIGNAL_MAGIC %#xull", SignalMagic),
		fmt.Sprintf("#define XCUDA_SIGNAL_SLOTS %d", SignalSlots),
		fmt.Sprintf("#define XCUDA_SIGNAL_FILE %q", SignalFile),
		fmt.Sprintf("#define XCUDA_DEFAULT_SIGNAL %q", ContainerSignal),
		fmt.Sprintf("#define XCUDA_ENV_SIGNAL %q", EnvSignal),
		fmt.Sprintf("#define XCUDA_SIGNAL_NONE %du", SignalNone),
		fmt.Sprintf("#define XCUDA_SIGNAL_PUBLISH %du", SignalPublish),
		fmt.Sprintf("#define XCUDA_SIGNAL_FOLLOW %du", SignalFollow),
		fmt.Sprintf("#define XCUDA_DEFAULT_HOLD_WINDOW_NS %dull", DefaultHoldWindow.Nanoseconds()),
		fmt.Sprintf("#define XCUDA_DEFAULT_HOLD_PERIOD_NS %dull", DefaultHoldPeriod.Nanoseconds()),
		fmt.Sprintf("#define XCUDA_DEFAULT_HOLD_MAX_BP %du", DefaultHoldMaxBP),
		fmt.Sprintf("#define XCUDA_HOLD_WINDOW_MAX_NS %dull", HoldWindowMax.Nanoseconds()),
		fmt.Sprintf("#define XCUDA_HOLD_PERIOD_MIN_NS %dull", HoldPeriodMin.Nanoseconds()),
		fmt.Sprintf("#define XCUDA_HOLD_PERIOD_MAX_NS %dull", HoldPeriodMax.Nanoseconds()),
		fmt.Sprintf("#define XCUDA_HOLD_MAX_BP_CAP %du", HoldMaxBPCap),
		fmt.Sprintf("#define XCUDA_SIGNAL_REFRESH_NS %dull", SignalRefresh.Nanoseconds()),
		fmt.Sprintf("#define XCUDA_DEFAULT_QUEUE_NS %dull", DefaultQueue.Nanoseconds()),
		fmt.Sprintf("#define XCUDA_QUEUE_MAX_NS %dull", QueueMax.Nanoseconds()),
		fmt.Sprintf("#define XCUDA_AHEAD_DEFAULT %du", AheadDefault),
		fmt.Sprintf("#define XCUDA_AHEAD_ON %du", AheadOn),
		fmt.Sprintf("#define XCUDA_AHEAD_OFF %du", AheadOff),
		fmt.Sprintf("#define XCUDA_DEFAULT_LINGER_NS %dull", DefaultLinger.Nanoseconds()),
		fmt.Sprintf("#define XCUDA_LINGER_MAX_NS %dull", LingerMax.Nanoseconds()),
		fmt.Sprintf("#define XCUDA_CONFINE_NONE %du", ConfineNone),
		fmt.Sprintf("#define XCUDA_CONFINE_ON %du", ConfineOn),
		fmt.Sprintf("#define XCUDA_CONFINE_NO_DRIVER %du", ConfineNoDriver),
		fmt.Sprintf("#define XCUDA_CONFINE_MPS_PCT %du", ConfineMPSPct),
		fmt.Sprintf("#define XCUDA_CONFINE_FAILED %du", ConfineFailed),
		fmt.Sprintf("#define XCUDA_CONFINE_STATE_MAX %du", ConfineFailed),
	} {
		if !strings.Contains(string(hdr), want) {
			t.Errorf("xcuda_ctl.h lacks %q", want)
		}
	}
}
