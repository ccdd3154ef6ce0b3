package daemon

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/muxflow/muxflow/gpusim/nvmlsim"
	"github.com/muxflow/muxflow/muxd/buildinfo"
	"github.com/muxflow/muxflow/policy"
)

// Main is muxd's command line: it parses args (without the program name) and runs.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("muxd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policyPath := fs.String("policy", policy.DefaultPath, "policy file (TOML); the embedded default is used if the default path does not exist")
	version := fs.Bool("version", false, "print the version and exit")
	gpus := fs.String("gpus", "auto", "where GPUs come from: auto (NVML if the driver is installed, else none), none, or gpusim:SOCKET (the simulated GPUs of the gpusimd serving SOCKET)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `muxd — the muxflow node daemon.

Shares each GPU between latency-critical online inference and best-effort offline
training through NVIDIA MPS: keeps the registry of GPU containers, serves the node API
on a root-only unix socket, and runs the GPU monitor, SM allocator and error handler.

Usage: muxd [--policy FILE]

Signals: SIGHUP reloads the policy (an invalid file is rejected, the old one kept);
SIGTERM/SIGINT stop muxd. Started by systemd as muxd.service (Type=notify).

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see muxd --help)", fs.Arg(0))
	}
	if *version {
		fmt.Fprintln(stdout, "muxd", buildinfo.Version)
		return nil
	}
	path, err := filepath.Abs(*policyPath)
	if err != nil {
		return fmt.Errorf("policy path: %w", err)
	}
	slog.SetDefault(slog.New(slog.NewJSONHandler(stderr, nil)))
	opts := Options{PolicyPath: path}
	switch *gpus {
	case "none":
	case "auto":
		lib, err := openNVML()
		if err != nil {
			slog.Info("running without GPUs", "reason", err.Error())
		} else {
			defer lib.Shutdown()
			opts.NVML = lib
		}
	default:
		socket, ok := strings.CutPrefix(*gpus, "gpusim:")
		if !ok || socket == "" {
			return fmt.Errorf("--gpus must be auto, none or gpusim:SOCKET, not %q", *gpus)
		}
		lib := nvmlsim.New(socket)
		if ret := lib.Init(); ret != nvml.SUCCESS {
			return fmt.Errorf("gpusim at %s: %s", socket, nvml.ErrorString(ret))
		}
		defer lib.Shutdown()
		opts.NVML = lib
		// gpusim's fake MPS control tool reaches the simulator through this variable.
		opts.MPSEnv = []string{"GPUSIM_SOCKET=" + socket}
	}
	d, err := New(opts)
	if err != nil {
		return err
	}
	return d.Run(ctx)
}

// openNVML loads and initialises the NVIDIA management library of the installed driver.
func openNVML() (nvml.Interface, error) {
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML is not available: %s", nvml.ErrorString(ret))
	}
	return lib, nil
}
