// Command muxflow-hook is the heavier half of muxflow's OCI integration. As an OCI hook
// (added by the runtime to GPU containers) it reports the container's host pid to muxd at
// createRuntime and unregisters it at poststop. As `muxflow-hook runtime ARGS` it is the
// full runtime wrapper that muxflow-runtime hands GPU containers to.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/muxflow/muxflow/hook/front"
	"github.com/muxflow/muxflow/hook/ocihook"
	"github.com/muxflow/muxflow/hook/wrapper"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == front.WrapperCommand {
		// No signal handling: on success this process becomes the real runtime, which
		// handles its own; the wrapper's own work is bounded by the policy's hook.timeout.
		if err := wrapper.Run(context.Background(), os.Args[2:]); err != nil {
			os.Exit(1) // already logged where the runtime logs, and on stderr
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := ocihook.Run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
