// Command muxctl operates a muxflow node; see muxctl help.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/muxflow/muxflow/muxd/muxctl"
)

func main() {
	err := muxctl.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, muxctl.ErrUsage):
		fmt.Fprintln(os.Stderr, "muxctl:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "muxctl:", err)
		os.Exit(1)
	}
}
