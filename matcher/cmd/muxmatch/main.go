// Command muxmatch pairs offline jobs with online GPUs across a cluster; see
// `muxmatch help` and matcher/docs/.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/muxflow/muxflow/matcher/muxmatch"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := muxmatch.Run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "muxmatch:", err)
		os.Exit(1)
	}
}
