package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/muxflow/muxflow/gpusim/nvmlsim"
	"github.com/muxflow/muxflow/gpusim/simclient"
	"github.com/muxflow/muxflow/monitor"
)

// benchNVML counts the monitor's NVML calls per GPU per sample on a gpusim node of 8
// H100s, for its schedule (slow metrics once a second) against reading everything every
// period (the schedule before issue 19), each polled at 10 Hz for the same time.
func benchNVML(ctx context.Context) error {
	sim, err := simclient.Start(ctx, simclient.Options{GPUs: "h100x8", Stderr: io.Discard, Args: []string{"-log-level", "warn"}})
	if err != nil {
		return fmt.Errorf("start gpusimd: %w", err)
	}
	defer sim.Stop()
	lib := nvmlsim.New(sim.Socket)
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvmlsim: %v", ret)
	}
	defer lib.Shutdown()
	const polls = 30
	fmt.Printf("\n== NVML calls per GPU per sample: monitor on gpusim h100x8, %d polls at 10 Hz (steady state, after a 1 s warm-up)\n", polls)
	fmt.Printf("%-40s %14s %16s\n", "schedule", "calls/GPU/poll", "monitor CPU/poll")
	for _, sc := range []struct {
		name string
		slow time.Duration
	}{{"every metric every period (baseline)", 0}, {"decision metrics 100 ms, slow ones 1 s", time.Second}} {
		var c monitor.CallCounter
		cfg := monitor.DefaultConfig()
		cfg.SlowPeriod = sc.slow
		m, err := monitor.New(c.Wrap(lib), cfg, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			return err
		}
		for range 10 {
			m.Poll()
			time.Sleep(cfg.Period)
		}
		c.Reset()
		var cpu float64
		for range polls {
			c0 := cpuSeconds()
			m.Poll()
			cpu += cpuSeconds() - c0
			time.Sleep(cfg.Period)
		}
		m.Close()
		fmt.Printf("%-40s %14.2f %13.0f µs\n", sc.name, float64(c.Total())/polls/8, cpu/polls*1e6)
	}
	return faultReaction(ctx, sim, lib)
}

// faultReaction measures how long an Xid takes from gpusimd to the monitor's fault event
// when the monitor runs as in muxd: NVML error events in their own goroutine, sampling
// every period (on gpusim the event set's Xids come with the samples' readings).
func faultReaction(ctx context.Context, sim *simclient.Daemon, lib nvml.Interface) error {
	const faults = 10
	cfg := monitor.DefaultConfig()
	m, err := monitor.New(lib, cfg, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	defer m.Close()
	events, cancelSub := m.Subscribe(64)
	defer cancelSub()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(rctx) }()
	defer func() { stop(); <-done }()
	time.Sleep(time.Second)
	var lat []float64
	for i := range faults {
		// Xid 13 (an application's fault): informational for the GPU, no state held.
		time.Sleep(time.Duration(137+i*53) * time.Millisecond) // at varied phases of the period
		t0 := time.Now()
		if err := sim.InjectFault(ctx, simclient.Fault{Device: i % 8, Xid: 13}); err != nil {
			return err
		}
		timeout := time.After(2 * time.Second)
	wait:
		for {
			select {
			case e := <-events:
				if e.Kind == monitor.EventFault && e.GPU == i%8 {
					lat = append(lat, float64(time.Since(t0).Microseconds())/1000)
					break wait
				}
			case <-timeout:
				return fmt.Errorf("no fault event within 2 s of Xid 13 on GPU %d", i%8)
			}
		}
	}
	fmt.Printf("\n== GPU fault reaction: Xid injected into gpusimd -> monitor fault event (%d faults, 100 ms sampling)\n", faults)
	fmt.Printf("median %.0f ms, max %.0f ms; runs %s\n", median(lat), slices.Max(lat), fmtAll(lat, "%.0f"))
	return nil
}
