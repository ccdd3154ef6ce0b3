package sim

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// kernelLine is a kernel's line of the op trace (times in model µs).
type kernelLine struct {
	pid, ctx         string
	smCap            string
	queued, ran, end float64
}

// traceKernels reads the kernel lines of an op trace.
func traceKernels(t *testing.T, trace string) []kernelLine {
	t.Helper()
	var out []kernelLine
	for _, l := range strings.Split(strings.TrimSpace(trace), "\n")[1:] {
		f := strings.Split(l, ",")
		if len(f) != 12 {
			t.Fatalf("op trace line %q: want 12 columns", l)
		}
		if f[5] != "kernel" {
			continue
		}
		k := kernelLine{pid: f[1], ctx: f[3], smCap: f[7]}
		for i, v := range []*float64{&k.queued, &k.ran, &k.end} {
			var err error
			if *v, err = strconv.ParseFloat(f[[]int{8, 10, 11}[i]], 64); err != nil {
				t.Fatalf("op trace line %q: %v", l, err)
			}
		}
		out = append(out, k)
	}
	return out
}

// newTracedSim is newTestSim on an H100 with an op trace; the trace is complete
// once the simulator is closed.
func newTracedSim(t *testing.T) (*Sim, *strings.Builder) {
	t.Helper()
	p, _ := LookupProfile("h100")
	var trace strings.Builder
	s, err := New(Config{Devices: []Profile{p}, OpTrace: &trace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, &trace
}

// greenRun is what greenBesideMPSClient saw.
type greenRun struct {
	cap     int          // the green context's SM cap
	maxHeld int          // most SMs its kernel held at any sample
	green   []kernelLine // the green context's kernels in the op trace
	online  kernelLine   // the neighbour's kernel in the op trace
}

// greenBesideMPSClient runs, under an MPS server of default active-thread
// percentage atp, a process's green context of sms SMs with a GPU-filling
// kernel (33 waves of 1 ms blocks on 16 SMs), and another client's one-wave
// kernel of 800 blocks that arrives while it runs. Times come from the op
// trace, in model time: a test goroutine descheduled between launches does not
// change them.
func greenBesideMPSClient(t *testing.T, atp float64, sms int) greenRun {
	t.Helper()
	s, trace := newTracedSim(t)
	if err := s.RegisterServer(999, 0, atp, nil); err != nil {
		t.Fatal(err)
	}
	offline, online := newProc(t, s, 1, 999, 0), newProc(t, s, 2, 999, 0)
	if r := offline.c.CreateGreenContext(2, 1, 200, sms); r != Success {
		t.Fatalf("create green context: %v", r)
	}
	var out greenRun
	_, out.cap, _, _ = offline.c.ContextInfo(2)
	s.mu.Lock()
	green := offline.c.ctxs[2]
	s.mu.Unlock()
	sample := func() {
		s.mu.Lock()
		s.devs[0].advance(s.nowNs())
		out.maxHeld = max(out.maxHeld, green.smsHeld)
		s.mu.Unlock()
	}
	if r := offline.c.Launch(200, 10, [3]uint32{132 * 8 * 4, 1, 1}, [3]uint32{256, 1, 1}); r != Success {
		t.Fatalf("green launch: %v", r)
	}
	for range 3 {
		time.Sleep(time.Millisecond)
		sample()
	}
	online.run(t, 10, 100*8, 1)
	for range 5 {
		time.Sleep(time.Millisecond)
		sample()
	}
	ch := make(chan Result, 1)
	offline.c.Sync(SyncStream, 200, func(r Result) { ch <- r })
	if r := <-ch; r != Success {
		t.Fatalf("green stream sync: %v", r)
	}
	s.Close()
	for _, k := range traceKernels(t, trace.String()) {
		switch {
		case k.pid == "1" && k.ctx == "2":
			out.green = append(out.green, k)
		case k.pid == "2":
			out.online = k
		}
	}
	return out
}

func TestGreenContextConfinesItsKernels(t *testing.T) {
	const sms = 16
	got := greenBesideMPSClient(t, 100, sms)
	waited, took := got.online.ran-got.online.queued, got.online.end-got.online.ran
	t.Logf("green cap %d, held at most %d SMs; neighbour's kernel waited %.1fus, ran %.1fus", got.cap, got.maxHeld, waited, took)
	if got.cap != sms {
		t.Errorf("green context's SM cap = %d, want %d", got.cap, sms)
	}
	if got.maxHeld != sms {
		t.Errorf("green context's GPU-filling kernel held up to %d SMs, want exactly its %d", got.maxHeld, sms)
	}
	// 800 blocks fit on the 116 SMs the green context leaves: no wait, one wave of 1 ms
	if got.online.end == 0 || waited > 50 || took > 1100 {
		t.Errorf("neighbour's one-wave kernel waited %.1fus and ran %.1fus; want it to start at once on the free SMs and take about 1ms",
			waited, took)
	}
	if len(got.green) != 1 {
		t.Fatalf("%d kernel lines of the green context in the op trace, want 1", len(got.green))
	}
	// 4224 blocks, 128 at a time: 33 waves of 0.825-1 ms blocks
	if g := got.green[0]; g.smCap != strconv.Itoa(sms) || g.end-g.ran < 27000 {
		t.Errorf("op trace: green kernel with sm_cap %s ran %.0fus, want sm_cap %d and at least 27 ms", g.smCap, g.end-g.ran, sms)
	}
}

// Under an active-thread percentage below 100 the partition is ignored: the
// green context gets its parent's cap (66 SMs of 132 at 50%).
func TestGreenContextUnderAnActiveThreadCapIgnoresItsPartition(t *testing.T) {
	const sms = 16
	got := greenBesideMPSClient(t, 50, sms)
	t.Logf("green cap %d, held at most %d SMs", got.cap, got.maxHeld)
	if got.cap != 66 {
		t.Errorf("green context's SM cap under a 50%% server = %d, want the parent's 66", got.cap)
	}
	if got.maxHeld <= sms || got.maxHeld > 66 {
		t.Errorf("green context's kernel held up to %d SMs, want more than its partition (%d), at most 66", got.maxHeld, sms)
	}
}

// Outside MPS a green context runs beside its parent, in the parent's time
// slice: a primary-context kernel launched while a green one fills the green
// context's 16 SMs starts at once on the other 116 (as a time-slicing participant
// of its own, the green context would hold the GPU for the rest of its kernel and
// a 0.3 ms switch).
func TestGreenContextSharesItsParentsTimeSlice(t *testing.T) {
	s, trace := newTracedSim(t)
	p := newProc(t, s, 1, 0, 0)
	if r := p.c.CreateGreenContext(2, 1, 200, 16); r != Success {
		t.Fatalf("create green context: %v", r)
	}
	// four waves on the green context's SMs, one on the rest
	if r := p.c.Launch(200, 10, [3]uint32{16 * 8 * 4, 1, 1}, [3]uint32{256, 1, 1}); r != Success {
		t.Fatalf("green launch: %v", r)
	}
	if r := p.c.Launch(100, 10, [3]uint32{116 * 8, 1, 1}, [3]uint32{256, 1, 1}); r != Success {
		t.Fatalf("primary launch: %v", r)
	}
	for _, st := range []uint32{100, 200} {
		done := make(chan Result, 1)
		p.c.Sync(SyncStream, st, func(r Result) { done <- r })
		if r := <-done; r != Success {
			t.Fatal(r)
		}
	}
	s.Close()
	ks := traceKernels(t, trace.String())
	if len(ks) != 2 {
		t.Fatalf("%d kernels in the op trace, want 2", len(ks))
	}
	for _, k := range ks {
		t.Logf("context %s: waited %.1fus, ran %.1fus", k.ctx, k.ran-k.queued, k.end-k.ran)
		if k.ran-k.queued > 50 || k.end-k.ran > 4100 {
			t.Errorf("context %s's kernel waited %.1fus and ran %.1fus: want it to start at once, beside the other", k.ctx, k.ran-k.queued, k.end-k.ran)
		}
	}
}

func TestGreenContextValidatesAndSharesItsParentsMemory(t *testing.T) {
	s := newTestSim(t, "h100")
	if err := s.RegisterServer(999, 0, 100, nil); err != nil {
		t.Fatal(err)
	}
	c := s.Connect(1, 0, nil)
	if r := c.CreateContext(1, 0, 100, 999, 0, 2<<30); r != Success {
		t.Fatalf("create context: %v", r)
	}
	for _, tc := range []struct {
		name               string
		id, parent, stream uint32
		sms                int
		want               Result
	}{
		{"unknown parent", 2, 7, 200, 16, ErrInvalidContext},
		{"no SMs", 2, 1, 200, 0, ErrInvalidValue},
		{"more SMs than the device", 2, 1, 200, 133, ErrInvalidValue},
		{"id taken", 1, 1, 200, 16, ErrInvalidValue},
		{"default stream taken", 2, 1, 100, 16, ErrInvalidValue},
		{"good", 2, 1, 200, 16, Success},
		{"from a green context", 3, 2, 300, 8, ErrInvalidContext},
	} {
		if r := c.CreateGreenContext(tc.id, tc.parent, tc.stream, tc.sms); r != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, r, tc.want)
		}
	}
	atp, smCap, lim, _ := c.ContextInfo(2)
	if atp != 100 || smCap != 16 || lim != 2<<30 {
		t.Errorf("green context info: atp %v cap %d limit %d, want 100, 16, the parent's 2 GiB", atp, smCap, lim)
	}
	// its allocations count against the parent's 2 GiB limit
	ptr, r := c.MemAlloc(2, 1536<<20)
	if r != Success {
		t.Fatalf("green alloc: %v", r)
	}
	if _, r := c.MemAlloc(1, 1<<30); r != ErrOutOfMemory {
		t.Errorf("parent alloc past the shared 2 GiB limit: %v, want out of memory", r)
	}
	if free, _, _ := c.MemInfo(1); free != 512<<20 {
		t.Errorf("parent's free memory %d, want 512 MiB", free)
	}
	done := make(chan Result, 1)
	c.DestroyContext(2, func(r Result) { done <- r })
	if r := <-done; r != Success {
		t.Fatal(r)
	}
	if free, _, _ := c.MemInfo(1); free != 512<<20 {
		t.Errorf("after the green context went the parent's free memory is %d, want 512 MiB (the allocation is the parent's)", free)
	}
	if r := c.MemFree(ptr); r != Success {
		t.Errorf("free of the green context's allocation: %v", r)
	}
	// the parent's release takes a green context still open with it
	if r := c.CreateGreenContext(3, 1, 300, 8); r != Success {
		t.Fatal(r)
	}
	c.DestroyContext(1, func(r Result) { done <- r })
	<-done
	if _, _, _, r := c.ContextInfo(3); r != ErrInvalidContext {
		t.Errorf("green context after its parent's release: %v, want invalid context", r)
	}
	if st, _ := s.Stats(0); st.MemUsed != 0 {
		t.Errorf("device memory used after every context went: %d", st.MemUsed)
	}
}

// Releasing a primary context takes its green contexts with it, so it waits for
// their work too (as at a process's clean exit, which destroys every context).
func TestDestroyingTheParentWaitsForItsGreenContexts(t *testing.T) {
	s := newTestSim(t, "h100")
	p := newProc(t, s, 1, 0, 0)
	if r := p.c.CreateGreenContext(2, 1, 200, 16); r != Success {
		t.Fatalf("create green context: %v", r)
	}
	// four waves of 1 ms blocks on 16 SMs
	if r := p.c.Launch(200, 10, [3]uint32{16 * 8 * 4, 1, 1}, [3]uint32{256, 1, 1}); r != Success {
		t.Fatalf("green launch: %v", r)
	}
	start := time.Now()
	done := make(chan Result, 1)
	p.c.DestroyContext(1, func(r Result) { done <- r })
	if r := <-done; r != Success {
		t.Fatal(r)
	}
	if took := time.Since(start); took < 3*time.Millisecond {
		t.Errorf("the primary context went %v after its green context got 4 ms of work: its work was dropped", took)
	}
	if _, _, _, r := p.c.ContextInfo(2); r != ErrInvalidContext {
		t.Errorf("green context after its parent's release: %v, want invalid context", r)
	}
}
