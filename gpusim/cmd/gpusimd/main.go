// Command gpusimd simulates GPUs for the fake libcuda, the fake MPS control
// tool and the NVML adapter. See gpusim/README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/muxflow/muxflow/gpusim/simd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := simd.Run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gpusimd:", err)
		os.Exit(1)
	}
}
