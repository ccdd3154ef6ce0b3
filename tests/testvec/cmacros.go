package testvec

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// CMacros compiles a probe that includes headers (from the repository-relative folder
// include, plus any -D flags in defines) and returns the value of each named macro as the
// C compiler sees it: a string as it is, a number as its decimal value. Tests compare the
// result with the Go constants that mirror a header, so a name or bound shared by C and Go
// has one source and a drift fails. gcc must be installed; it is in the test dependencies.
func CMacros(t testing.TB, include string, headers []string, names []string, defines ...string) map[string]string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatalf("gcc is needed to read the C headers that the Go constants mirror (install gcc): %v", err)
	}
	root := filepath.Dir(Path("")) // testdata/ sits at the repository root
	var src strings.Builder
	src.WriteString("#include <stdio.h>\n")
	for _, h := range headers {
		fmt.Fprintf(&src, "#include %q\n", h)
	}
	src.WriteString("static void s(const char *n, const char *v) { printf(\"%s=%s\\n\", n, v); }\n" +
		"static void i(const char *n, long long v) { printf(\"%s=%lld\\n\", n, v); }\n" +
		"int main(void) {\n")
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	for _, name := range sorted {
		fmt.Fprintf(&src, "_Generic((%s), char *: s, default: i)(%q, %s);\n", name, name, name)
	}
	src.WriteString("return 0;\n}\n")
	dir := t.TempDir()
	cfile := filepath.Join(dir, "probe.c")
	if err := os.WriteFile(cfile, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "probe")
	args := append([]string{"-std=c11", "-Wall", "-Werror"}, defines...)
	args = append(args, "-I", filepath.Join(root, include), "-o", bin, cfile)
	if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("compile the probe of %s: %v\n%s", strings.Join(headers, ", "), err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("run the probe of %s: %v", strings.Join(headers, ", "), err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	return got
}
