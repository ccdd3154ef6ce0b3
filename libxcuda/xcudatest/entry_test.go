package xcudatest

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/muxflow/muxflow/libxcuda/ctlblock"
)

// TestEntryPoints checks that each way into the driver is intercepted
// (an allocation over the cap fails with CUDA_ERROR_OUT_OF_MEMORY = 2),
// that unhooked functions still work, and that cuGetExportTable is never
// wrapped.
func TestEntryPoints(t *testing.T) {
	const capBytes = 1 << 20
	tests := []struct {
		name    string
		prog    string
		way     string
		preload bool
		want    map[string]string
	}{
		{
			name: "exported symbols", prog: "xctest-linked", way: "link", preload: true,
			want: map[string]string{"init": "0", "alloc_over_cap": "2", "alloc_small": "0", "mem_total": "1048576", "mem_free": "1044480", "name": "stub GPU", "version": "12060", "free_small": "0", "free_unknown": "0"},
		},
		{
			name: "dlsym", prog: "xctest", way: "dlsym", preload: true,
			want: map[string]string{"alloc_owner": "libxcuda", "launch_owner": "libxcuda", "launch_ptsz_owner": "libxcuda", "name_owner": "driver", "export_table_owner": "driver", "init": "0", "alloc_over_cap": "2", "alloc_small": "0", "mem_total": "1048576", "name": "stub GPU", "version": "12060"},
		},
		{
			name: "cuGetProcAddress", prog: "xctest", way: "gpa", preload: true,
			want: map[string]string{"gpa_owner": "libxcuda", "alloc_owner": "libxcuda", "launch_owner": "libxcuda", "launch_ptsz_owner": "libxcuda", "name_owner": "driver", "export_table_owner": "driver", "init": "0", "alloc_over_cap": "2", "alloc_small": "0", "mem_total": "1048576", "name": "stub GPU", "version": "12060"},
		},
		{
			name: "dlsym@GLIBC_2.2.5", prog: "xctest", way: "dlsym-old", preload: true,
			want: map[string]string{"alloc_owner": "libxcuda", "launch_owner": "libxcuda", "name_owner": "driver", "export_table_owner": "driver", "init": "0", "alloc_over_cap": "2", "alloc_small": "0", "name": "stub GPU"},
		},
		{
			name: "cuGetProcAddress v1 (CUDA 11 runtime)", prog: "xctest", way: "gpa1", preload: true,
			want: map[string]string{"gpa_owner": "libxcuda", "alloc_owner": "libxcuda", "launch_owner": "libxcuda", "launch_ptsz_owner": "libxcuda", "name_owner": "driver", "export_table_owner": "driver", "init": "0", "alloc_over_cap": "2", "alloc_small": "0", "name": "stub GPU", "version": "12060"},
		},
		{
			// Without libxcuda the same over-cap allocation succeeds: the
			// cases above prove interception, not a stub limitation.
			name: "no libxcuda", prog: "xctest", way: "dlsym", preload: false,
			want: map[string]string{"alloc_owner": "driver", "launch_owner": "driver", "init": "0", "alloc_over_cap": "0", "mem_total": "1073741824"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, ctlblock.Limits{ShareBP: ctlblock.ShareFull, MemoryBytes: []uint64{capBytes}})
			h.preload = tt.preload
			out, err := h.command(tt.prog, "entry", tt.way, "1048576").CombinedOutput()
			if err != nil {
				t.Fatalf("xctest: %v\n%s", err, out)
			}
			kv := keyValues(string(out))
			got := map[string]string{}
			for k := range tt.want {
				got[k] = kv[k]
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("results (-want +got):\n%s\nfull output:\n%s", diff, out)
			}
			if tt.preload {
				if u := h.block.Usage(); len(u.ReservedBytes) != 0 || u.OOMDenials != 1 {
					t.Errorf("after exit: reserved %v, OOM denials %d; want none reserved, 1 denial", u.ReservedBytes, u.OOMDenials)
				}
			}
		})
	}
}
