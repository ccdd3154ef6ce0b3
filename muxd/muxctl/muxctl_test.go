package muxctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/client"
	"github.com/muxflow/muxflow/policy"
	"github.com/muxflow/muxflow/tests/testenv"
)

func TestPolicyCheckExitCodes(t *testing.T) {
	bin := testenv.Artifact(t, "bin/muxctl")
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(good, []byte(policy.DefaultTOML), 0o644)
	os.WriteFile(bad, []byte("[monitor]\nperiod = \"soon\"\n"), 0o644)

	out, err := exec.Command(bin, "policy", "check", good).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "valid") {
		t.Errorf("good file: %v %s", err, out)
	}
	out, err = exec.Command(bin, "policy", "check", bad).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "line 2") || !strings.Contains(string(out), "monitor.period") {
		t.Errorf("bad file: %v %s", err, out)
	}
	out, err = exec.Command(bin, "frobnicate").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), `unknown command "frobnicate"`) {
		t.Errorf("bad command: %v %s", err, out)
	}
	out, err = exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "muxctl ") {
		t.Errorf("version: %v %s", err, out)
	}
}

func TestStatusAgainstRealMuxd(t *testing.T) {
	muxd := testenv.Artifact(t, "bin/muxd")
	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "muxd.sock")
	pol := filepath.Join(dir, "policy.toml")
	os.WriteFile(pol, []byte(fmt.Sprintf("[node]\nstate_dir = %q\nrun_dir = %q\nsocket = %q\n[mps]\nenabled = false\n",
		filepath.Join(dir, "state"), filepath.Join(dir, "run"), sock)), 0o644)
	cmd := exec.Command(muxd, "--policy", pol)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	c := client.New(sock, time.Second)
	ctx := context.Background()
	for i := 0; ; i++ {
		if _, err := c.Node(ctx); err == nil {
			break
		} else if i > 200 {
			t.Fatalf("muxd not ready: %v", err)
		}
		time.Sleep(25 * time.Millisecond)
	}
	if _, err := c.Register(ctx, api.RegisterRequest{ID: "svc-a", Class: api.Online, GPUs: []string{"0"}, Limits: api.Limits{GPUMemory: 4 << 30}}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Main(ctx, []string{"--socket", sock, "status"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CONTAINER", "svc-a", "online", "created", "4GiB"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := Main(ctx, []string{"--socket", sock, "status", "-o", "json"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	var st Status
	if err := json.Unmarshal(out.Bytes(), &st); err != nil || len(st.Containers) != 1 || st.Node.Containers != 1 {
		t.Errorf("json status: %v %s", err, out.String())
	}
	// Without --socket, muxctl finds the socket in the policy named with --policy.
	out.Reset()
	if err := Main(ctx, []string{"--policy", pol, "status"}, &out, &out); err != nil || !strings.Contains(out.String(), "svc-a") {
		t.Errorf("status --policy %s: %v\n%s", pol, err, out.String())
	}
	// --socket overrides the policy; a --policy that cannot be read is an error.
	if err := Main(ctx, []string{"--policy", pol, "--socket", filepath.Join(dir, "nope.sock"), "status"}, &out, &out); err == nil {
		t.Error("--socket did not override the policy's socket")
	}
	if err := Main(ctx, []string{"--policy", filepath.Join(dir, "missing.toml"), "status"}, &out, &out); err == nil || !strings.Contains(err.Error(), "missing.toml") {
		t.Errorf("a missing --policy file: %v", err)
	}
	err := Main(ctx, []string{"--socket", filepath.Join(dir, "nope.sock"), "status"}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "not reachable") {
		t.Errorf("muxd down: %v", err)
	}
}

func TestRuntimeConfigureDryRun(t *testing.T) {
	bin := testenv.Artifact(t, "bin/muxctl")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "daemon.json")
	os.WriteFile(cfg, []byte(`{"log-level": "warn"}`), 0o644)
	out, err := exec.Command(bin, "runtime", "configure", "--runtime=docker", "--config", cfg, "--dry-run").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"muxflow"`) || !strings.Contains(string(out), `"log-level"`) {
		t.Errorf("dry run: %v\n%s", err, out)
	}
	if data, _ := os.ReadFile(cfg); string(data) != `{"log-level": "warn"}` {
		t.Errorf("--dry-run wrote the file: %s", data)
	}
	out, err = exec.Command(bin, "runtime", "frob").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Errorf("bad runtime subcommand: %v %s", err, out)
	}
}

func TestStatusShowsCeilings(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	off := func(id string, sm int, ce api.Ceiling) api.Container {
		return api.Container{RegisterRequest: api.RegisterRequest{ID: id, Class: api.Offline, GPUs: []string{"0"}, Limits: api.Limits{SMPercent: sm}},
			State: api.StateRunning, PID: 42, Registered: now.Add(-time.Minute), Ceiling: &ce}
	}
	st := Status{
		Node: api.NodeInfo{Hostname: "n1", Started: now.Add(-time.Hour)},
		GPUs: []api.GPU{{Index: 0, UUID: "GPU-a", Name: "H100", Health: "healthy", OfflineCeiling: 60, OfflineShare: 60,
			OfflineContainers: 2, OnlineDemand: 30, DemandSource: "per-process utilisation of 1 online process(es)",
			CeilingReason:  "70% → 60%: online demand 30% (per-process utilisation of 1 online process(es)) + headroom 10%",
			CeilingChanged: now.Add(-2 * time.Second)}},
		Containers: []api.Container{
			off("small", 20, api.Ceiling{Percent: 20, Own: 20, Part: 40, MPSThreadPercent: 20, BoundBy: "own sm-percent"}),
			off("big", 0, api.Ceiling{Percent: 40, Own: 70, Part: 40, MPSThreadPercent: 50, BoundBy: "GPU budget"}),
			off("next", 0, api.Ceiling{Percent: 10, Own: 70, Part: 40, MPSThreadPercent: 50, BoundBy: "waiting for its turn"}),
		},
	}
	var out bytes.Buffer
	if err := writeStatus(&out, st, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"OFFLINE CEILING", "60% split by 2", "ONLINE DEMAND", "30%",
		"ceiling 70% → 60%: online demand 30%", "(2s ago)", "CEILING", "MPS%",
		"20% (own sm-percent)", "40% (GPU budget)", "50%", "waits its turn"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	data, _ := json.Marshal(st)
	for _, want := range []string{`"offline_ceiling":60`, `"online_demand":30`, `"ceiling_reason":"70% → 60%`, `"demand_source"`,
		`"ceiling":{"percent":20,"own":20,"part":40,"mps_thread_percent":20,"bound_by":"own sm-percent"}`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("JSON lacks %s: %s", want, data)
		}
	}
}

func TestStatusHealthReasonFades(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	st := Status{Node: api.NodeInfo{Hostname: "n1", Started: now.Add(-time.Hour)}, GPUs: []api.GPU{
		{Index: 0, UUID: "GPU-a", Health: "healthy", HealthReason: "monitor started", HealthSince: now.Add(-10 * time.Minute)},
		{Index: 1, UUID: "GPU-b", Health: "healthy", HealthReason: "recovered after 30s", HealthSince: now.Add(-5 * time.Second)},
		{Index: 2, UUID: "GPU-c", Health: "throttled", HealthReason: "temperature 85C", HealthSince: now.Add(-10 * time.Minute)},
	}}
	var out bytes.Buffer
	if err := writeStatus(&out, st, now); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "monitor started") {
		t.Errorf("a healthy GPU still shows why it became healthy ten minutes ago:\n%s", out.String())
	}
	for _, want := range []string{"health: recovered after 30s (5s ago)", "health: temperature 85C (10m0s ago)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
}

// The OFFLINE MPS column says how the budget relates to the online kernels and, where it
// fits but offline stays bounded, why.
func TestOfflineCeilingColumn(t *testing.T) {
	for _, tc := range []struct {
		g    api.GPU
		want string
	}{
		{api.GPU{OfflineCeiling: 60, OfflineContainers: 1, OfflineMPSFits: true, OfflineMPSFitted: 1}, "60%"},
		{api.GPU{OfflineCeiling: 60, OfflineContainers: 2}, "60% split by 2"},
		{api.GPU{OfflineCeiling: 60, OfflineContainers: 2, OfflineMPSFits: true, OfflineMPSFitted: 2}, "60% each (fit)"},
		{api.GPU{OfflineCeiling: 60, OfflineContainers: 3, OfflineMPSFits: true, OfflineMPSFitted: 1}, "60% (1 fits, 2 split it)"},
		{api.GPU{OfflineCeiling: 60, OfflineContainers: 4, OfflineMPSFits: true, OfflineMPSFitted: 2}, "60% (2 fit, 2 split it)"},
		// a count from a budget that no longer fits says nothing
		{api.GPU{OfflineCeiling: 60, OfflineContainers: 2, OfflineMPSFitted: 2}, "60% split by 2"},
	} {
		if got := offlineCeiling(tc.g); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.g, got, tc.want)
		}
	}
}

func TestOfflineMPSColumn(t *testing.T) {
	for _, tc := range []struct {
		g    api.GPU
		want string
	}{
		{api.GPU{OfflineMPS: 70}, "70%"},
		{api.GPU{OfflineMPS: 50, OnlineWidth: 50, OfflineMPSFits: true}, "50% (fits online 50%)"},
		{api.GPU{OfflineMPS: 100, OnlineWidth: 100}, "100% (online 100% too wide: the whole GPU, bounded in time)"},
		{api.GPU{OfflineMPS: 70, OnlineWidth: 100}, "70% (online 100% too wide)"}, // alloc.fit off
		{api.GPU{OfflineMPS: 50, OnlineWidth: 50, OfflineMPSPowerCapped: true}, "50% (fits online 50%; power-capped: offline bounded)"},
		{api.GPU{OfflineMPS: 50, OnlineWidth: 50, OfflineMPSMemBound: true, OnlineMemBW: 50, OfflineMemBW: 62}, "50% (fits online 50%; memory bandwidth online 50% + offline 62%: bounded)"},
		{api.GPU{OfflineMPS: 50, OnlineWidth: 50, OfflineMPSPowerCapped: true, OfflineMPSWaiting: 3}, "50% (fits online 50%; power-capped: offline bounded, in turns: 3 wait)"},
		{api.GPU{OfflineMPS: 50, OnlineWidth: 50, OfflineMPSMemBound: true, OnlineMemBW: 50, OfflineMemBW: 62, OfflineMPSWaiting: 1}, "50% (fits online 50%; memory bandwidth online 50% + offline 62%: bounded, in turns: 1 wait)"},
		{api.GPU{OfflineMPS: 50, OnlineWidth: 50, OfflineMPSFits: true, OfflineMPSHeld: 75, OfflineMPSFitted: 1, OfflineContainers: 2}, "50% (fits online 50%; offline holds 75%: in turns, 1 of 2 fit, 1 bounded)"},
		{api.GPU{OfflineMPS: 50, OnlineWidth: 50, OfflineMPSFits: true, OfflineMPSHeld: 200, OfflineMPSFitted: 1, OfflineMPSWaiting: 2, OfflineContainers: 4}, "50% (fits online 50%; offline holds 200%: in turns, 1 of 4 fit, 2 wait, 1 bounded)"},
	} {
		if got := offlineMPS(tc.g); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.g, got, tc.want)
		}
	}
}

func TestMeasuredSizesRead(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	st := Status{
		Node: api.NodeInfo{Hostname: "n1", Started: now.Add(-time.Hour)},
		GPUs: []api.GPU{{Index: 0, UUID: "GPU-a", Name: "H100", Health: "healthy", MemoryTotal: 81559 << 20, MemoryUsed: 16<<30 + 64<<10}},
		Containers: []api.Container{{RegisterRequest: api.RegisterRequest{ID: "train", Class: api.Offline, GPUs: []string{"0"},
			Limits: api.Limits{GPUMemory: 16<<30 + 64<<10}}, State: api.StateRunning, Usage: &api.Usage{ReservedBytes: 16 << 30}}},
	}
	var out bytes.Buffer
	if err := writeStatus(&out, st, now); err != nil {
		t.Fatal(err)
	}
	// What the GPU and libxcuda measured reads rounded; the cap the operator set stays exact.
	for _, want := range []string{"79.6GiB", "16.0GiB", "16777280KiB"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Count(out.String(), "16777280KiB") != 1 {
		t.Errorf("a measured size is written exactly:\n%s", out.String())
	}
}

func TestStatusShowsKernelRisks(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	st := Status{Node: api.NodeInfo{Hostname: "n1", Started: now.Add(-time.Hour)}, GPUs: []api.GPU{
		{Index: 0, UUID: "GPU-a", Health: "healthy", KernelRisks: []api.KernelRisk{
			{ID: "train", OfflineKernel: 3 * time.Millisecond, OfflinePerLaunch: time.Millisecond, OnlineRequest: 240 * time.Microsecond, Ratio: 12.5}}},
		{Index: 1, UUID: "GPU-b", Health: "healthy", KernelRisks: []api.KernelRisk{
			{ID: "etl", OfflineKernel: 4 * time.Millisecond, OfflinePerLaunch: 4 * time.Millisecond, OnlineRequest: 800 * time.Microsecond, Ratio: 5, MemoryBus: true}}},
		{Index: 2, UUID: "GPU-c", Health: "healthy", KernelRisks: []api.KernelRisk{
			{ID: "sim", OfflineKernel: 3 * time.Millisecond, OfflinePerLaunch: time.Millisecond, OnlineRequest: 240 * time.Microsecond, Ratio: 12.5, ConfinePercent: 50}}},
	}, Containers: []api.Container{
		{RegisterRequest: api.RegisterRequest{ID: "sim", Class: api.Offline, GPUs: []string{"2"}}, State: api.StateRunning, Registered: now,
			Ceiling: &api.Ceiling{Percent: 90, BoundBy: "GPU budget", MPSThreadPercent: 100, ConfinePercent: 50},
			Usage:   &api.Usage{SharePercent: 90, Confine: "confined", ConfinedSMs: 72}},
		{RegisterRequest: api.RegisterRequest{ID: "old", Class: api.Offline, GPUs: []string{"2"}}, State: api.StateRunning, Registered: now,
			Ceiling: &api.Ceiling{Percent: 90, BoundBy: "GPU budget", MPSThreadPercent: 100, ConfinePercent: 50},
			Usage:   &api.Usage{SharePercent: 90, Confine: "driver has no green contexts"}},
	}}
	var out bytes.Buffer
	if err := writeStatus(&out, st, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"GPU 0 online at risk: offline train: a request that meets one of its kernels waits for up to 3ms, 12× an online request (240µs), and its blocks may hold SMs the online kernels need",
		"GPU 1 online at risk: offline etl: a request that meets one of its kernels waits for up to 4ms, 5× an online request (800µs), and the two together ask for more memory bandwidth than the GPU has",
		"muxflow.io/sm-percent",
		"GPU 2 online at risk: offline sim: a request that meets one of its kernels waits for up to 3ms, 12× an online request (240µs), and its blocks may hold SMs the online kernels need: whatever the offline share; muxd confines its kernels to 50% of the SMs while it is named",
		"100%, confined to 72 SMs (50%)",
		"100%, confine 50%: driver has no green contexts",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	data, _ := json.Marshal(st)
	if want := `"kernel_risks":[{"id":"train","offline_kernel_ns":3000000,"offline_per_launch_ns":1000000,"online_request_ns":240000,"ratio":12.5}]`; !strings.Contains(string(data), want) {
		t.Errorf("JSON lacks %s: %s", want, data)
	}
}
