// Package monitor is SysMonitor, the GPU-level half of muxflow's two-level
// protection (docs/architecture.md).
//
// It samples every GPU through go-nvml's nvml.Interface — the real NVML or
// gpusim's adapter, the same code — and feeds each sample, plus the GPU's
// Xid/ECC error events, into a per-GPU health state machine:
//
//	Healthy    offline work runs at its allocated share
//	Throttled  a soft threshold was crossed: cut offline work to its floor
//	Unhealthy  a hard threshold was crossed, or Throttled lasted too long:
//	           evict offline work and admit none
//	Faulted    an error event (critical Xid, GPU lost): error handling runs
//	Recovering cool-down after Unhealthy/Faulted until the GPU is stable
//
// The state machine (Machine) is a pure value: it takes an Input (a sample,
// error events, the time) and returns the transition it made, so its
// behaviour is table-tested without goroutines or NVML. Monitor wraps the
// sampler and the machines, keeps the last sample and state of every GPU for
// Snapshot, a bounded log of transitions for Events, notifies subscribers,
// and exports Prometheus metrics through Collector.
//
// The caller owns NVML's lifetime: call Init before New and Shutdown after
// Run has returned.
package monitor
