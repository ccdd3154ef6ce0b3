package sim

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// busyJob is one process of BenchmarkBusyNode: iterations of kernels, a sync after each.
type busyJob struct {
	kernels  int
	blockUs  float64
	bigShare float64 // share of GPU-filling kernels (two waves on every SM)
	bw       float64
	every    time.Duration // online: one iteration per period; offline: back to back
}

// BenchmarkBusyNode is the model's cost on a busy node, in real time: a service of
// short 264-block kernels beside six offline loops of mostly small kernels, all MPS
// clients of one H100 (the shape of the h100-six probe that stalled gpusimd). Each
// iteration runs one second and reports the CPU the whole process spent per model
// event, the events per second, and the simulator's stalls (catch-ups of 2 ms or more).
func BenchmarkBusyNode(b *testing.B) {
	jobs := []busyJob{
		{kernels: 4, blockUs: 150, bw: 0.3, every: 3 * time.Millisecond},
		{kernels: 10, blockUs: 500, bigShare: 0.5, bw: 0.4},
		{kernels: 20, blockUs: 100, bigShare: 0.2, bw: 0.7},
		{kernels: 5, blockUs: 800, bigShare: 0.8, bw: 0.2},
		{kernels: 30, blockUs: 40, bigShare: 0.1, bw: 0.3},
		{kernels: 10, blockUs: 300, bigShare: 0.5, bw: 0.5},
		{kernels: 4, blockUs: 250, bw: 0.9},
	}
	var events, stalls uint64
	var cpu time.Duration
	for range b.N {
		e, st, c := busyNodeSecond(b, jobs)
		events, stalls, cpu = events+e, stalls+st, cpu+c
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(max(events, 1)), "cpu-ns/event")
	b.ReportMetric(float64(events)/float64(b.N), "events/s")
	b.ReportMetric(float64(stalls)/float64(b.N), "stalls/s")
}

func busyNodeSecond(b *testing.B, jobs []busyJob) (events, stalls uint64, cpu time.Duration) {
	p, _ := LookupProfile("h100")
	s, err := New(Config{Devices: []Profile{p}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.RegisterServer(999, 0, 100, nil); err != nil {
		b.Fatal(err)
	}
	big := uint32(p.SMs * 8 * 2)
	stop := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	start := cpuTime()
	for i, j := range jobs {
		c := s.Connect(100+i, 0, nil)
		mod := fmt.Sprintf("gpusim-module 1\nfunc k block_us=%g bw=%g\n", j.blockUs, j.bw)
		if c.CreateContext(1, 0, 100, 999, 0, 0) != Success || c.LoadModule(1, []byte(mod)) != Success ||
			c.GetFunction(1, 10, "k") != Success {
			b.Fatal("cannot set up a process")
		}
		nbig := int(j.bigShare*float64(j.kernels) + 0.5)
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan Result, 1)
			for next := time.Now(); time.Now().Before(stop); {
				for k := range j.kernels {
					grid := uint32(64)
					if j.every > 0 {
						grid = 264
					} else if k < nbig {
						grid = big
					}
					c.Launch(100, 10, [3]uint32{grid, 1, 1}, [3]uint32{256, 1, 1})
				}
				c.Sync(SyncStream, 100, func(r Result) { done <- r })
				<-done
				if j.every > 0 {
					next = next.Add(j.every)
					time.Sleep(time.Until(next))
				}
			}
		}()
	}
	wg.Wait()
	cpu = cpuTime() - start
	st, _ := s.Stats(0)
	s.mu.Lock()
	events = s.devs[0].events
	s.mu.Unlock()
	return events, uint64(st.Stalls), cpu
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
