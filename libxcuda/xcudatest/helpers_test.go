package xcudatest

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/muxflow/muxflow/gpusim/simclient"
	"github.com/muxflow/muxflow/libxcuda/ctlblock"
)

// buildDir is where `make build` put libxcuda and its test programs.
func buildDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("MUXFLOW_BUILD")
	if dir == "" {
		_, self, _, _ := runtime.Caller(0)
		dir = filepath.Join(filepath.Dir(self), "..", "..", "build")
	}
	for _, f := range []string{"lib/libxcuda.so", "libxcuda/stub/libcuda.so.1", "libxcuda/tests/xctest", "libxcuda/tests/xctest-linked"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatalf("%s is missing: run `make build` first (MUXFLOW_BUILD=%s): %v", f, dir, err)
		}
	}
	return dir
}

// harness runs test programs under libxcuda with a fresh control block.
type harness struct {
	t     testing.TB
	build string
	block *ctlblock.Block
	// driverDir holds the libcuda.so.1 programs load (the stub by default).
	driverDir string
	preload   bool
	extraEnv  []string
}

func newHarness(t testing.TB, l ctlblock.Limits) *harness {
	t.Helper()
	b := buildDir(t)
	blk, err := ctlblock.Create(filepath.Join(t.TempDir(), "ctl"), l)
	if err != nil {
		t.Fatalf("create control block: %v", err)
	}
	t.Cleanup(func() { blk.Close() })
	return &harness{t: t, build: b, block: blk, driverDir: filepath.Join(b, "libxcuda", "stub"), preload: true}
}

func (h *harness) env() []string {
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"LD_LIBRARY_PATH=" + h.driverDir,
		ctlblock.EnvDir + "=" + h.block.Dir(),
	}
	if h.preload {
		env = append(env, "LD_PRELOAD="+filepath.Join(h.build, "lib", "libxcuda.so"))
	}
	return append(env, h.extraEnv...)
}

// useGpusim points the harness at a fresh gpusimd (one simulated H100, started with
// args) and its fake libcuda instead of the stub driver.
func (h *harness) useGpusim(t testing.TB, args ...string) *simclient.Daemon {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d, err := simclient.Start(ctx, simclient.Options{GPUs: "h100", Args: args})
	if err != nil {
		t.Fatalf("start gpusim (needs `make build`): %v", err)
	}
	t.Cleanup(d.Stop)
	h.driverDir = d.Artifacts.LibDir
	for _, e := range d.Env() {
		if !strings.HasPrefix(e, "LD_LIBRARY_PATH=") {
			h.extraEnv = append(h.extraEnv, e)
		}
	}
	return d
}

// useGpusimMPS is useGpusim with gpusim's MPS control daemon started.
func (h *harness) useGpusimMPS(t testing.TB) *simclient.Daemon {
	t.Helper()
	d := h.useGpusim(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.StartMPS(ctx); err != nil {
		t.Fatal(err)
	}
	return d
}

// gpusimCommand runs one of gpusim's workload programs under the harness.
func (h *harness) gpusimCommand(d *simclient.Daemon, prog string, args ...string) *exec.Cmd {
	path := d.Artifacts.Train
	if prog == "infer" {
		path = d.Artifacts.Infer
	}
	cmd := exec.Command(path, args...)
	cmd.Env = h.env()
	return cmd
}

// startGpusim starts one of gpusim's workload programs under h in the background; its
// output (stdout and stderr) collects in the builder.
func (h *harness) startGpusim(t *testing.T, d *simclient.Daemon, prog string, args ...string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	cmd := h.gpusimCommand(d, prog, args...)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}

func (h *harness) command(prog string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(h.build, "libxcuda", "tests", prog), args...)
	cmd.Env = h.env()
	return cmd
}

// keyValues parses the key=value lines xctest prints.
func keyValues(out string) map[string]string {
	kv := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && !strings.Contains(k, " ") {
			kv[k] = v
		}
	}
	return kv
}

func atoi(t testing.TB, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}
