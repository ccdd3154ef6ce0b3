package xcudatest

import (
	"bufio"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/muxflow/muxflow/libxcuda/ctlblock"
)

// TestFork: a forked child has its own slot; freeing the parent's pointer
// in the child goes to the driver without touching the parent's
// reservation; when the child exits its own reservation is returned.
func TestFork(t *testing.T) {
	h := newHarness(t, ctlblock.Limits{ShareBP: ctlblock.ShareFull, MemoryBytes: []uint64{4 << 20}})
	cmd := h.command("xctest", "fork", "dlsym")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(out)
	var seen strings.Builder
	for !strings.Contains(seen.String(), "child_free_parent_ptr=") {
		line, err := r.ReadString('\n')
		seen.WriteString(line)
		if err != nil {
			t.Fatalf("xctest fork: %v\n%s", err, seen.String())
		}
	}
	u := h.block.Usage()
	if len(u.Procs) != 2 || len(u.ReservedBytes) != 1 || u.ReservedBytes[0] != 2<<20 {
		t.Errorf("with parent and child alive: procs %+v reserved %v; want 2 procs, 2 MiB", u.Procs, u.ReservedBytes)
	}
	in.Close()
	rest, _ := io.ReadAll(r)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("xctest fork: %v", err)
	}
	kv := keyValues(seen.String() + string(rest))
	want := map[string]string{"parent_alloc": "0", "child_alloc": "0", "child_free_parent_ptr": "0", "child_status": "0", "parent_free": "0"}
	got := map[string]string{}
	for k := range want {
		got[k] = kv[k]
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fork results (-want +got):\n%s", diff)
	}
	if u := h.block.Usage(); len(u.ReservedBytes) != 0 || len(u.Procs) != 0 {
		t.Errorf("after both exited: reserved %v procs %+v, want none", u.ReservedBytes, u.Procs)
	}
}

// TestNoControlBlock: without a block libxcuda passes through, unless the
// environment asks it to fail closed.
func TestNoControlBlock(t *testing.T) {
	tests := []struct {
		name   string
		policy string
		want   map[string]string
	}{
		{"pass through", "", map[string]string{"init": "0", "alloc_over_cap": "0", "mem_total": "1073741824"}},
		{"fail closed", "closed", map[string]string{"init": "800"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, ctlblock.Unlimited())
			cmd := h.command("xctest", "entry", "dlsym", "1048576")
			cmd.Env = append(cmd.Env, ctlblock.EnvDir+"="+t.TempDir()) // an empty directory: no block
			if tt.policy != "" {
				cmd.Env = append(cmd.Env, "XCUDA_FAIL_POLICY="+tt.policy)
			}
			out, _ := cmd.CombinedOutput()
			kv := keyValues(string(out))
			got := map[string]string{}
			for k := range tt.want {
				got[k] = kv[k]
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s\n%s", diff, out)
			}
		})
	}
}

// TestApplicationSignalHandler: a SIGTERM handler the application installs
// after cuInit is what runs (after the drain), and the process goes on.
func TestApplicationSignalHandler(t *testing.T) {
	h := newHarness(t, ctlblock.Limits{ShareBP: 5000})
	cmd := h.command("xctest", "sigapp", "dlsym")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(out)
	var seen strings.Builder
	for !strings.Contains(seen.String(), "ready") {
		line, err := r.ReadString('\n')
		seen.WriteString(line)
		if err != nil {
			t.Fatalf("xctest sigapp: %v\n%s", err, seen.String())
		}
	}
	time.Sleep(200 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGTERM)
	rest, _ := io.ReadAll(r)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("xctest sigapp died: %v\n%s%s", err, seen.String(), rest)
	}
	kv := keyValues(seen.String() + string(rest))
	want := map[string]string{"handler_seen": "1", "got_term": "1", "launch_after": "0"}
	got := map[string]string{}
	for k := range want {
		got[k] = kv[k]
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestShareChangesLive: muxd cuts the share of a running process from
// 100% to 30% and back; each phase's 1 s windows follow.
func TestShareChangesLive(t *testing.T) {
	h := newHarness(t, ctlblock.Unlimited())
	ch, wait := runLoop(t, h, 1000, 3.4, "kernel")
	var ps []progress
	phase := func(until float64) []progress {
		var got []progress
		for p := range ch {
			got = append(got, p)
			if p.at >= until {
				break
			}
		}
		return got
	}
	phase(0.2)
	first := phase(1.2)
	cut := ctlblock.Unlimited()
	cut.ShareBP = 3000
	if err := h.block.SetLimits(cut); err != nil {
		t.Fatal(err)
	}
	phase(1.4) // let the cut take effect
	second := phase(2.4)
	if err := h.block.SetLimits(ctlblock.Unlimited()); err != nil {
		t.Fatal(err)
	}
	phase(2.5)
	third := phase(3.4)
	for range ch {
	}
	wait()
	_ = ps
	for _, c := range []struct {
		name     string
		ps       []progress
		min, max float64
	}{
		// The stub counts work when queued, up to 50 ms ahead: short
		// unthrottled windows can read a little above 1.
		{"before the cut", first, 0.9, 1.1},
		{"after the cut", second, 0.25, 0.35},
		{"after restoring", third, 0.9, 1.1},
	} {
		ws := shareWindows(c.ps)
		if len(ws) == 0 {
			// The phase may be a little under 1 s of lines; use its span.
			if len(c.ps) < 2 {
				t.Fatalf("%s: no progress lines", c.name)
			}
			a, b := c.ps[0], c.ps[len(c.ps)-1]
			ws = []float64{float64(b.busyNS-a.busyNS) / ((b.at - a.at) * 1e9)}
		}
		t.Logf("%s: %.3f", c.name, ws)
		for _, w := range ws {
			if w < c.min || w > c.max {
				t.Errorf("%s: GPU share %.3f, want %.2f..%.2f", c.name, w, c.min, c.max)
			}
		}
	}
}

// TestMPSEnvironment: the MPS client limits from the block are in the
// environment before the driver starts; a tighter percentage the process
// already had is kept.
func TestMPSEnvironment(t *testing.T) {
	tests := []struct {
		name    string
		have    string
		wantATP string
	}{
		{"from the block", "", "40"},
		{"tighter already set", "25", "25"},
		{"looser already set", "90", "40"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, ctlblock.Limits{ShareBP: ctlblock.ShareFull, MPSActiveThreadPercent: 40, MPSPinnedMemBytes: []uint64{2 << 30, 0, 512 << 20}})
			cmd := h.command("xctest", "env", "dlsym")
			if tt.have != "" {
				cmd.Env = append(cmd.Env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="+tt.have)
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("xctest env: %v\n%s", err, out)
			}
			kv := keyValues(string(out))
			want := map[string]string{"atp": tt.wantATP, "pinned": "0=2048M,2=512M"}
			if diff := cmp.Diff(want, map[string]string{"atp": kv["atp"], "pinned": kv["pinned"]}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestXcblockMatchesCtlblock: the shell tool (built from the C header) and
// the Go package agree on what a block says.
func TestXcblockMatchesCtlblock(t *testing.T) {
	b := buildDir(t)
	dir := t.TempDir() + "/blk"
	tool := b + "/libxcuda/tests/xcblock"
	if out, err := exec.Command(tool, "create", dir, "share=2500", "mem1=4096", "paused=1", "inflight=8", "mps_pct=30").CombinedOutput(); err != nil {
		t.Fatalf("xcblock create: %v\n%s", err, out)
	}
	if out, err := exec.Command(tool, "set", dir, "nonsense=1").CombinedOutput(); err == nil {
		t.Errorf("xcblock accepted a bad key: %s", out)
	}
	blk, err := ctlblock.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer blk.Close()
	want := ctlblock.Limits{ShareBP: 2500, MemoryBytes: []uint64{0, 4096}, Paused: true, MaxInFlight: 8, MPSActiveThreadPercent: 30}
	if diff := cmp.Diff(want, blk.Limits()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
