// Command muxflow-wrapper is the Go half of muxflow-runtime: muxflow-runtime execs it, with
// the runtime's command line unchanged, for every case it cannot settle on its own (muxd
// not running, a policy it cannot read with certainty, crun's --config). It is not meant to
// be run by hand.
package main

import (
	"context"
	"os"

	"github.com/muxflow/muxflow/hook/wrapper"
)

func main() {
	// No signal handling: on success this process becomes the real runtime, which handles
	// its own; the wrapper's own work is bounded by the policy's hook.timeout.
	if err := wrapper.Run(context.Background(), os.Args[1:]); err != nil {
		os.Exit(1) // already logged where the runtime logs, and on stderr
	}
}
