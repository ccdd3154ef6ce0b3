package profile

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func ptr(v float64) *float64 { return &v }

func sampleColocations() []Colocation {
	return []Colocation{
		{
			A:         Profile{Name: "ResNet18/bs32", Model: "ResNet18", GPUUtil: 58.7, MemBWUtil: 25, MemoryMiB: 2360, BatchSize: 32, Speed: 1763.9},
			B:         Profile{Name: "BERT/bs32", Model: "BERT", GPUUtil: 99.7, MemBWUtil: 62.5, MemoryMiB: 20162, SMActivity: ptr(71.5), AMP: true, BatchSize: 32},
			ANormTput: 0.61, BNormTput: 0.83, GPUType: "V100",
		},
		{
			A:         Profile{GPUUtil: 10, MemBWUtil: 2, MemoryMiB: 2050},
			B:         Profile{GPUUtil: 12.8, MemBWUtil: 0, MemoryMiB: 2059},
			ANormTput: 1.01, BNormTput: 0.97,
		},
	}
}

func TestCSVRoundTrip(t *testing.T) {
	in := sampleColocations()
	var buf bytes.Buffer
	if err := WriteCSV(&buf, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadCSV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, out); diff != "" {
		t.Errorf("round trip changed records (-in +out):\n%s", diff)
	}
}

func TestReadCSVRejectsBadInput(t *testing.T) {
	var good bytes.Buffer
	if err := WriteCSV(&good, sampleColocations()[:1]); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(good.String()), "\n")
	header, row := lines[0], lines[1]
	tests := []struct {
		name, text, want string
	}{
		{"empty", "", "empty co-location csv"},
		{"missing column", strings.Replace(header, ",gpu_type", "", 1) + "\n", `lacks column "gpu_type"`},
		{"unknown column", header + ",extra\n" + row + ",1\n", `unknown column "extra"`},
		{"repeated column", header + ",a_name\n" + row + ",x\n", `repeats column "a_name"`},
		{"not a number", header + "\n" + strings.Replace(row, "58.7", "lots", 1) + "\n", `line 2 column a_gpu_util: "lots" is not a number`},
		{"out of range", header + "\n" + strings.Replace(row, "58.7", "158.7", 1) + "\n", "line 2: a: invalid profile data: gpu_util 158.7"},
		{"bad amp", header + "\n" + strings.Replace(row, "71.5,1,", "71.5,yes,", 1) + "\n", "b_amp"},
		{"throughput too high", header + "\n" + strings.Replace(row, "0.61,0.83", "7,0.83", 1) + "\n", "a_norm_tput"},
		{"short row", header + "\n1,2,3\n", "wrong number of fields"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadCSV(strings.NewReader(tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ReadCSV error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func validReport() NodeReport {
	return NodeReport{
		Node: NodeInfo{Name: "node-a"},
		GPUs: []GPUReport{{
			UUID: "GPU-1", Type: "H200", MemoryTotalMiB: 143771, MemoryFreeMiB: 100000, Health: Healthy,
			Online:  &Workload{ID: "prod/web", Profile: Profile{GPUUtil: 30, MemBWUtil: 10, MemoryMiB: 20000}},
			Offline: []Workload{{ID: "batch/train", Profile: Profile{GPUUtil: 90, MemBWUtil: 60, MemoryMiB: 20000}}},
		}},
	}
}

func TestNodeReportValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*NodeReport)
		want   string // empty: valid
	}{
		{"valid", func(*NodeReport) {}, ""},
		{"no node name", func(r *NodeReport) { r.Node.Name = "" }, "without node name"},
		{"no uuid", func(r *NodeReport) { r.GPUs[0].UUID = "" }, "without uuid"},
		{"duplicate gpu", func(r *NodeReport) { r.GPUs = append(r.GPUs, r.GPUs[0]) }, "twice"},
		{"free above total", func(r *NodeReport) { r.GPUs[0].MemoryFreeMiB = 1e9 }, "memory_free_mib"},
		{"memory unknown", func(r *NodeReport) { r.GPUs[0].MemoryTotalMiB, r.GPUs[0].MemoryFreeMiB = 0, 0 }, ""},
		{"free without total", func(r *NodeReport) { r.GPUs[0].MemoryTotalMiB = 0 }, "memory_free_mib"},
		{"negative total", func(r *NodeReport) { r.GPUs[0].MemoryTotalMiB = -1 }, "memory_total_mib"},
		{"no health", func(r *NodeReport) { r.GPUs[0].Health = "" }, "health"},
		{"online without id", func(r *NodeReport) { r.GPUs[0].Online.ID = "" }, "without id"},
		{"bad offline profile", func(r *NodeReport) { r.GPUs[0].Offline[0].Profile.MemBWUtil = -1 }, "mem_bw_util"},
		{"bad colocation", func(r *NodeReport) { r.Colocations = []Colocation{{ANormTput: -1}} }, "a_norm_tput"},
		{"kernel lengths", func(r *NodeReport) { r.GPUs[0].Online.Profile.RequestUS, r.GPUs[0].Online.Profile.WidthPct = 240, 100 }, ""},
		{"negative request", func(r *NodeReport) { r.GPUs[0].Online.Profile.RequestUS = -1 }, "request_us"},
		{"negative kernel", func(r *NodeReport) { r.GPUs[0].Offline[0].Profile.KernelUS = -1 }, "kernel_us"},
		{"kernel of hours", func(r *NodeReport) { r.GPUs[0].Offline[0].Profile.KernelUS = 3.6e9 }, "kernel_us"},
		{"width above 100", func(r *NodeReport) { r.GPUs[0].Online.Profile.WidthPct = 101 }, "width_pct"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := validReport()
			tc.mutate(&r)
			err := r.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate() = %v, want ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

func TestNodeReportJSON(t *testing.T) {
	// muxd serves more than the matcher reads; unknown fields must not break decoding.
	body := `{"node":{"name":"n1","version":"x"},"gpus":[{"uuid":"GPU-9","index":3,"type":"T4",
	  "memory_total_mib":15360,"memory_free_mib":15000,"health":"Healthy",
	  "online":{"id":"a/b","profile":{"gpu_util":20,"mem_bw_util":5,"memory_mib":300,"sm_activity":12.5}}}],
	  "containers":[]}`
	var r NodeReport
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	want := NodeReport{Node: NodeInfo{Name: "n1"}, GPUs: []GPUReport{{UUID: "GPU-9", Index: 3, Type: "T4",
		MemoryTotalMiB: 15360, MemoryFreeMiB: 15000, Health: Healthy,
		Online: &Workload{ID: "a/b", Profile: Profile{GPUUtil: 20, MemBWUtil: 5, MemoryMiB: 300, SMActivity: ptr(12.5)}}}}}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("decoded report (-want +got):\n%s", diff)
	}
}
