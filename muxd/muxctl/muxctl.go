// Package muxctl is the operator's command line for a muxflow node: node and container
// status from muxd's API, policy checks, and runtime configuration.
package muxctl

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/muxflow/muxflow/monitor"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/muxd/buildinfo"
	"github.com/muxflow/muxflow/muxd/client"
	"github.com/muxflow/muxflow/muxd/muxctl/runtimeconfig"
	"github.com/muxflow/muxflow/policy"
)

// ErrUsage marks a bad command line (exit status 2).
var ErrUsage = errors.New("usage")

const usage = `muxctl — operate a muxflow node.

Usage:
  muxctl status [-o table|json]            node, GPUs and containers
  muxctl events [-o table|json]            GPU health transitions and faults, and why
  muxctl runtime configure --runtime=containerd|docker|crio [--config PATH] [--dry-run] [--remove]
                         [--set-as-default] [--chain nvidia-container-runtime]
                                           add (or remove) the muxflow runtime in containerd's,
                                           Docker's or CRI-O's configuration; prints the restart
                                           it needs (see muxctl runtime configure --help)
  muxctl policy check FILE                 validate a policy file (exit 1 if invalid)
  muxctl policy show                       the policy muxd runs with
  muxctl policy reload                     make muxd re-read its policy file
  muxctl version                           print the version

Global flags (before the command):
  --policy FILE   the policy muxd runs with, for its [node] socket (default
                  /etc/muxflow/policy.toml; without that file, /run/muxflow/muxd.sock)
  --socket PATH   muxd's API socket; overrides the policy's
  --timeout DUR   bound on each API call (default 5s)
`

// Main runs muxctl with args (without the program name).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("muxctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policyPath := fs.String("policy", policy.DefaultPath, "the policy muxd runs with (for its [node] socket)")
	socket := fs.String("socket", "", "muxd's API socket (default: the policy's [node] socket)")
	timeout := fs.Duration("timeout", 5*time.Second, "bound on each API call")
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	if err := fs.Parse(args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return fmt.Errorf("%w: no command given", ErrUsage)
	}
	policySet := false
	fs.Visit(func(f *flag.Flag) { policySet = policySet || f.Name == "policy" })
	cl := func() (*client.Client, error) {
		sock, err := socketPath(*socket, *policyPath, policySet)
		if err != nil {
			return nil, err
		}
		return client.New(sock, *timeout), nil
	}
	switch rest[0] {
	case "version":
		fmt.Fprintln(stdout, "muxctl", buildinfo.Version)
		return nil
	case "status":
		c, err := cl()
		if err != nil {
			return err
		}
		return status(ctx, c, rest[1:], stdout, stderr)
	case "policy":
		return policyCmd(ctx, cl, rest[1:], stdout)
	case "events":
		c, err := cl()
		if err != nil {
			return err
		}
		return events(ctx, c, rest[1:], stdout, stderr)
	case "runtime":
		if len(rest) < 2 || rest[1] != "configure" {
			return fmt.Errorf("%w: runtime needs the configure command", ErrUsage)
		}
		return runtimeconfig.Configure(rest[2:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fs.Usage()
	return fmt.Errorf("%w: unknown command %q", ErrUsage, rest[0])
}

// socketPath is muxd's API socket: --socket when given, else the policy's [node] socket.
// The default policy file may be missing (muxd then runs with the embedded default); a
// policy named with --policy must load.
func socketPath(socket, policyPath string, policySet bool) (string, error) {
	if socket != "" {
		return socket, nil
	}
	p, err := policy.Load(policyPath)
	if err != nil {
		if !policySet && errors.Is(err, os.ErrNotExist) {
			return api.DefaultSocket, nil
		}
		return "", fmt.Errorf("find muxd's socket: %w (or give --socket)", err)
	}
	return p.Node.Socket, nil
}

func policyCmd(ctx context.Context, cl func() (*client.Client, error), args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: policy needs check FILE, show or reload", ErrUsage)
	}
	switch args[0] {
	case "check":
		if len(args) != 2 {
			return fmt.Errorf("%w: policy check needs exactly one FILE", ErrUsage)
		}
		if _, err := policy.Load(args[1]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: valid\n", args[1])
		return nil
	case "show":
		c, err := cl()
		if err != nil {
			return err
		}
		p, err := c.Policy(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "# source: %s, loaded %s\n%s", p.Source, p.Loaded.Format(time.RFC3339), p.TOML)
		return nil
	case "reload":
		c, err := cl()
		if err != nil {
			return err
		}
		p, err := c.ReloadPolicy(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "policy reloaded from %s\n", p.Source)
		return nil
	}
	return fmt.Errorf("%w: unknown policy command %q", ErrUsage, args[0])
}

// Status is what `muxctl status -o json` prints.
type Status struct {
	Node       api.NodeInfo    `json:"node"`
	GPUs       []api.GPU       `json:"gpus"`
	Containers []api.Container `json:"containers"`
}

func status(ctx context.Context, c *client.Client, args []string, stdout, stderr io.Writer) error {
	asJSON, err := outputFormat("status", args, stderr)
	if err != nil {
		return err
	}
	var st Status
	if st.Node, err = c.Node(ctx); err != nil {
		return err
	}
	if st.GPUs, err = c.GPUs(ctx); err != nil {
		return err
	}
	if st.Containers, err = c.Containers(ctx); err != nil {
		return err
	}
	if asJSON {
		return writeJSON(stdout, st)
	}
	return writeStatus(stdout, st, time.Now())
}

// writeStatus prints the status tables: per GPU its offline ceiling (the budget its
// offline containers split), the online demand estimate and why the ceiling last changed;
// per container its effective ceiling and what binds it.
func writeStatus(stdout io.Writer, st Status, now time.Time) error {
	n := st.Node
	fmt.Fprintf(stdout, "node %s  muxd %s  up %s  policy %s\n", n.Hostname, n.Version,
		now.Sub(n.Started).Truncate(time.Second), n.Policy)
	fmt.Fprintf(stdout, "mps %s", n.MPS.State)
	if n.MPS.PID > 0 {
		fmt.Fprintf(stdout, " (pid %d)", n.MPS.PID)
	}
	fmt.Fprintf(stdout, "  restarts %d\n\n", n.MPS.Restarts)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tUUID\tNAME\tMEMORY\tUSED\tUTIL\tSM ACT\tHEALTH\tOFFLINE CEILING\tONLINE DEMAND\tOFFLINE MPS\tWHY")
	for _, g := range st.GPUs {
		act := "-"
		if g.SMActivity != nil {
			act = fmt.Sprintf("%.0f%%", *g.SMActivity)
		}
		ceiling := offlineCeiling(g)
		var why []string
		if r := healthWhy(g, now); r != "" {
			why = append(why, r)
		}
		if g.CeilingReason != "" {
			r := "ceiling " + g.CeilingReason
			if !g.CeilingChanged.IsZero() {
				r += fmt.Sprintf(" (%s ago)", now.Sub(g.CeilingChanged).Truncate(100*time.Millisecond))
			}
			why = append(why, r)
		}
		if len(why) == 0 {
			why = append(why, "-")
		}
		demand := fmt.Sprintf("%.0f%%", g.OnlineDemand)
		if g.Burst {
			demand += " (burst)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%v\t%v\t%.0f%%\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Index, g.UUID, g.Name,
			monitor.FormatBytes(g.MemoryTotal), monitor.FormatBytes(g.MemoryUsed), g.Utilization, act, g.Health,
			ceiling, demand, offlineMPS(g), strings.Join(why, "; "))
	}
	if len(st.GPUs) == 0 {
		fmt.Fprintln(tw, "-\t(no GPUs)\t\t\t")
	}
	tw.Flush()
	for _, g := range st.GPUs {
		for _, r := range g.KernelRisks {
			fmt.Fprintf(stdout, "GPU %d online at risk: offline %s: %s\n", g.Index, shortID(r.ID), r)
		}
	}
	fmt.Fprintln(stdout)
	tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTAINER\tCLASS\tSTATE\tPID\tGPUS\tMEMORY CAP\tSM%\tUSED\tCEILING\tMPS%\tLAUNCHES\tTHROTTLED\tAGE")
	for _, c := range st.Containers {
		mem := "-"
		if c.Limits.GPUMemory > 0 {
			mem = policy.Bytes(c.Limits.GPUMemory).String()
		}
		sm := "-"
		if c.Limits.SMPercent > 0 {
			sm = fmt.Sprint(c.Limits.SMPercent)
		}
		pid := "-"
		if c.PID > 0 {
			pid = fmt.Sprint(c.PID)
		}
		used, share, mps, launches, throttled := "-", "-", "-", "-", "-"
		if u := c.Usage; u != nil {
			used = monitor.FormatBytes(u.ReservedBytes)
			share = fmt.Sprintf("%g%%", u.SharePercent)
			if u.Paused {
				share = "paused"
			}
			launches = fmt.Sprint(u.Launches)
			throttled = u.Throttled.Truncate(time.Millisecond).String()
		}
		if ce := c.Ceiling; ce != nil {
			share = fmt.Sprintf("%g%% (%s)", ce.Percent, ce.BoundBy)
			switch ce.BoundBy {
			case "paused":
				share = "paused"
			case "waiting for its turn":
				share = "waits its turn"
			}
			mps = fmt.Sprintf("%d%%", ce.MPSThreadPercent)
			if ce.FitPercent > 0 {
				mps += " (fits)"
			}
			if ce.ConfinePercent > 0 {
				mps += confinement(ce.ConfinePercent, c.Usage)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", shortID(c.ID), c.Class, c.State, pid,
			strings.Join(c.GPUs, ","), mem, sm, used, share, mps, launches, throttled, now.Sub(c.Registered).Truncate(time.Second))
	}
	if len(st.Containers) == 0 {
		fmt.Fprintln(tw, "(none)")
	}
	return tw.Flush()
}

// confinement says how a container's kernels are confined to part of the SMs: asked for
// pct of them, and what its libxcuda made of it (" confined to 72 SMs", or why not).
func confinement(pct uint32, u *api.Usage) string {
	switch {
	case u == nil || u.Confine == "" || u.Confine == "not confined":
		return fmt.Sprintf(", confine %d%% (not launched since)", pct)
	case u.ConfinedSMs > 0:
		return fmt.Sprintf(", confined to %d SMs (%d%%)", u.ConfinedSMs, pct)
	}
	return fmt.Sprintf(", confine %d%%: %s", pct, u.Confine)
}

// offlineCeiling says how a GPU's offline ceiling is shared: each container that fits the
// MPS budget may use all of it (its kernels keep to their part of the SMs), the others
// split it: "60%", "60% split by 2", "60% each (fit)", "60% (1 fits, 2 split it)".
func offlineCeiling(g api.GPU) string {
	s := fmt.Sprintf("%.0f%%", g.OfflineCeiling)
	fitted := 0
	if g.OfflineMPSFits {
		fitted = min(g.OfflineMPSFitted, g.OfflineContainers)
	}
	split := g.OfflineContainers - fitted
	switch {
	case g.OfflineContainers <= 1:
	case fitted == 0:
		s += fmt.Sprintf(" split by %d", split)
	case split == 0:
		s += " each (fit)"
	default:
		s += fmt.Sprintf(" (%d fit%s, %d split it)", fitted, map[bool]string{true: "s"}[fitted == 1], split)
	}
	return s
}

// waitNote names the offline containers that wait for their turn where none fits (the
// power cap, a busy memory bus): the one whose turn it is runs bounded.
func waitNote(g api.GPU) string {
	if g.OfflineMPSWaiting == 0 {
		return ""
	}
	return fmt.Sprintf(", in turns: %d wait", g.OfflineMPSWaiting)
}

// offlineMPS says what MPS active-thread budget a GPU's offline contexts split and how it
// relates to the online kernels' width: "50% (fits online 50%)", "100% (online 100% too
// wide: the whole GPU, bounded in time)", a note when the GPU's power cap, percentages given before or the memory
// bandwidth keep offline bounded anyway, or the budget
// alone while no online kernel was seen.
func offlineMPS(g api.GPU) string {
	s := fmt.Sprintf("%.0f%%", g.OfflineMPS)
	switch {
	case g.OfflineMPSFits && g.OfflineMPSHeld > 0:
		s += fmt.Sprintf(" (fits online %.0f%%; offline holds %.0f%%: in turns, %d of %d fit", g.OnlineWidth, g.OfflineMPSHeld, g.OfflineMPSFitted, g.OfflineContainers)
		if g.OfflineMPSWaiting > 0 {
			s += fmt.Sprintf(", %d wait", g.OfflineMPSWaiting)
		}
		if n := g.OfflineContainers - g.OfflineMPSFitted - g.OfflineMPSWaiting; n > 0 {
			s += fmt.Sprintf(", %d bounded", n)
		}
		s += ")"
	case g.OfflineMPSFits:
		s += fmt.Sprintf(" (fits online %.0f%%)", g.OnlineWidth)
	case g.OfflineMPSPowerCapped:
		s += fmt.Sprintf(" (fits online %.0f%%; power-capped: offline bounded%s)", g.OnlineWidth, waitNote(g))
	case g.OfflineMPSMemBound:
		s += fmt.Sprintf(" (fits online %.0f%%; memory bandwidth online %.0f%% + offline %.0f%%: bounded%s)", g.OnlineWidth, g.OnlineMemBW, g.OfflineMemBW, waitNote(g))
	case g.OnlineWidth > 0 && g.OfflineMPS >= 100:
		s += fmt.Sprintf(" (online %.0f%% too wide: the whole GPU, bounded in time)", g.OnlineWidth)
	case g.OnlineWidth > 0:
		s += fmt.Sprintf(" (online %.0f%% too wide)", g.OnlineWidth)
	}
	return s
}

// healthFresh is how long the reason for a healthy GPU's last health change stays in the
// WHY column: a GPU that is not healthy always shows why, a healthy one only shortly
// after it became so (a recovery), not "monitor started" for the rest of muxd's life.
const healthFresh = time.Minute

func healthWhy(g api.GPU, now time.Time) string {
	if g.HealthReason == "" {
		return ""
	}
	age := ""
	if !g.HealthSince.IsZero() {
		if g.Health == "healthy" && now.Sub(g.HealthSince) > healthFresh {
			return ""
		}
		age = fmt.Sprintf(" (%s ago)", now.Sub(g.HealthSince).Truncate(time.Second))
	}
	return "health: " + g.HealthReason + age
}

func events(ctx context.Context, c *client.Client, args []string, stdout, stderr io.Writer) error {
	asJSON, err := outputFormat("events", args, stderr)
	if err != nil {
		return err
	}
	var ev []monitor.Event
	if err := c.Events(ctx, &ev); err != nil {
		return err
	}
	if asJSON {
		return writeJSON(stdout, ev)
	}
	if len(ev) == 0 {
		fmt.Fprintln(stdout, "no GPU events")
		return nil
	}
	return monitor.WriteEvents(stdout, ev)
}

// outputFormat parses a command's only flag, -o table|json, and reports whether it is json.
func outputFormat(command string, args []string, stderr io.Writer) (bool, error) {
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "table", "output format: table or json")
	if err := fs.Parse(args); err != nil {
		return false, err
	}
	if *out != "table" && *out != "json" {
		return false, fmt.Errorf("%w: -o must be table or json, not %q", ErrUsage, *out)
	}
	return *out == "json", nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func shortID(id string) string {
	if len(id) > 24 {
		return id[:24] + "…"
	}
	return id
}
