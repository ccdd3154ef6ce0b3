// Command muxflow-device-plugin advertises the node's GPUs to kubelet (see package
// deviceplugin).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/muxflow/muxflow/deviceplugin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := deviceplugin.Run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "muxflow-device-plugin:", err)
		os.Exit(1)
	}
}
