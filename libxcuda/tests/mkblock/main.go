// Command mkblock creates a libxcuda control block with unlimited limits,
// for the C benchmarks (libxcuda/tests/bench.sh).
package main

import (
	"fmt"
	"os"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: mkblock DIR")
		os.Exit(2)
	}
	b, err := ctlblock.Create(os.Args[1], ctlblock.Unlimited())
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkblock:", err)
		os.Exit(1)
	}
	b.Close()
}
