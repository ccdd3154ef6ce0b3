package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkGPUStartParts splits a GPU container's start through muxflow-runtime into its
// parts, each measured on its own and all interleaved round by round (the order rotates),
// so that machine load hits them alike:
//
//   - runc: `runc run` of the GPU bundle as written (no muxflow);
//   - runc+wiring: `runc run` of the spec muxd wired for it (its bind mounts of the MPS
//     pipe directory, libxcuda, the control block, the signal page and ld.so.preload, and
//     its variables), without muxflow-runtime: what the wiring costs runc;
//   - stub: a runtime that exits at once (/bin/true), exec'd straight with runc's command
//     line: the floor for the next one;
//   - front: muxflow-runtime on the GPU bundle with /bin/true as its runtime: exec, policy
//     scan, spec scan, muxd's create request (muxd's own work is in its wall time, not in
//     its CPU), config.json replaced, the pid reporter forked;
//   - muxflow: the whole start through muxflow-runtime.
//
// CPU is the tree's (wait4), muxd CPU is muxd's own (utime+stime from /proc) across the
// run and until muxd has forgotten the container again, a mean (it comes in 10 ms ticks).
// The rest in ms, medians.
func BenchmarkGPUStartParts(b *testing.B) {
	runc := lookTool(b, "runc")
	n := newNodeFrom(b, runc, "", "", hostLayout(b))
	rootfs := busyboxRootfs(b, n.disk)
	runcRoot := filepath.Join(n.dir, "runc-root")
	gpuBundle := filepath.Join(n.dir, "gpu")
	wiredBundle := filepath.Join(n.dir, "wired")
	must(b, os.MkdirAll(gpuBundle, 0o755))
	must(b, os.MkdirAll(wiredBundle, 0o755))
	gpuSpec := writeSpec(b, gpuBundle, rootfs, []string{"/bin/true"}, []string{"NVIDIA_VISIBLE_DEVICES=0"}, map[string]string{"muxflow.io/class": "offline"})
	writeSpec(b, wiredBundle, rootfs, []string{"/bin/true"}, nil, nil)

	// The wired spec, from muxd's create endpoint; the container stays registered (never
	// started) so that its control block, which the spec mounts, exists.
	wired, err := n.client.CreateForRuntime(b.Context(), "parts-wired", wiredBundle, "", gpuSpec)
	must(b, err)
	if wired == nil {
		b.Fatal("muxd did not wire the GPU spec")
	}
	must(b, os.WriteFile(filepath.Join(wiredBundle, "config.json"), wired, 0o644))

	truePath, err := exec.LookPath("true")
	must(b, err)
	stubPolicy := filepath.Join(n.dir, "policy-stub.toml")
	editPolicy(b, n.policy, stubPolicy, fmt.Sprintf("runtime = %q", runc), fmt.Sprintf("runtime = %q", truePath))

	muxdPid := n.muxd.Process.Pid
	regDir := filepath.Join(n.disk, "state", "containers")
	seq := 0
	type sample struct{ wall, cpu, muxd time.Duration }
	run := func(bin, policyFile, bundle string) sample {
		seq++
		id := fmt.Sprintf("parts-%d", seq)
		m0 := procCPU(b, muxdPid)
		cmd := exec.Command(bin, "--root", runcRoot, "run", "--bundle", bundle, id)
		cmd.Env = append(os.Environ(), "MUXFLOW_POLICY="+policyFile)
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s run %s: %v\n%s", bin, bundle, err, out)
		}
		wall := time.Since(start)
		// With /bin/true as the runtime, the reporter has muxd forget the container: wait
		// for that, so that its cost is this run's. (A container that ran is forgotten
		// exitGrace after its exit, in a later round: its cost spreads over the others.)
		reg := filepath.Join(regDir, id+".json")
		deadline := time.Now().Add(10 * time.Second)
		for policyFile == stubPolicy {
			if _, err := os.Lstat(reg); os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("muxd did not forget %s", id)
			}
			time.Sleep(time.Millisecond)
		}
		return sample{wall, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), procCPU(b, muxdPid) - m0}
	}
	resetGPU := func() { must(b, os.WriteFile(filepath.Join(gpuBundle, "config.json"), gpuSpec, 0o644)) }
	parts := []struct {
		name string
		do   func() sample
	}{
		{"runc", func() sample { resetGPU(); return run(runc, n.policy, gpuBundle) }},
		{"runc+wiring", func() sample { return run(runc, n.policy, wiredBundle) }},
		{"stub", func() sample { resetGPU(); return run(truePath, n.policy, gpuBundle) }},
		{"front", func() sample { resetGPU(); return run(n.runtime, stubPolicy, gpuBundle) }},
		{"muxflow", func() sample { resetGPU(); return run(n.runtime, n.policy, gpuBundle) }},
	}
	for _, p := range parts { // warm up
		p.do()
	}
	got := make([][]sample, len(parts))
	rounds := max(b.N, minRounds)
	b.ResetTimer()
	for i := range rounds {
		for k := range parts {
			j := (i + k) % len(parts)
			got[j] = append(got[j], parts[j].do())
		}
	}
	b.StopTimer()
	// med is the median in ms of f over a part's samples, or over the rounds' combinations
	// of parts (paired deltas: each round's runs of the parts, so slow drifts in machine
	// load cancel).
	med := func(f func(i int) time.Duration) float64 {
		ds := make([]time.Duration, rounds)
		for i := range rounds {
			ds[i] = f(i)
		}
		slices.Sort(ds)
		return float64(ds[len(ds)/2]) / 1e6
	}
	wall := func(s sample) time.Duration { return s.wall }
	cpu := func(s sample) time.Duration { return s.cpu }
	of := func(j int, f func(sample) time.Duration) float64 {
		return med(func(i int) time.Duration { return f(got[j][i]) })
	}
	// muxd's CPU comes in 10 ms clock ticks: its mean, not its median.
	mean := func(ss []sample) float64 {
		var sum time.Duration
		for _, s := range ss {
			sum += s.muxd
		}
		return float64(sum) / float64(len(ss)) / 1e6
	}
	// Paired deltas: part a's run minus part c's run of the same round.
	paired := func(a, c int, f func(sample) time.Duration) float64 {
		return med(func(i int) time.Duration { return f(got[a][i]) - f(got[c][i]) })
	}
	var out strings.Builder
	fmt.Fprintf(&out, "%d rounds, medians in ms\n%-12s %8s %8s %9s\n", rounds, "part", "wall", "CPU", "muxd CPU (mean)")
	for j, p := range parts {
		fmt.Fprintf(&out, "%-12s %8.1f %8.1f %9.2f\n", p.name, of(j, wall), of(j, cpu), mean(got[j]))
	}
	const runcI, wiredI, stubI, frontI, fullI = 0, 1, 2, 3, 4
	fmt.Fprintf(&out, "paired deltas (wall / CPU):\n")
	for _, d := range []struct {
		what string
		a, c int
	}{
		{"wiring in runc (runc+wiring - runc)", wiredI, runcI},
		{"muxflow-runtime's front (front - stub)", frontI, stubI},
		{"whole (muxflow - runc)", fullI, runcI},
	} {
		fmt.Fprintf(&out, "  %-46s %+6.1f / %+6.1f\n", d.what, paired(d.a, d.c, wall), paired(d.a, d.c, cpu))
	}
	rest := func(f func(sample) time.Duration) float64 {
		return med(func(i int) time.Duration {
			return f(got[fullI][i]) - f(got[wiredI][i]) - f(got[frontI][i]) + f(got[stubI][i])
		})
	}
	fmt.Fprintf(&out, "  %-46s %+6.1f / %+6.1f\n", "rest (muxflow - runc+wiring - front + stub)", rest(wall), rest(cpu))
	fmt.Print(out.String()) // b.Log would be cut to its first lines
	b.ReportMetric(paired(wiredI, runcI, cpu), "wiring-cpu-ms")
	b.ReportMetric(paired(frontI, stubI, wall), "front-wall-ms")
	b.ReportMetric(paired(fullI, runcI, cpu), "gpu-cpu-delta-ms")
	b.ReportMetric(paired(fullI, runcI, wall), "gpu-wall-delta-ms")
	b.ReportMetric(mean(got[fullI]), "muxd-cpu-ms")
}

// procCPU is utime+stime of a process, from /proc/PID/stat.
func procCPU(t testing.TB, pid int) time.Duration {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	must(t, err)
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+2:]))
	// Fields 14 and 15 (utime, stime), counted from the state (field 3).
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond // USER_HZ 100
}
