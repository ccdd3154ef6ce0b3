package simclient_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/muxflow/muxflow/gpusim/simclient"
)

// BenchmarkLaunchFourProcesses runs four processes that each launch tiny
// kernels as fast as the fake driver lets them, under one gpusimd, and
// reports the sustained total launch rate (launches until all completed);
// then one process alone for the median cost of one asynchronous
// cuLaunchKernel, the median cuStreamSynchronize round trip on an idle
// stream and the median cuEventQuery of a completed event (answered from the
// completions gpusimd reported, no round trip), the median cuEventQuery of a pending
// event right after cuEventSynchronize on an earlier one (a launch gate waiting for
// its oldest launch and polling the later ones: no round trip either), and how late
// after a 300 µs kernel ends a cuStreamSynchronize waiting for it returns. Targets:
// >= 50000 launches/s, <= 5us, <= 50us, <= 5us, <= 5us, <= 100us.
func BenchmarkLaunchFourProcesses(b *testing.B) {
	if _, err := simclient.Paths(); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := simclient.Start(ctx, simclient.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Stop()
	bld, _ := simclient.Build()
	bench := filepath.Join(bld, "gpusim", "test", "launchbench")
	const perProc = 50000
	var rates []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		type res struct {
			Launches float64 `json:"launches"`
		}
		out := make([]res, 4)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		start := time.Now()
		for p := 0; p < 4; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := exec.Command(bench, "50000")
				cmd.Env = append(os.Environ(), d.Env()...)
				o, err := cmd.Output()
				if err == nil {
					err = json.Unmarshal(o, &out[p])
				}
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if firstErr != nil {
			b.Fatal(firstErr)
		}
		el := time.Since(start).Seconds()
		rates = append(rates, 4*perProc/el)
	}
	b.StopTimer()
	var launchUs, syncUs, queryUs, pendingUs, lateUs []float64
	for i := 0; i < 3; i++ {
		cmd := exec.Command(bench, "20000")
		cmd.Env = append(os.Environ(), d.Env()...)
		o, err := cmd.Output()
		var r struct {
			LaunchMed  float64 `json:"launch_median_us"`
			SyncMed    float64 `json:"sync_median_us"`
			QueryMed   float64 `json:"event_query_median_us"`
			PendingMed float64 `json:"pending_query_median_us"`
			Pending    int     `json:"pending_queries"`
			LateMed    float64 `json:"sync_after_kernel_median_us"`
		}
		if err == nil {
			err = json.Unmarshal(o, &r)
		}
		if err != nil {
			b.Fatal(err)
		}
		if r.Pending == 0 {
			// every "pending" query found its event complete: the figure would be that
			// of a completed event's query, not of the case it is there for
			b.Fatal("launchbench: no query after an event sync found the later event still pending")
		}
		launchUs = append(launchUs, r.LaunchMed)
		syncUs = append(syncUs, r.SyncMed)
		queryUs = append(queryUs, r.QueryMed)
		pendingUs = append(pendingUs, r.PendingMed)
		lateUs = append(lateUs, r.LateMed)
	}
	b.ReportMetric(median(rates), "launches/s")
	b.ReportMetric(median(launchUs), "launch-us")
	b.ReportMetric(median(syncUs), "sync-us")
	b.ReportMetric(median(queryUs), "event-query-us")
	b.ReportMetric(median(pendingUs), "pending-query-us")
	b.ReportMetric(median(lateUs), "sync-after-kernel-us")
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	return v[len(v)/2]
}
