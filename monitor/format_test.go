package monitor

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/google/go-cmp/cmp"
)

func TestWriteStatus(t *testing.T) {
	s := obs{temp: 84, clockPct: 80, reasons: nvml.ClocksEventReasonSwPowerCap}.sample(t0)
	s.Processes = []ProcessSample{{PID: 1}, {PID: 2}}
	gpus := []GPUStatus{
		{Index: 0, State: Throttled, Since: t0, Sample: s, Reason: Reason{Text: "temperature 84 °C ≥ soft limit 83 °C"}},
		{Index: 1, State: Faulted, Since: t0, Sample: &Sample{Lost: true}},
		{Index: 2, State: Healthy, Since: t0}, // not sampled yet
	}
	var b bytes.Buffer
	if err := WriteStatus(&b, gpus, t0.Add(90*time.Second)); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("got %d lines, want header + 3:\n%s", len(lines), b.String())
	}
	for _, want := range []string{"throttled", "1m30s", "70%", "1600/2000MHz(80%)", "40.0GiB/80.0GiB(50%)", "84C", "350/700W(50%)", "sw_power_cap", " 2 ", "soft limit 83"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("GPU 0 line %q lacks %q", lines[1], want)
		}
	}
	if !strings.Contains(lines[2], "faulted(lost)") {
		t.Errorf("GPU 1 line %q does not say lost", lines[2])
	}
	if f := strings.Fields(lines[3]); len(f) < 11 || f[3] != "-" || f[5] != "-" {
		t.Errorf("unsampled GPU line %q should show - for metrics", lines[3])
	}
}

func TestWriteEvents(t *testing.T) {
	f := ClassifyXid(79, t0)
	events := []Event{
		{Seq: 7, Time: t0, GPU: 1, Kind: EventFault, Reason: Reason{Text: f.Description}, Fault: &f},
		{Seq: 8, Time: t0, GPU: 1, Kind: EventTransition, From: Healthy, To: Faulted, Reason: Reason{Text: f.Description}},
		{Seq: 9, Time: t0, GPU: 1, Kind: EventClear, Reason: Reason{Text: "error handler reports the GPU was reset"}},
		{Seq: 10, Time: t0, GPU: 1, Kind: EventContainer, Container: "job-7", Reason: Reason{Text: "offline container's usage block is corrupt (magic 0x0): it is evicted"}},
	}
	var b bytes.Buffer
	if err := WriteEvents(&b, events); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"#7 2026-11-29T09:00:00Z gpu 1 reset fault: Xid 79: GPU has fallen off the bus",
		"#8 2026-11-29T09:00:00Z gpu 1 healthy -> faulted: Xid 79: GPU has fallen off the bus",
		"#9 2026-11-29T09:00:00Z gpu 1 clear: error handler reports the GPU was reset",
		"#10 2026-11-29T09:00:00Z gpu 1 container job-7: offline container's usage block is corrupt (magic 0x0): it is evicted",
	}
	if diff := cmp.Diff(want, strings.Split(strings.TrimSpace(b.String()), "\n")); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0B", 512: "512B", 1023: "1023B", 1 << 10: "1.00KiB", 64 << 10: "64.0KiB", 512 << 20: "512MiB",
		16<<30 + 64<<10: "16.0GiB", 81559 << 20: "79.6GiB", 143771 << 20: "140GiB", 15360 << 20: "15.0GiB",
	} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
