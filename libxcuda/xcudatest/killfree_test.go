package xcudatest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
)

// deadPID returns the pid of a process that has exited.
func deadPID(t *testing.T) int32 {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return int32(c.Process.Pid)
}

// Issue 15, probe "SIGKILL a holder while it frees": a process killed between the two
// decrements of unreserve() (the shared counter already lowered, its own not yet) was
// reclaimed twice, and the next allocation passed the cap by what it was freeing. The
// state such a kill leaves is written here directly: a live holder (this test process)
// with 4 MiB, a dead one with 4 MiB whose free of 1 MiB was half done, and the
// accounting lock still held by the dead process. The old libxcuda ignores the lock and
// subtracts the dead slot from the already-lowered counter: a new holder gets 5 MiB and
// 9 MiB are held under an 8 MiB cap. The lock's new owner recounts instead.
func TestKillMidFreeIsNotReturnedTwice(t *testing.T) {
	const mib = 1 << 20
	const limit = 8 * mib
	h := newHarness(t, ctlblock.Limits{ShareBP: ctlblock.ShareFull, MemoryBytes: []uint64{limit}})
	dead := deadPID(t)
	r := ctlblock.NewRawUsage()
	r.Procs[0].PID = int32(os.Getpid())
	r.Procs[0].ReservedBytes[0] = 4 * mib
	r.Procs[1].PID = dead
	r.Procs[1].ReservedBytes[0] = 4 * mib
	r.ReservedBytes[0] = 7 * mib // 4 + 4, less the 1 MiB whose free was cut short
	r.MemLock = uint32(dead)
	if err := ctlblock.WriteRawUsage(h.block.Dir(), r); err != nil {
		t.Fatal(err)
	}
	p := startHolder(t, h, mib, 0)
	startAll(t, p)
	p.waitHeld(t)
	p.finish(t)
	if p.held != 4 {
		t.Errorf("new holder got %d MiB next to a live 4 MiB under an 8 MiB cap, want 4 (over the cap by %d MiB)", p.held, p.held-4)
	}
	after, err := ctlblock.ReadRawUsage(h.block.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if after.MemLock != 0 || after.MemRecoveries != 1 {
		t.Errorf("lock %d recoveries %d, want the dead holder's lock taken over once", after.MemLock, after.MemRecoveries)
	}
	if after.ReservedBytes[0] != 4*mib {
		t.Errorf("reserved %d after the holder left, want the live 4 MiB", after.ReservedBytes[0])
	}
}

// killDuringFree runs rounds of: a churn process that frees and reallocates 2 MiB in a
// loop is SIGKILLed at a random moment, then a new holder fills what the cap leaves next
// to a live 4 MiB anchor. Over-cap rounds: the anchor and the new holder together held
// more than the cap. Short rounds: they held less (a kill leaked reservations).
func killDuringFree(t *testing.T, rounds int) (overCap, short int, recoveries uint32) {
	const chunk = 256 << 10
	const limit = 8 << 20
	h := newHarness(t, ctlblock.Limits{ShareBP: ctlblock.ShareFull, MemoryBytes: []uint64{limit}})
	anchor := startHolder(t, h, chunk, 16)
	startAll(t, anchor)
	anchor.waitHeld(t)
	defer anchor.finish(t)
	for i := range rounds {
		c := h.command("xctest", "churn", "dlsym", strconv.Itoa(chunk), "8")
		out, err := c.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 6)
		if _, err := out.Read(buf); err != nil {
			t.Fatalf("round %d: churn did not start: %v", i, err)
		}
		time.Sleep(time.Duration(rand.IntN(400)) * time.Microsecond)
		c.Process.Kill()
		c.Wait()
		p := startHolder(t, h, chunk, 0)
		startAll(t, p)
		p.waitHeld(t)
		p.finish(t)
		total := (anchor.held + p.held) * chunk
		switch {
		case total > limit:
			overCap++
			t.Errorf("round %d: %d bytes held under a %d cap", i, total, limit)
		case total < limit:
			short++
		}
	}
	r, err := ctlblock.ReadRawUsage(h.block.Dir())
	if err != nil {
		t.Fatal(err)
	}
	return overCap, short, r.MemRecoveries
}

// TestKillDuringFree is the short version of the soak (make -C libxcuda soak runs
// 10,000 rounds): no round passes the cap, none leaks.
func TestKillDuringFree(t *testing.T) {
	rounds := 40
	if v := os.Getenv("MUXFLOW_SOAK_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("MUXFLOW_SOAK_KILLS=%q", v)
		}
		rounds = n
	}
	start := time.Now()
	overCap, short, rec := killDuringFree(t, rounds)
	msg := fmt.Sprintf("kills during free: %d rounds in %v, %d over the cap, %d short (leaked), %d lock takeovers (kills inside the accounting lock)",
		rounds, time.Since(start).Round(time.Millisecond), overCap, short, rec)
	t.Log(msg)
	if overCap != 0 || short != 0 {
		t.Errorf("%s", msg)
	}
}
