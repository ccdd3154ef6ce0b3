package xcudatest

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/muxflow/muxflow/libxcuda/ctlblock"
)

// holder is an xctest process that allocated chunks until OOM and now
// holds them until its stdin closes.
type holder struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	held  int64
	out   *bufio.Reader
}

func startHolder(t *testing.T, h *harness, chunk uint64, max int) *holder {
	t.Helper()
	cmd := h.command("xctest", "hold", "dlsym", fmt.Sprint(chunk), fmt.Sprint(max))
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start xctest hold: %v", err)
	}
	return &holder{cmd: cmd, stdin: in, out: bufio.NewReader(out)}
}

// startAll makes every holder allocate at (nearly) the same moment.
func startAll(t *testing.T, ps ...*holder) {
	t.Helper()
	for _, p := range ps {
		p.waitReady(t)
	}
	for _, p := range ps {
		p.start(t)
	}
}

// waitReady reads the "ready" line (initialised, waiting for the start).
func (p *holder) waitReady(t *testing.T) {
	t.Helper()
	for {
		line, err := p.out.ReadString('\n')
		if err != nil {
			t.Fatalf("xctest hold ended before it was ready: %v", err)
		}
		if strings.TrimSpace(line) == "ready" {
			return
		}
	}
}

// start lets a ready holder allocate.
func (p *holder) start(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, "go\n"); err != nil {
		t.Fatalf("start holder: %v", err)
	}
}

// waitHeld reads the "held=" line.
func (p *holder) waitHeld(t *testing.T) {
	t.Helper()
	for {
		line, err := p.out.ReadString('\n')
		if err != nil {
			t.Fatalf("xctest hold ended before reporting: %v", err)
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "held="); ok {
			p.held = atoi(t, v)
			return
		}
	}
}

func (p *holder) finish(t *testing.T) map[string]string {
	t.Helper()
	p.stdin.Close()
	rest, _ := io.ReadAll(p.out)
	if err := p.cmd.Wait(); err != nil {
		t.Errorf("xctest hold: %v", err)
	}
	return keyValues(string(rest))
}

// TestMemoryCapRace: 8 processes race to allocate under one cap; together
// they never exceed it (and fill it exactly), and everything is returned
// when they free. Without libxcuda the same run exceeds the cap. Against
// the stub driver and against gpusim's fake driver.
func TestMemoryCapRace(t *testing.T) {
	const (
		procs = 8
		chunk = 192 << 10
		limit = 64 << 20
	)
	for _, driver := range []string{"stub", "gpusim"} {
		for _, preload := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/libxcuda=%v", driver, preload), func(t *testing.T) {
				h := newHarness(t, ctlblock.Limits{ShareBP: ctlblock.ShareFull, MemoryBytes: []uint64{limit}})
				if driver == "gpusim" {
					h.useGpusim(t)
				} else {
					h.extraEnv = append(h.extraEnv, "STUB_ALLOC_US=50")
				}
				h.preload = preload
				var ps []*holder
				for range procs {
					// Without libxcuda each would take the whole device;
					// 64 chunks each are enough to pass the cap.
					max := 0
					if !preload {
						max = 64
					}
					ps = append(ps, startHolder(t, h, chunk, max))
				}
				startAll(t, ps...)
				var total int64
				var wg sync.WaitGroup
				var held []int64
				for _, p := range ps {
					p.waitHeld(t)
					total += p.held * chunk
					held = append(held, p.held)
				}
				t.Logf("chunks held per process: %v", held)
				peak := h.block.Usage().PeakBytes
				reservedWhileHeld := h.block.Usage().ReservedBytes
				for _, p := range ps {
					wg.Add(1)
					go func() {
						defer wg.Done()
						kv := p.finish(t)
						if kv["free_errors"] != "0" {
							t.Errorf("free errors: %v", kv)
						}
					}()
				}
				wg.Wait()
				if !preload {
					if total <= limit {
						t.Fatalf("control run without libxcuda held %d bytes, expected more than the %d cap (test would prove nothing)", total, limit)
					}
					return
				}
				want := int64(limit / chunk * chunk)
				if total != want {
					t.Errorf("processes held %d bytes together, want exactly %d (cap %d, chunk %d)", total, want, limit, chunk)
				}
				if len(peak) < 1 || peak[0] > limit {
					t.Errorf("peak reserved %v exceeds cap %d", peak, limit)
				}
				if len(reservedWhileHeld) < 1 || int64(reservedWhileHeld[0]) != total {
					t.Errorf("reserved counter %v while held, want %d", reservedWhileHeld, total)
				}
				if u := h.block.Usage(); len(u.ReservedBytes) != 0 || len(u.Procs) != 0 {
					t.Errorf("after all freed and exited: reserved %v, procs %+v; want none", u.ReservedBytes, u.Procs)
				}
			})
		}
	}
}

// TestDeadProcessReservationReclaimed: a process killed with SIGKILL while
// holding memory cannot return it itself; the next allocation that hits the
// cap reclaims the dead slot and succeeds.
func TestDeadProcessReservationReclaimed(t *testing.T) {
	const limit = 8 << 20
	h := newHarness(t, ctlblock.Limits{ShareBP: ctlblock.ShareFull, MemoryBytes: []uint64{limit}})
	a := startHolder(t, h, 1<<20, 0)
	startAll(t, a)
	a.waitHeld(t)
	if a.held != 8 {
		t.Fatalf("first holder got %d MiB, want 8", a.held)
	}
	a.cmd.Process.Kill()
	a.cmd.Wait()
	if u := h.block.Usage(); len(u.ReservedBytes) == 0 || u.ReservedBytes[0] != limit {
		t.Fatalf("killed process's reservation: %v, want %d still counted", u.ReservedBytes, limit)
	}
	b := startHolder(t, h, 1<<20, 0)
	startAll(t, b)
	b.waitHeld(t)
	if b.held != 8 {
		t.Errorf("second holder got %d MiB after the first was killed, want 8", b.held)
	}
	b.finish(t)
}

// TestMemInfoNeverUnderflows: when muxd lowers the cap below what the
// container already holds, cuMemGetInfo shows the cap as total and zero
// free (not a huge wrapped-around number), and new allocations are refused.
func TestMemInfoNeverUnderflows(t *testing.T) {
	h := newHarness(t, ctlblock.Limits{ShareBP: ctlblock.ShareFull, MemoryBytes: []uint64{8 << 20}})
	holder := startHolder(t, h, 1<<20, 4)
	startAll(t, holder)
	holder.waitHeld(t)
	defer holder.finish(t)
	if err := h.block.SetLimits(ctlblock.Limits{ShareBP: ctlblock.ShareFull, MemoryBytes: []uint64{2 << 20}}); err != nil {
		t.Fatal(err)
	}
	out, err := h.command("xctest", "entry", "dlsym", "1048576").CombinedOutput()
	if err != nil {
		t.Fatalf("xctest entry: %v\n%s", err, out)
	}
	kv := keyValues(string(out))
	want := map[string]string{"alloc_over_cap": "2", "alloc_small": "2", "mem_total": "2097152", "mem_free": "0"}
	got := map[string]string{}
	for k := range want {
		got[k] = kv[k]
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestEveryAllocationKindIsCapped: managed, async, pool, pitch,
// cuMemCreate and array allocations all count against the cap (the second
// 3 MiB of each kind under a 4 MiB cap fails with 2 =
// CUDA_ERROR_OUT_OF_MEMORY) and their frees return the bytes (the next kind
// fits again).
func TestEveryAllocationKindIsCapped(t *testing.T) {
	h := newHarness(t, ctlblock.Limits{ShareBP: ctlblock.ShareFull, MemoryBytes: []uint64{4 << 20}})
	out, err := h.command("xctest", "kinds", "dlsym").CombinedOutput()
	if err != nil {
		t.Fatalf("xctest kinds: %v\n%s", err, out)
	}
	kv := keyValues(string(out))
	want := map[string]string{"managed": "0,2,0", "async": "0,2,0", "pool": "0,2,0", "pitch": "0,2,0", "create": "0,2,0", "array": "0,2,0"}
	got := map[string]string{}
	for k := range want {
		got[k] = kv[k]
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s\n%s", diff, out)
	}
	if u := h.block.Usage(); len(u.ReservedBytes) != 0 || u.OOMDenials != 6 {
		t.Errorf("after exit: reserved %v, OOM denials %d; want none, 6", u.ReservedBytes, u.OOMDenials)
	}
}
