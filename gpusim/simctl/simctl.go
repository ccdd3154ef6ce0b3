// Package simctl is gpusimctl, the command-line tool for a running gpusimd:
// read device and process figures, inject faults, hang a GPU, set a power
// limit, list Xids. It is what the demo script and humans use.
package simctl

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/muxflow/muxflow/gpusim/simclient"
	"github.com/muxflow/muxflow/gpusim/simd"
)

const usage = `usage: gpusimctl [-socket PATH] COMMAND
commands:
  stats                     devices and processes, as a table
  json                      the same, as JSON
  counters DEV              cumulative "busy_ns sm_ns sms" of device DEV (for scripts)
  fault DEV XID [PID]       inject an Xid (fails PID's contexts; 48 and 79 fail all)
  hang DEV on|off           freeze or thaw a device
  reset DEV                 reset a device (contexts on it fail; thawed, not lost)
  power-limit DEV WATTS     set the power limit (0 restores the default)
  xids DEV                  list the device's Xid events`

// Run is gpusimctl's main.
func Run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("gpusimctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	def := os.Getenv("GPUSIM_SOCKET")
	if def == "" {
		def = simd.DefaultSocket
	}
	sock := fs.String("socket", def, "gpusimd socket (env GPUSIM_SOCKET)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w\n%s", err, usage)
	}
	a := fs.Args()
	if len(a) == 0 {
		return fmt.Errorf("no command\n%s", usage)
	}
	c := simclient.New(*sock)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	dev := func(i int) (int, error) {
		if len(a) <= i {
			return 0, fmt.Errorf("%s needs a device index\n%s", a[0], usage)
		}
		d, err := strconv.Atoi(a[i])
		if err != nil || d < 0 {
			return 0, fmt.Errorf("device %q is not an index", a[i])
		}
		return d, nil
	}
	switch a[0] {
	case "stats", "json":
		st, err := c.Stats(ctx)
		if err != nil {
			return err
		}
		if a[0] == "json" {
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			return enc.Encode(st)
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "GPU\tNAME\tUTIL\tSM ACT\tSM MHz\tPOWER\tMEM USED\tPROCESSES")
		for _, d := range st {
			fmt.Fprintf(tw, "%d\t%s\t%.0f%%\t%.2f\t%d/%d\t%.0f/%.0f W\t%.1f/%.1f GiB\t%d\n", d.Index, d.Name, d.Util,
				d.SMActivity, d.SMClockMHz, d.MaxSMClockMHz, d.PowerW, d.PowerLimitW,
				float64(d.MemUsed)/(1<<30), float64(d.MemTotal)/(1<<30), len(d.Processes))
			for _, p := range d.Processes {
				fmt.Fprintf(tw, "  pid %d\t\t%.0f%%\t%.2f\t\t\t%.1f GiB\tlaunches %d mps=%v\n", p.PID, p.Util,
					p.SMActivity, float64(p.MemUsed)/(1<<30), p.Launches, p.MPS)
			}
		}
		return tw.Flush()
	case "counters":
		d, err := dev(1)
		if err != nil {
			return err
		}
		st, err := c.Stats(ctx)
		if err != nil {
			return err
		}
		if d >= len(st) {
			return fmt.Errorf("device %d does not exist", d)
		}
		fmt.Fprintf(out, "%.0f %.0f %d\n", st[d].BusyNs, st[d].SMNs, st[d].SMs)
		return nil
	case "fault":
		d, err := dev(1)
		if err != nil {
			return err
		}
		if len(a) < 3 {
			return fmt.Errorf("fault needs an Xid\n%s", usage)
		}
		x, err := strconv.Atoi(a[2])
		if err != nil {
			return fmt.Errorf("xid %q is not a number", a[2])
		}
		pid := 0
		if len(a) > 3 {
			if pid, err = strconv.Atoi(a[3]); err != nil {
				return fmt.Errorf("pid %q is not a number", a[3])
			}
		}
		return c.InjectFault(ctx, simclient.Fault{Device: d, Xid: x, PID: pid, Detail: "injected by gpusimctl"})
	case "hang":
		d, err := dev(1)
		if err != nil {
			return err
		}
		if len(a) < 3 || (a[2] != "on" && a[2] != "off") {
			return fmt.Errorf("hang needs on or off\n%s", usage)
		}
		return c.SetHung(ctx, d, a[2] == "on")
	case "reset":
		d, err := dev(1)
		if err != nil {
			return err
		}
		return c.ResetDevice(ctx, d)
	case "power-limit":
		d, err := dev(1)
		if err != nil {
			return err
		}
		if len(a) < 3 {
			return fmt.Errorf("power-limit needs watts\n%s", usage)
		}
		w, err := strconv.ParseFloat(a[2], 64)
		if err != nil {
			return fmt.Errorf("watts %q is not a number", a[2])
		}
		return c.SetPowerLimit(ctx, d, w)
	case "xids":
		d, err := dev(1)
		if err != nil {
			return err
		}
		xs, err := c.Xids(ctx, d, 0)
		if err != nil {
			return err
		}
		for _, x := range xs {
			fmt.Fprintf(out, "%s gpu %d xid %d pid %d %s\n", x.Time.Format(time.RFC3339Nano), x.Device, x.Xid, x.PID, x.Detail)
		}
		return nil
	}
	return fmt.Errorf("unknown command %q\n%s", a[0], usage)
}
