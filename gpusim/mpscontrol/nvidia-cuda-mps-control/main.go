// Command nvidia-cuda-mps-control is gpusim's fake MPS control tool. It is
// built by gpusim/Makefile into build/gpusim/bin (not build/bin), so that it
// only shadows the real tool where a test puts that directory on PATH.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/muxflow/muxflow/gpusim/mpscontrol"
)

func main() {
	if err := mpscontrol.Run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
