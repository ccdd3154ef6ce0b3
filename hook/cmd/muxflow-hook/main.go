// Command muxflow-hook is the OCI hook muxflow-runtime adds to GPU containers: it reports
// the container's host pid to muxd at createRuntime and unregisters it at poststop.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/muxflow/muxflow/hook/ocihook"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := ocihook.Run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
