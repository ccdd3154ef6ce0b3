package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// mockNode returns a 2-GPU H100 mock reporting fixed telemetry; tweak
// changes each device before use.
func mockNode(util uint32, tweak func(*server.Device)) *server.Server {
	srv := dgxh100.NewWithGPUs(gpus.Multiple(2, gpus.H100_SXM5_80GB)...)
	for _, d := range srv.Devices {
		d := d.(*server.Device)
		d.MemoryInfo.Used = 4 << 30
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: util, Memory: 5}, nvml.SUCCESS }
		d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 48, nvml.SUCCESS }
		d.GetClockInfoFunc = func(nvml.ClockType) (uint32, nvml.Return) { return 1755, nvml.SUCCESS }
		d.GetMaxClockInfoFunc = func(nvml.ClockType) (uint32, nvml.Return) { return 1980, nvml.SUCCESS }
		d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return 0, nvml.SUCCESS }
		d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 120_000, nvml.SUCCESS }
		d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 700_000, nvml.SUCCESS }
		d.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) { return nvml.GpmSupport{}, nvml.SUCCESS }
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
		d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return nvml.EventTypeXidCriticalError, nvml.SUCCESS }
		d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
		d.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) { return nil, nvml.ERROR_NOT_FOUND }
		if tweak != nil {
			tweak(d)
		}
	}
	srv.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) {
		return &mock.GpmSample{FreeFunc: func() nvml.Return { return nvml.SUCCESS }}, nvml.SUCCESS
	}
	srv.GpmMetricsGetFunc = func(q *nvml.GpmMetricsGetType) nvml.Return {
		q.Metrics[0].Value = 1 // a GPM that reads near zero
		return nvml.SUCCESS
	}
	srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
				time.Sleep(time.Duration(ms) * time.Millisecond)
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	return srv
}

func useLib(t *testing.T, lib nvml.Interface) {
	t.Helper()
	old := newLib
	newLib = func(string) nvml.Interface { return lib }
	t.Cleanup(func() { newLib = old })
}

var short = []string{"-duration", "300ms", "-period", "20ms", "-print-every", "100ms"}

func TestRunPasses(t *testing.T) {
	useLib(t, mockNode(70, nil))
	path := filepath.Join(t.TempDir(), "probe.json")
	var out, errOut bytes.Buffer
	if err := run(context.Background(), append(short, "-json", path, "-require-busy"), &out, &errOut); err != nil {
		t.Fatalf("run = %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
	for _, want := range []string{"driver 550.54.15", "CUDA 12.4", "GPU  STATE", "healthy", "=== final state", "poll cost", "NVML calls: ", "calls/GPU/poll", "GetMemoryInfo", "VERDICT: PASS"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		GPUs  []map[string]any `json:"gpus"`
		Stats []struct {
			Samples int                              `json:"samples"`
			Metrics map[string]struct{ Max float64 } `json:"metrics"`
		} `json:"stats"`
		Problems []string `json:"problems"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("probe JSON: %v", err)
	}
	if len(res.GPUs) != 2 || len(res.Stats) != 2 || res.Stats[0].Samples == 0 || res.Stats[0].Metrics["utilization_percent"].Max != 70 || len(res.Problems) != 0 {
		t.Errorf("probe JSON = %s", b)
	}
}

func TestRunFails(t *testing.T) {
	brokenTemp := func(d *server.Device) {
		d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	}
	lowGPM := func(d *server.Device) {
		d.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) { return nvml.GpmSupport{IsSupportedDevice: 1}, nvml.SUCCESS }
		d.GpmSampleGetFunc = func(nvml.GpmSample) nvml.Return { return nvml.SUCCESS }
	}
	noEvents := mockNode(70, nil)
	noEvents.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	noDriver := mockNode(0, nil)
	noDriver.InitFunc = func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }
	tests := []struct {
		name string
		lib  nvml.Interface
		args []string
		want string
	}{
		{"unknown flag", mockNode(70, nil), []string{"-bogus"}, "flag provided but not defined"},
		{"stray argument", mockNode(70, nil), []string{"now"}, "unexpected arguments"},
		{"zero duration", mockNode(70, nil), []string{"-duration", "0s"}, "must be positive"},
		{"bad period", mockNode(70, nil), append(short, "-period", "1ms"), "period 1ms is below the minimum"},
		{"no driver", noDriver, short, "initialising NVML"},
		{"idle GPUs with a load expected", mockNode(10, nil), append(short, "-require-busy"), "no GPU reached 50% utilisation"},
		{"a metric that always fails", mockNode(70, brokenTemp), short, "temperature failed in"},
		{"busy GPU with idle SM activity", mockNode(90, lowGPM), short, "SM activity stayed at or under 1.0% while utilisation reached 90%"},
		{"no error events", noEvents, short, "NVML error events could not be registered"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			useLib(t, tc.lib)
			var out, errOut bytes.Buffer
			err := run(context.Background(), tc.args, &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run = %v, want an error containing %q\nstdout:\n%s", err, tc.want, out.String())
			}
		})
	}
}
