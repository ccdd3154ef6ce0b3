package procwatch

import (
	"fmt"
	"os/exec"
	"testing"
	"time"
)

type exit struct {
	key string
	pid int
}

func newWatcher(t *testing.T) (*Watcher, chan exit) {
	t.Helper()
	ch := make(chan exit, 10)
	w := New(func(key string, pid int) { ch <- exit{key, pid} })
	t.Cleanup(w.Close)
	return w, ch
}

func sleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func expect(t *testing.T, ch chan exit, want exit) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("reported %+v, want %+v", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("exit of %+v not reported", want)
	}
}

func expectNothing(t *testing.T, ch chan exit) {
	t.Helper()
	select {
	case got := <-ch:
		t.Fatalf("unexpected report %+v", got)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestExitIsReported(t *testing.T) {
	w, ch := newWatcher(t)
	cmd := sleeper(t)
	if err := w.Watch("c1", cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	expectNothing(t, ch)
	// Reported on exit, before the parent reaps it (the runtime's shim may reap late).
	cmd.Process.Kill()
	expect(t, ch, exit{"c1", cmd.Process.Pid})
	if w.Len() != 0 {
		t.Errorf("%d watches left after the exit", w.Len())
	}
}

func TestStoppedAndReplacedWatchesAreSilent(t *testing.T) {
	w, ch := newWatcher(t)
	a, b := sleeper(t), sleeper(t)
	if err := w.Watch("c1", a.Process.Pid); err != nil {
		t.Fatal(err)
	}
	w.Stop("c1")
	a.Process.Kill()
	expectNothing(t, ch)

	c := sleeper(t)
	if err := w.Watch("c2", b.Process.Pid); err != nil {
		t.Fatal(err)
	}
	// The id is reused by a new process before the old one's exit was seen.
	if err := w.Watch("c2", c.Process.Pid); err != nil {
		t.Fatal(err)
	}
	b.Process.Kill()
	expectNothing(t, ch)
	c.Process.Kill()
	expect(t, ch, exit{"c2", c.Process.Pid})
}

func TestProcessAlreadyGone(t *testing.T) {
	w, ch := newWatcher(t)
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if err := w.Watch("c1", cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, exit{"c1", cmd.Process.Pid})
}

func TestBadInput(t *testing.T) {
	w, _ := newWatcher(t)
	for _, pid := range []int{0, -1} {
		if err := w.Watch("c1", pid); err == nil {
			t.Errorf("Watch(pid %d) accepted it", pid)
		}
	}
	w.Close()
	if err := w.Watch("c1", 1); err == nil {
		t.Error("Watch after Close accepted it")
	}
}

// More exits than one read of the epoll instance returns, all at once.
func TestManyExitsAreEachReportedOnce(t *testing.T) {
	const n = 100
	ch := make(chan exit, 2*n)
	w := New(func(key string, pid int) { ch <- exit{key, pid} })
	t.Cleanup(w.Close)
	want := map[exit]bool{}
	var cmds []*exec.Cmd
	for i := range n {
		cmd := sleeper(t)
		key := fmt.Sprintf("c%d", i)
		if err := w.Watch(key, cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		want[exit{key, cmd.Process.Pid}] = true
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		cmd.Process.Kill()
	}
	for range n {
		select {
		case got := <-ch:
			if !want[got] {
				t.Fatalf("unexpected or repeated report %+v", got)
			}
			delete(want, got)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d exits not reported: %v", len(want), want)
		}
	}
	expectNothing(t, ch)
	if w.Len() != 0 {
		t.Errorf("%d watches left", w.Len())
	}
}

// Close while exits are being handled returns (it must not wait on the reader while
// holding what the reader needs), and leaves no watch.
func TestCloseDuringExits(t *testing.T) {
	w := New(func(string, int) {})
	var cmds []*exec.Cmd
	for i := range 30 {
		cmd := sleeper(t)
		if err := w.Watch(fmt.Sprintf("c%d", i), cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		cmd.Process.Kill()
	}
	done := make(chan struct{})
	go func() { w.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	if w.Len() != 0 {
		t.Errorf("%d watches left after Close", w.Len())
	}
	if err := w.Watch("late", cmds[0].Process.Pid); err == nil {
		t.Error("Watch after Close accepted it")
	}
}
