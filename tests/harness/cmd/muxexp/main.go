// Command muxexp runs muxflow's experiment scenarios on gpusim under each sharing
// strategy and prints the comparison table (see package tests/harness).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/muxflow/muxflow/tests/harness"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := harness.Run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "muxexp:", err)
		os.Exit(1)
	}
}
