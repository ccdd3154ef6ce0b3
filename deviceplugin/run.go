package deviceplugin

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/muxflow/muxflow/gpusim/nvmlsim"
)

const usage = `muxflow-device-plugin — advertises the node's GPUs to kubelet.

Registers the resource (nvidia.com/gpu) with kubelet's device-plugin API v1beta1, lists
one device per GPU (its UUID) and, for each container kubelet allocates GPUs to, answers
with their device nodes, driver mounts and NVIDIA_VISIBLE_DEVICES=<UUIDs>. Writes the CDI
spec of the same GPUs (kind nvidia.com/gpu, devices named by UUID) for the muxflow
runtime, which uses it to give offline pods the GPU the scheduler paired them onto.

Usage: muxflow-device-plugin [flags]

Flags:
`

// Run runs the device plugin until ctx ends.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("muxflow-device-plugin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	gpus := fs.String("gpus", "auto", "where GPUs come from: auto (NVML of the installed driver) or gpusim:SOCKET (the simulated GPUs of the gpusimd serving SOCKET)")
	simLib := fs.String("gpusim-lib", "", "with --gpus gpusim:SOCKET, the directory holding gpusim's libcuda.so.1 (mounted into containers as their driver)")
	resource := fs.String("resource", "nvidia.com/gpu", "extended resource name to advertise")
	dir := fs.String("plugin-dir", pluginapi.DevicePluginPath, "kubelet's device-plugin directory")
	cdiDir := fs.String("cdi-dir", "/var/run/cdi", "directory for the CDI spec (\"\" writes none)")
	strategy := fs.String("device-list-strategy", StrategyEnvvar, "how containers are told their GPUs, as the NVIDIA device plugin's: envvar, volume-mounts or cdi-annotations")
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0))
	}
	switch *strategy {
	case StrategyEnvvar, StrategyVolumeMounts, StrategyCDIAnnotations:
	default:
		return fmt.Errorf("--device-list-strategy must be envvar, volume-mounts or cdi-annotations, not %q", *strategy)
	}
	slog.SetDefault(slog.New(slog.NewJSONHandler(stderr, nil)))
	var lib nvml.Interface
	var inj Injector
	switch {
	case *gpus == "auto":
		lib, inj = nvml.New(), NVIDIAInjector{}
	case strings.HasPrefix(*gpus, "gpusim:") && len(*gpus) > len("gpusim:"):
		socket := strings.TrimPrefix(*gpus, "gpusim:")
		if *simLib == "" {
			return errors.New("--gpus gpusim:SOCKET needs --gpusim-lib DIR (gpusim's libcuda.so.1)")
		}
		abs, err := filepath.Abs(socket)
		if err != nil {
			return err
		}
		lib, inj = nvmlsim.New(abs), SimInjector{Socket: abs, LibDir: *simLib}
	default:
		return fmt.Errorf("--gpus must be auto or gpusim:SOCKET, not %q", *gpus)
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("NVML: %s", lib.ErrorString(ret))
	}
	defer lib.Shutdown()
	p := &Plugin{
		ResourceName: *resource, Dir: *dir, CDIDir: *cdiDir, CDIName: "muxflow-gpus.json", Strategy: *strategy,
		Injector: inj, List: func() ([]GPU, error) { return ListGPUs(lib) },
	}
	return p.Run(ctx)
}
