package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// minRounds keeps the medians meaningful when the benchmark framework asks for few
// iterations (each round is four container runs).
const minRounds = 21

// BenchmarkRuncRun measures `runc run` of a container that runs /bin/true, straight through
// runc and through muxflow-runtime, in the same process and interleaved round by round so
// that machine load hits both alike. It reports medians in ms: non-GPU (the fast path) and
// GPU (muxd registration, both hooks and unregistration included).
//
// With MUXFLOW_BASE_BUILD set to another build directory (say, one built from the commit
// before a change), a second node runs that build's muxd and muxflow-runtime, and every
// round also starts the GPU container through it, interleaved with the others.
func BenchmarkRuncRun(b *testing.B) {
	runc := lookTool(b, "runc")
	volatile := hostLayout(b)
	n := newNodeFrom(b, runc, "", "", volatile)
	var base *node
	if dir := os.Getenv("MUXFLOW_BASE_BUILD"); dir != "" {
		base = newNodeFrom(b, runc, "", dir, volatile)
	}
	rootfs := busyboxRootfs(b, n.disk)
	runcRoot := filepath.Join(n.dir, "runc-root")
	plainBundle := filepath.Join(n.dir, "plain")
	gpuBundle := filepath.Join(n.dir, "gpu")
	must(b, os.MkdirAll(plainBundle, 0o755))
	must(b, os.MkdirAll(gpuBundle, 0o755))
	writeSpec(b, plainBundle, rootfs, []string{"/bin/true"}, nil, nil)
	gpuSpec := writeSpec(b, gpuBundle, rootfs, []string{"/bin/true"}, []string{"NVIDIA_VISIBLE_DEVICES=0"}, map[string]string{"muxflow.io/class": "offline"})

	seq := 0
	// run returns the wall time and the CPU time of the whole tree the command ran (the
	// wrapper, runc, the hooks and the container: wait4 counts reaped descendants). CPU time
	// is reported too because wall time on a shared, loaded machine is mostly queueing.
	run := func(bin, bundle string) (time.Duration, time.Duration) {
		seq++
		cmd := exec.Command(bin, "--root", runcRoot, "run", "--bundle", bundle, fmt.Sprintf("bench-%d", seq))
		policy := n.policy
		if base != nil && bin == base.runtime {
			policy = base.policy
		}
		cmd.Env = append(os.Environ(), "MUXFLOW_POLICY="+policy)
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s run %s: %v\n%s", bin, bundle, err, out)
		}
		wall := time.Since(start)
		return wall, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	resetGPU := func() { must(b, os.WriteFile(filepath.Join(gpuBundle, "config.json"), gpuSpec, 0o644)) }
	// Warm the page cache and muxd's connection handling once.
	run(runc, plainBundle)
	run(n.runtime, plainBundle)
	resetGPU()
	run(n.runtime, gpuBundle)
	gpuBins := []string{runc, n.runtime}
	if base != nil {
		resetGPU()
		run(base.runtime, gpuBundle)
		gpuBins = append(gpuBins, base.runtime)
	}

	var plain, wrapped, gpuPlain, gpuWrapped, gpuBase []time.Duration
	var cpuPlain, cpuWrapped, cpuGPUPlain, cpuGPUWrapped, cpuGPUBase []time.Duration
	rounds := max(b.N, minRounds)
	// muxd's own CPU over all rounds (the runs' CPU does not include it): per GPU start,
	// this node's muxd serves only its own runs.
	muxd0 := procCPU(b, n.muxd.Process.Pid)
	var baseMuxd0 time.Duration
	if base != nil {
		baseMuxd0 = procCPU(b, base.muxd.Process.Pid)
	}
	b.ResetTimer()
	for i := range rounds {
		first, second := runc, n.runtime
		if i%2 == 1 {
			first, second = second, first
		}
		for _, bin := range []string{first, second} {
			d, c := run(bin, plainBundle)
			if bin == runc {
				plain, cpuPlain = append(plain, d), append(cpuPlain, c)
			} else {
				wrapped, cpuWrapped = append(wrapped, d), append(cpuWrapped, c)
			}
		}
		for k := range gpuBins {
			bin := gpuBins[(i+k)%len(gpuBins)]
			resetGPU()
			d, c := run(bin, gpuBundle)
			switch bin {
			case runc:
				gpuPlain, cpuGPUPlain = append(gpuPlain, d), append(cpuGPUPlain, c)
			case n.runtime:
				gpuWrapped, cpuGPUWrapped = append(gpuWrapped, d), append(cpuGPUWrapped, c)
			default:
				gpuBase, cpuGPUBase = append(gpuBase, d), append(cpuGPUBase, c)
			}
		}
	}
	b.StopTimer()
	for _, nd := range []*node{n, base} {
		if nd == nil {
			continue
		}
		waitFor(b, 10*time.Second, "muxd to unregister every exited container", func() bool {
			cs, err := nd.client.Containers(b.Context())
			return err == nil && len(cs) == 0
		})
	}
	// After the waits: muxd unregisters an exited container exitGrace after its exit.
	muxdCPU := float64(procCPU(b, n.muxd.Process.Pid)-muxd0) / float64(rounds) / 1e6
	var baseMuxdCPU float64
	if base != nil {
		baseMuxdCPU = float64(procCPU(b, base.muxd.Process.Pid)-baseMuxd0) / float64(rounds) / 1e6
	}
	ms := func(ds []time.Duration) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[len(s)/2]) / 1e6
	}
	b.ReportMetric(ms(plain), "runc-ms")
	b.ReportMetric(ms(wrapped), "muxflow-ms")
	b.ReportMetric(ms(wrapped)-ms(plain), "nongpu-delta-ms")
	b.ReportMetric(ms(gpuPlain), "gpu-runc-ms")
	b.ReportMetric(ms(gpuWrapped), "gpu-muxflow-ms")
	b.ReportMetric(ms(gpuWrapped)-ms(gpuPlain), "gpu-delta-ms")
	// Paired deltas (each round's wrapped run minus its plain run) cancel slow drifts in
	// machine load that the difference of two medians does not.
	paired := func(a, b []time.Duration) []time.Duration {
		d := make([]time.Duration, len(a))
		for i := range a {
			d[i] = a[i] - b[i]
		}
		return d
	}
	b.ReportMetric(ms(paired(wrapped, plain)), "nongpu-paired-delta-ms")
	b.ReportMetric(ms(paired(gpuWrapped, gpuPlain)), "gpu-paired-delta-ms")
	b.Logf("median paired deltas: non-GPU %+.1f ms wall, %+.1f ms CPU; GPU %+.1f ms wall, %+.1f ms CPU",
		ms(paired(wrapped, plain)), ms(paired(cpuWrapped, cpuPlain)), ms(paired(gpuWrapped, gpuPlain)), ms(paired(cpuGPUWrapped, cpuGPUPlain)))
	b.ReportMetric(ms(cpuWrapped)-ms(cpuPlain), "nongpu-cpu-delta-ms")
	b.ReportMetric(ms(cpuGPUWrapped)-ms(cpuGPUPlain), "gpu-cpu-delta-ms")
	b.Logf("CPU medians: non-GPU runc %.1f ms, muxflow-runtime %.1f ms (%+.1f); GPU runc %.1f ms, muxflow-runtime %.1f ms (%+.1f)",
		ms(cpuPlain), ms(cpuWrapped), ms(cpuWrapped)-ms(cpuPlain), ms(cpuGPUPlain), ms(cpuGPUWrapped), ms(cpuGPUWrapped)-ms(cpuGPUPlain))
	b.ReportMetric(muxdCPU, "muxd-cpu-ms/gpu-start")
	if base != nil {
		fmt.Printf("muxd CPU per GPU start (mean over the rounds, 10 ms ticks): this build %.2f ms, base build %.2f ms\n", muxdCPU, baseMuxdCPU)
		b.ReportMetric(ms(paired(cpuGPUBase, cpuGPUPlain)), "gpu-base-paired-cpu-delta-ms")
		b.ReportMetric(ms(paired(gpuBase, gpuPlain)), "gpu-base-paired-delta-ms")
		b.ReportMetric(ms(paired(cpuGPUWrapped, cpuGPUPlain)), "gpu-paired-cpu-delta-ms")
		fmt.Printf("GPU, %d rounds, medians (ms): runc %.1f wall %.1f CPU; this build %.1f wall %.1f CPU; base build %.1f wall %.1f CPU\n"+
			"  paired deltas over runc: this build %+.1f wall %+.1f CPU; base build %+.1f wall %+.1f CPU; this build - base %+.1f wall %+.1f CPU\n",
			rounds, ms(gpuPlain), ms(cpuGPUPlain), ms(gpuWrapped), ms(cpuGPUWrapped), ms(gpuBase), ms(cpuGPUBase),
			ms(paired(gpuWrapped, gpuPlain)), ms(paired(cpuGPUWrapped, cpuGPUPlain)),
			ms(paired(gpuBase, gpuPlain)), ms(paired(cpuGPUBase, cpuGPUPlain)),
			ms(paired(gpuWrapped, gpuBase)), ms(paired(cpuGPUWrapped, cpuGPUBase)))
	}
	b.Logf("%d rounds, medians: non-GPU runc %.1f ms, muxflow-runtime %.1f ms (%+.1f); GPU runc %.1f ms, muxflow-runtime %.1f ms (%+.1f)",
		rounds, ms(plain), ms(wrapped), ms(wrapped)-ms(plain), ms(gpuPlain), ms(gpuWrapped), ms(gpuWrapped)-ms(gpuPlain))
}
