// Command gpusim-calibrate plays gpusim's calibration points (published
// co-location measurements) on the model and prints published ratio, gpusim
// ratio and error for each; it exits 1 when any point is off by more than
// 20%. See docs/gpusim-calibration.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/muxflow/muxflow/gpusim/calibration"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gpusim-calibrate:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("gpusim-calibrate", flag.ContinueOnError)
	short := fs.Bool("short", false, "only the quick subset (what make test runs)")
	only := fs.String("only", "", "comma-separated point ids to run")
	verbose := fs.Bool("v", false, "print each run as it starts")
	real := fs.String("real", "", "replay the points on gpusim's model of this GPU and compare with what that real GPU measured (h200)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var pts []calibration.Point
	for _, p := range calibration.Points() {
		if (*short && !p.Short) || (*only != "" && !strings.Contains(","+*only+",", ","+p.ID+",")) {
			continue
		}
		pts = append(pts, p)
	}
	if len(pts) == 0 {
		return fmt.Errorf("no point matches")
	}
	if *real != "" {
		var err error
		if pts, err = calibration.OnRealGPU(*real, pts); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var progress func(string)
	if *verbose {
		progress = func(s string) { fmt.Fprintln(os.Stderr, "running", s) }
	}
	rs, err := calibration.Run(ctx, pts, progress)
	if err != nil {
		return err
	}
	if calibration.WriteTable(os.Stdout, rs) > 0 {
		os.Exit(1)
	}
	return nil
}
