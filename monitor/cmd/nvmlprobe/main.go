// Command nvmlprobe runs SysMonitor against the real NVML for a while and
// prints the sampled metrics, the health it derived and a PASS/FAIL verdict.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/muxflow/muxflow/monitor/probe"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := probe.Run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "nvmlprobe:", err)
		os.Exit(1)
	}
}
