package nvmlsim_test

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/muxflow/muxflow/gpusim/simclient"
)

// TestNamespacedProcessIsKnownByItsHostPID runs a training job the way a container runs
// it: in its own pid namespace (it is pid 1 there) and user namespace (root there, 65534
// on the host). As on a real node, gpusim must know it by what the kernel says — its host
// pid and host uid — everywhere: per-process stats, NVML's process lists and per-process
// utilisation, the MPS server it gets (one per host user) and that server's client list,
// and fault injection by pid.
func TestNamespacedProcessIsKnownByItsHostPID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test makes pid and user namespaces and needs root (CI runs as root)")
	}
	d, l := setup(t, "h100")
	ctx := context.Background()
	// The process is not root on the host: it must be able to reach the private socket.
	if err := os.Chmod(d.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := d.StartMPS(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.StopMPS)

	const hostUID = 65534
	cmd := exec.Command(d.Artifacts.Train, "--duration", "30", "--mem", "1G")
	cmd.Env = append(os.Environ(), d.Env()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWPID | syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostUID, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostUID, Size: 1}},
		// become root inside the new namespace: uid 65534 on the host
		Credential: &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	host := cmd.Process.Pid

	deadline := time.Now().Add(15 * time.Second)
	for {
		if p, ok, _ := d.Process(ctx, 0, host); ok && p.Launches > 0 {
			break
		}
		select {
		case <-done:
			t.Fatalf("train ended early: %s\n%s", cmd.ProcessState, out.String())
		default:
		}
		if time.Now().After(deadline) {
			st, _ := d.Stats(ctx)
			t.Fatalf("gpusim does not list host pid %d as launching; processes %+v\n%s", host, st[0].Processes, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	h, r := l.DeviceGetHandleByIndex(0)
	if r != nvml.SUCCESS {
		t.Fatal(r)
	}
	pidsOf := func(ps []nvml.ProcessInfo, r nvml.Return) []int {
		var out []int
		for _, p := range ps {
			out = append(out, int(p.Pid))
		}
		if r != nvml.SUCCESS {
			t.Errorf("NVML: %v", r)
		}
		return out
	}
	if got := pidsOf(h.GetComputeRunningProcesses()); !slices.Equal(got, []int{host}) {
		t.Errorf("NVML running processes %v, want the host pid %d", got, host)
	}
	if got := pidsOf(h.GetMPSComputeRunningProcesses()); !slices.Equal(got, []int{host}) {
		t.Errorf("NVML MPS processes %v, want the host pid %d", got, host)
	}
	var util []int
	for i := 0; i < 50 && len(util) == 0; i++ {
		s, _ := h.GetProcessUtilization(0)
		for _, u := range s {
			util = append(util, int(u.Pid))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !slices.Equal(util, []int{host}) {
		t.Errorf("NVML process utilisation for %v, want the host pid %d", util, host)
	}

	srv, err := d.MPSServers(ctx)
	if err != nil || len(srv) != 1 {
		t.Fatalf("MPS servers %+v %v, want one", srv, err)
	}
	if srv[0].UID != hostUID || !slices.Equal(srv[0].Clients, []int{host}) {
		t.Errorf("MPS server %+v, want uid %d (the host's, not the namespace's 0) with client %d", srv[0], hostUID, host)
	}
	list, err := d.MPSCommand(ctx, "get_client_list "+strconv.Itoa(srv[0].PID))
	if err != nil || strings.TrimSpace(list) != strconv.Itoa(host) {
		t.Errorf("get_client_list %d = %q %v, want %d", srv[0].PID, list, err, host)
	}

	if err := d.InjectFault(ctx, simclient.Fault{Device: 0, Xid: 31, PID: host}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a fault injected into the host pid did not reach the process")
	}
	if !strings.Contains(out.String(), `"first_error":"CUDA_ERROR_ILLEGAL_ADDRESS"`) {
		t.Errorf("train after an Xid 31 on its host pid: %s", out.String())
	}
}
