package procfs

import (
	"errors"
	"os"
	"os/exec"
	"testing"
)

func TestReadSelfAndParent(t *testing.T) {
	st, err := Read(os.Getpid())
	if err != nil || st.PPID != os.Getppid() || st.StartTicks == 0 {
		t.Fatalf("own stat: %+v %v", st, err)
	}
	if _, err := Read(1 << 30); !errors.Is(err, ErrGone) {
		t.Errorf("nonexistent pid: %v", err)
	}
}

func TestZombieIsGone(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	// Not waited for yet: once it exits it stays a zombie.
	for i := 0; Alive(cmd.Process.Pid); i++ {
		if i > 1000 {
			t.Fatal("an exited, unreaped process still reads as alive")
		}
		exec.Command("sleep", "0.01").Run()
	}
}

func TestParse(t *testing.T) {
	line := "42 (a b) c)) S 7 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 12345 1000 10"
	st, err := parse(42, []byte(line))
	if err != nil || st.State != 'S' || st.PPID != 7 || st.StartTicks != 12345 || st.Flags != 4194560 || st.KernelThread() {
		t.Errorf("parse: %+v %v", st, err)
	}
	for _, bad := range []string{"", "42 no-paren", "42 (x) S 7", "42 (x) S x 1 1 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 1 1 1",
		"42 (x) S 7 1 1 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 99999999999999999999999 1 1", // start time overflows
		"42 (x) S -7 1 1 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 1 1 1",                      // negative parent
		"42 (x) SS 7 1 1 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 1 1 1"} {
		if _, err := parse(42, []byte(bad)); err == nil {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
}

func TestKernelThread(t *testing.T) {
	st, err := Read(2) // kthreadd, wherever muxd's tests run in the host pid namespace
	if err != nil {
		t.Skipf("no pid 2 here: %v", err)
	}
	if !st.KernelThread() {
		t.Skip("pid 2 is not kthreadd in this pid namespace")
	}
	if self, _ := Read(os.Getpid()); self.KernelThread() {
		t.Error("this test process reads as a kernel thread")
	}
}
