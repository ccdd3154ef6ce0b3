package sim

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func wireSample() []DeviceStats {
	return []DeviceStats{
		{Index: 0, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-0", SMs: 132, MemTotal: 80 << 30, MemUsed: 1 << 30,
			Util: 41.5, MemUtil: 12.25, SMActivity: 0.3, SMActivityNow: 0.9, SMClockMHz: 1980, MaxSMClockMHz: 1980,
			MemClockMHz: 2619, PowerW: 412.5, PowerLimitW: 700, DefaultPowerW: 700, EnergyJ: 1e6, TempC: -3, Stalls: 3, StalledNs: 9e6, MaxStallNs: 4.5e6,
			ClockReasons: ReasonSwPowerCap | ReasonHwSlowdown, BusyNs: 1.5e9, SMNs: 2e11, MemNs: math.NaN(), Hung: true,
			TimestampUnixUs: 1_780_000_000_000_000,
			Processes: []ProcessStats{
				{PID: 42, MemUsed: 1 << 20, BusyNs: 3, SMNs: 4, MemNs: 5, Launches: 1 << 40, Util: 6, MemUtil: 7, SMActivity: 0.5, MPS: true},
				{PID: 43},
			}},
		{Index: 1, Name: "", UUID: "GPU-1", Lost: true},
		{Index: 2, UUID: "GPU-2", Processes: []ProcessStats{{PID: 7, Util: 100}}},
	}
}

func TestStatsWireRoundTrip(t *testing.T) {
	want := wireSample()
	got, err := DecodeStats(AppendStats(nil, want))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b float64) bool {
		return a == b || math.IsNaN(a) && math.IsNaN(b)
	})); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	// Each device's process list is its own: appending to one does not write another's.
	got[0].Processes = append(got[0].Processes, ProcessStats{PID: 99})
	if got[2].Processes[0].PID != 7 {
		t.Errorf("device 2's process was overwritten: %+v", got[2].Processes)
	}
	if devs, err := DecodeStats(AppendStats(nil, nil)); err != nil || len(devs) != 0 {
		t.Errorf("no devices: %v %v", devs, err)
	}
}

// The packed form names every field of DeviceStats and ProcessStats: a field added to
// either must be added to AppendStats and DecodeStats too (and this count).
func TestStatsWireCoversEveryField(t *testing.T) {
	if n := reflect.TypeFor[DeviceStats]().NumField(); n != 29 {
		t.Errorf("DeviceStats has %d fields, the packed form 29: add the new ones to statswire.go", n)
	}
	if n := reflect.TypeFor[ProcessStats]().NumField(); n != 10 {
		t.Errorf("ProcessStats has %d fields, the packed form 10: add the new ones to statswire.go", n)
	}
}

func TestStatsWireRejectsDamage(t *testing.T) {
	b := AppendStats(nil, wireSample())
	for n := range len(b) {
		if _, err := DecodeStats(b[:n]); err == nil {
			t.Fatalf("cut to %d of %d bytes: no error", n, len(b))
		}
	}
	if _, err := DecodeStats(append(b[:len(b):len(b)], 0)); err == nil || !strings.Contains(err.Error(), "past the last device") {
		t.Errorf("trailing byte: %v", err)
	}
	bad := append([]byte{}, b...)
	bad[0] = 9
	if _, err := DecodeStats(bad); err == nil || !strings.Contains(err.Error(), "version 9") {
		t.Errorf("unknown version: %v", err)
	}
	// A device count far past what the bytes hold fails before allocating for it.
	huge := []byte{statsWireVersion, 0xff, 0xff}
	if _, err := DecodeStats(huge); err == nil {
		t.Error("65535 devices in 3 bytes: no error")
	}
}

// BenchmarkStatsWireDecode compares decoding a packed reading of 8 devices with the
// JSON one it replaces (the baseline).
func BenchmarkStatsWireDecode(b *testing.B) {
	devs := make([]DeviceStats, 8)
	for i := range devs {
		devs[i] = wireSample()[0]
		devs[i].MemNs = 1
	}
	b.Run("packed", func(b *testing.B) {
		buf := AppendStats(nil, devs)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeStats(buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		buf, err := json.Marshal(devs)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			var out []DeviceStats
			if err := json.Unmarshal(buf, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
