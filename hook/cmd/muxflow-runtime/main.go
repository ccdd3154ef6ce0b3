// Command muxflow-runtime is an OCI runtime that wires GPU containers into muxflow (MPS,
// libxcuda, muxd registration) and hands every command to the real runtime (runc or crun).
// Configure containerd or Docker to use it with `muxctl runtime configure`.
package main

import (
	"context"
	"os"

	"github.com/muxflow/muxflow/hook/wrapper"
)

func main() {
	// No signal handling: on success the process becomes the real runtime, which handles
	// its own signals; the wrapper's own work is bounded by the policy's hook.timeout.
	if err := wrapper.Run(context.Background(), os.Args[1:]); err != nil {
		os.Exit(1) // the error is already logged where the runtime logs and on stderr
	}
}
