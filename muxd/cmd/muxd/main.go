// Command muxd is the muxflow node daemon; see muxd --help.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/muxflow/muxflow/muxd/daemon"
)

func main() {
	tuneRuntime()
	dropRelocations()
	if err := daemon.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "muxd:", err)
		os.Exit(1)
	}
}
