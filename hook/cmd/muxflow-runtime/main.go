// Command muxflow-runtime is an OCI runtime that wires GPU containers into muxflow (MPS,
// libxcuda, muxd registration) and hands every command to the real runtime (runc or crun).
// Configure containerd or Docker to use it with `muxctl runtime configure`.
package main

import (
	"os"

	"github.com/muxflow/muxflow/hook/front"
)

func main() {
	// On success the process has become the real runtime (or muxflow-hook's wrapper).
	if err := front.Run(os.Args[1:]); err != nil {
		os.Exit(1) // already reported on stderr and in the runtime's log
	}
}
