package xcudatest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

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
	return env
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
