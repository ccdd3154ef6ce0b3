package wiring

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/muxflow/muxflow/libxcuda/ctlblock"
	"github.com/muxflow/muxflow/muxd/api"
	"github.com/muxflow/muxflow/policy"
)

// AnnotationWired is set on every spec muxflow changed; its value is the container's class.
const AnnotationWired = "io.muxflow.wired"

// Plan is everything needed to wire one registered container.
type Plan struct {
	// Container is muxd's answer to the registration: id, class, limits, control paths.
	Container api.Container
	// Policy supplies host paths (MPS pipes, libxcuda, node dirs) and the hook's timeout.
	Policy *policy.Policy
	// HookBinary is the host path of muxflow-hook, added as the createRuntime hook that
	// reports the container's pid; "" when the runtime reports the pid itself.
	HookBinary string
	// Preload is the host file mounted as /etc/ld.so.preload.
	Preload string
	// Signal is the host path of the node's GPU signal page (muxd's <run_dir>/signal),
	// mounted read-write into online containers and read-only into offline ones; "" when
	// muxd has none (an older muxd), and then nothing is mounted.
	Signal string
	// ThreadPercent is the container's MPS active-thread ceiling (muxd/blocks
	// MPSThreadCeiling), set as CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: the out-of-process
	// backstop behind libxcuda's launch throttling. 0 or 100: no backstop, no variable.
	ThreadPercent uint32
}

// Modifiers turns the plan into the list of changes, after checking that every host path
// muxd returned lies inside muxflow's own directories: a confused or compromised muxd must
// not make the runtime expose arbitrary host files to a container.
func (pl Plan) Modifiers() (List, error) {
	p, c := pl.Policy, pl.Container
	if err := api.ValidateID(c.ID); err != nil {
		return nil, err
	}
	ctl := c.Control
	if !within(ctl.Dir, p.Node.RunDir) && !within(ctl.Dir, p.Node.StateDir) {
		return nil, fmt.Errorf("muxd returned control directory %q outside %s and %s", ctl.Dir, p.Node.RunDir, p.Node.StateDir)
	}
	mounts := Mounts{
		Bind(p.MPS.PipeDir, ContainerMPSDir, true),
		Bind(p.Hook.LibXCUDA, ContainerLib, false),
	}
	env := Env{
		EnvMPSPipe:      ContainerMPSDir,
		EnvControlBlock: ContainerControlDir,
		EnvContainerID:  c.ID,
		EnvClass:        string(c.Class),
	}
	if p.Hook.FailClosed {
		env[EnvFailPolicy] = ctlblock.EnvFailPolicyClosed
	}
	if c.Class == api.Offline {
		env[EnvDrainTimeout] = strconv.Itoa(drainTimeout(p.Evict.Grace.D()))
		// The GPU dispatches pending online blocks before offline ones as SMs free up.
		env[ctlblock.EnvMPSClientPriority] = ctlblock.MPSPriorityBelowNormal
	}
	switch {
	case ctl.Limits != "" && ctl.Usage != "":
		// The two files, not the directory: a writable directory would let the container
		// replace its limits file.
		for _, f := range []struct {
			host, dst string
			rw        bool
		}{{ctl.Limits, ContainerLimits, false}, {ctl.Usage, ContainerUsage, true}} {
			if !within(f.host, ctl.Dir) {
				return nil, fmt.Errorf("muxd returned control file %q outside its control directory %q", f.host, ctl.Dir)
			}
			mounts = append(mounts, Bind(f.host, f.dst, f.rw))
		}
	case ctl.Limits == "" && ctl.Usage == "":
		// A muxd that names only the directory: mount it whole and read-only, so that
		// nothing in it can be written from inside whatever muxd puts there.
		mounts = append(mounts, Bind(ctl.Dir, ContainerControlDir, false))
	default:
		return nil, fmt.Errorf("muxd returned only one of the control block's limits and usage files")
	}
	if t := pl.ThreadPercent; t > 0 && t < 100 {
		env[EnvThreadPercent] = strconv.FormatUint(uint64(t), 10)
	}
	if pl.Signal != "" {
		// Online containers publish their pending work in it; offline ones only read it
		// (an offline container must never be able to hold anyone back).
		if !within(pl.Signal, p.Node.RunDir) {
			return nil, fmt.Errorf("GPU signal page %q is outside %s", pl.Signal, p.Node.RunDir)
		}
		mounts = append(mounts, Bind(pl.Signal, ContainerSignal, c.Class == api.Online))
	}
	if !filepath.IsAbs(pl.Preload) {
		return nil, fmt.Errorf("ld.so.preload file %q is not an absolute path", pl.Preload)
	}
	mounts = append(mounts, Bind(pl.Preload, PreloadPath, false))
	mods := List{mounts, env}
	if pl.HookBinary != "" {
		mods = append(mods, Hooks{
			Binary:         pl.HookBinary,
			Args:           []string{"--socket", p.Node.Socket, "--timeout", p.Hook.Timeout.D().String()},
			TimeoutSeconds: int(math.Ceil(p.Hook.Timeout.D().Seconds())) + 1,
		})
	}
	return append(mods, Annotation{AnnotationWired: string(c.Class)}), nil
}

// PreloadContents is the ld.so.preload that loads libxcuda, followed by the image's own
// entries (so that wiring a container keeps whatever the image preloaded).
func PreloadContents(image string) string {
	var b strings.Builder
	b.WriteString(ContainerLib + "\n")
	for line := range strings.Lines(image) {
		if t := strings.TrimSpace(line); t != "" && t != ContainerLib {
			b.WriteString(t + "\n")
		}
	}
	return b.String()
}

func within(path, dir string) bool {
	rel, ok := relWithin(path, dir)
	return ok && rel != "."
}

// relWithin returns path relative to dir when path is clean, absolute and inside dir.
func relWithin(path, dir string) (string, bool) {
	if path == "" || !filepath.IsAbs(path) || filepath.Clean(path) != path || dir == "" {
		return "", false
	}
	rel, err := filepath.Rel(dir, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}

// drainTimeout is one second less than the eviction grace period, in whole seconds, at
// least 1.
func drainTimeout(grace time.Duration) int {
	return max(1, int((grace-time.Second)/time.Second))
}
