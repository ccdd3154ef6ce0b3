package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/muxflow/muxflow/gpusim/nvmlsim"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/tests/testenv"
)

// TestContainerisedWorkloadIsAttributedToItsContainer runs gpusim's infer inside a real
// container (containerd + runc, its own pid namespace: infer is pid 1 there) with gpusim
// bind-mounted in, registers it with muxd as an online container, and checks that
// gpusim's stats and NVML know the process by its host pid and that muxd attributes its
// utilisation and memory to the container (the online demand the allocator derives from
// it, and the container's profile). Before gpusimd took pids from the peer credential,
// NVML reported pid 1 and muxd saw an online demand of 0.
func TestContainerisedWorkloadIsAttributedToItsContainer(t *testing.T) {
	dir, err := os.MkdirTemp("", "mfhp") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cd := testenv.StartContainerd(t, dir)
	n := startNodeWith(t, nodeOptions{containerd: cd.Address})
	rootfs := testenv.BusyboxRootfs(t, dir)
	testenv.AddDynamicProgram(t, rootfs, n.sim.Artifacts.Infer, "/usr/bin/infer")
	ctx := context.Background()
	const ns = "muxflow-e2e"

	// gpusim inside the container as the NVIDIA toolkit would put a driver there: the
	// driver library, and the daemon's socket and the MPS pipe directory (both in the
	// simulator's private directory) bind-mounted.
	const simDir, libDir = "/gpusim", "/usr/lib/gpusim"
	run := []string{
		"--mount", "type=bind,src=" + n.sim.Dir + ",dst=" + simDir + ",options=rbind:rw",
		"--mount", "type=bind,src=" + n.sim.Artifacts.LibDir + ",dst=" + libDir + ",options=rbind:ro",
		"--env", "GPUSIM_SOCKET=" + filepath.Join(simDir, filepath.Base(n.sim.Socket)),
		"--env", "LD_LIBRARY_PATH=" + libDir,
		"--env", "CUDA_MPS_PIPE_DIRECTORY=" + filepath.Join(simDir, filepath.Base(n.sim.MPSPipeDir())),
		"--rootfs", rootfs,
	}
	pid := startContainer(t, n, cd, ns, "svc", api.Online, run, "/usr/bin/infer", "--rate", "constant:300", "--duration", "120")

	// (a) gpusim and NVML name the host pid.
	n.waitFor("gpusim to list the container's host pid", 15*time.Second, func() bool {
		p, ok, _ := n.sim.Process(ctx, 0, pid)
		return ok && p.Launches > 0
	})
	st, err := n.sim.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st[0].Processes {
		if p.PID != pid {
			t.Errorf("gpusim lists pid %d besides the container's host pid %d", p.PID, pid)
		}
	}
	l := nvmlsim.New(n.sim.Socket)
	if r := l.Init(); r != nvml.SUCCESS {
		t.Fatal(r)
	}
	defer l.Shutdown()
	h, _ := l.DeviceGetHandleByIndex(0)
	procs, r := h.GetComputeRunningProcesses()
	var pids []int
	for _, p := range procs {
		pids = append(pids, int(p.Pid))
	}
	if r != nvml.SUCCESS || !slices.Equal(pids, []int{pid}) {
		t.Errorf("NVML running processes %v (%v), want the host pid %d", pids, r, pid)
	}

	// (b) muxd finds the container behind the NVML process: the allocator sees the
	// online work, and the container's profile has its utilisation and memory.
	var g api.GPU
	n.waitFor("muxd to see online demand", 15*time.Second, func() bool {
		g = n.gpu()
		return g.OnlineDemand > 0
	})
	t.Logf("GPU utilisation %.0f%%, online demand %.0f%%", g.Utilization, g.OnlineDemand)
	n.waitFor("the container's profile to carry its utilisation", 15*time.Second, func() bool {
		rep, err := n.client.NodeReport(ctx)
		if err != nil || len(rep.GPUs) != 1 || rep.GPUs[0].Online == nil {
			return false
		}
		p := rep.GPUs[0].Online.Profile
		return p.GPUUtil > 0 && p.MemoryMiB > 0
	})
}
