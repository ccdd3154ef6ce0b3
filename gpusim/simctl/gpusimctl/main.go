// Command gpusimctl inspects and pokes a running gpusimd (see gpusim/README.md).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/muxflow/muxflow/gpusim/simctl"
)

func main() {
	if err := simctl.Run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gpusimctl:", err)
		os.Exit(1)
	}
}
