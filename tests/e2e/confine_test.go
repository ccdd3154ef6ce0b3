package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/muxflow/muxflow/monitor"
	"github.com/muxflow/muxflow/muxd/api"
)

// longJob starts a registered job of 3 ms GPU-filling kernels; svc a service of
// GPU-filling 40 µs kernels, 300 requests a second.
func (n *node) longJob(id string) *workload {
	return n.run(id, api.Offline, n.sim.Artifacts.Train, "--duration", "30", "--mem", "1G",
		"--kernels", "4", "--kernel-us", "3000", "--big-share", "1")
}

func (n *node) fillingService(id string) *workload {
	return n.run(id, api.Online, n.sim.Artifacts.Infer, "--rate", "constant:300", "--duration", "30",
		"--kernels", "3", "--kernel-us", "40", "--grid", "528", "--threads", "512")
}

// confinement waits until the container's usage reports want as its confinement.
func (n *node) confinement(id, want string) api.Container {
	var c api.Container
	n.waitFor(id+": "+want, 15*time.Second, func() bool {
		var err error
		c, err = n.client.Container(context.Background(), id)
		return err == nil && c.Usage != nil && c.Usage.Confine == want
	})
	return c
}

// TestLongKernelJobIsConfined (issue 14) on the user's path: a service of GPU-filling
// kernels and a job of 3 ms GPU-filling kernels placed beside it on one simulated H100,
// through muxd, MPS and libxcuda. muxd gives the job the whole GPU's MPS percentage (the
// online kernels are too wide to fit beside any), measures both, names the job, and
// confines it to half the SMs: its libxcuda reports a green context of 72 SMs through
// the usage page, the API says so, and gpusim sees its kernels hold at most that many.
func TestLongKernelJobIsConfined(t *testing.T) {
	n := startNode(t, "")
	n.signal = true
	ctx := context.Background()
	n.fillingService("svc")
	n.waitFor("muxd gives offline the whole GPU beside GPU-filling online kernels", 5*time.Second, func() bool {
		return n.gpu().OfflineMPS == 100
	})
	job := n.longJob("job")
	c := n.confinement("job", "confined")
	if c.Ceiling == nil || c.Ceiling.ConfinePercent != 50 || c.Usage.ConfinedSMs != 72 {
		t.Errorf("job's ceiling %+v, usage %+v: want confined to 50%%, 72 SMs", c.Ceiling, c.Usage)
	}
	if risks := n.gpu().KernelRisks; len(risks) != 1 || risks[0].ID != "job" || risks[0].ConfinePercent != 50 {
		t.Errorf("GPU's kernel risks %+v, want the job, confined to 50%%", risks)
	}
	before, _, err := n.sim.Process(ctx, 0, job.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	after, _, err := n.sim.Process(ctx, 0, job.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	busy := after.BusyNs - before.BusyNs
	if busy <= 0 {
		t.Fatalf("the job ran no kernels once confined: %+v then %+v\n%s", before, after, tail(job.out.String(), 10))
	}
	held := (after.SMNs - before.SMNs) / busy / 132
	t.Logf("job: %+v, its kernels held %.2f of the SMs", c.Usage, held)
	if held > 72.0/132+0.01 {
		t.Errorf("the confined job's kernels held %.2f of the SMs, more than 72 of 132", held)
	}
}

// TestEarlyJobCannotBeConfined: a job started before muxd saw the service's kernels got
// the offline class's MPS percentage (70%), which MPS keeps for its contexts and which
// overrides green contexts. It is named all the same; it is not confined, and the API
// says why.
func TestEarlyJobCannotBeConfined(t *testing.T) {
	n := startNode(t, "")
	n.signal = true
	early := n.longJob("early")
	n.fillingService("svc")
	c := n.confinement("early", "MPS percentage below 100 overrides green contexts")
	if c.Ceiling == nil || c.Ceiling.ConfinePercent != 50 || c.Usage.ConfinedSMs != 0 {
		t.Errorf("early job's ceiling %+v, usage %+v: want asked for 50%%, no SMs confined", c.Ceiling, c.Usage)
	}
	if !early.running() {
		t.Errorf("the early job stopped: %s", tail(early.out.String(), 5))
	}
}

// TestUnprotectedJobIsEvicted: under evict.kernel_risk, the confined job of
// TestLongKernelJobIsConfined still leaves the GPU-filling online kernels half the SMs,
// so muxd evicts it, alone, once it has been named that long: the risk says when
// beforehand, the job gets the SIGTERM of a graceful eviction, the service keeps running
// and an event says why.
func TestUnprotectedJobIsEvicted(t *testing.T) {
	n := startNodeWith(t, nodeOptions{evict: `kernel_risk = "2s"`})
	n.signal = true
	ctx := context.Background()
	svc := n.fillingService("svc")
	n.waitFor("muxd gives offline the whole GPU beside GPU-filling online kernels", 5*time.Second, func() bool {
		return n.gpu().OfflineMPS == 100
	})
	job := n.longJob("job")
	n.confinement("job", "confined")
	if risks := n.gpu().KernelRisks; len(risks) != 1 || risks[0].EvictAt.IsZero() {
		t.Errorf("GPU's kernel risks %+v, want the job, with when muxd evicts it", risks)
	}
	n.waitFor("the job evicted", 10*time.Second, func() bool { return !job.running() })
	if ws, ok := job.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("job ended with %v, want the SIGTERM of a graceful eviction", job.cmd.ProcessState)
	}
	if !svc.running() {
		t.Errorf("the service stopped: %s", tail(svc.out.String(), 5))
	}
	var ev []monitor.Event
	if err := n.client.Events(ctx, &ev); err != nil || !strings.Contains(fmt.Sprint(ev), "evicted, alone: named for 2s") {
		t.Errorf("events %+v (%v): want one saying the job was evicted and why", ev, err)
	}
}
