// Package muxflow holds the checks that look at the whole module rather than at one
// package. The code lives in the folders below; docs/architecture.md is the map.
package muxflow

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageDocs fails for every Go package of the module that has no package doc
// comment ("// Package x ..." above a package clause), as tailscale's pkgdoc_test does:
// the comment is where a newcomer learns what a folder is for. A package made only of
// tests (tests/e2e) needs the comment in one of its test files.
func TestPackageDocs(t *testing.T) {
	type pkg struct{ files, documented, testFiles, testDocumented int }
	pkgs := map[string]*pkg{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
				name == "testdata" || name == "vendor" || name == "build" || name == "dist") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != "." {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		if strings.HasSuffix(f.Name.Name, "_test") {
			return nil // an external test package documents nothing of its own
		}
		dir := filepath.Dir(path)
		p := pkgs[dir]
		if p == nil {
			p = &pkg{}
			pkgs[dir] = p
		}
		documented := f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != ""
		switch {
		case strings.HasSuffix(name, "_test.go"):
			p.testFiles++
			if documented {
				p.testDocumented++
			}
		default:
			p.files++
			if documented {
				p.documented++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 10 {
		t.Fatalf("found only %d packages from %s; is the test run from the module root?", len(pkgs), mustGetwd(t))
	}
	for dir, p := range pkgs {
		switch {
		case p.files > 0 && p.documented == 0:
			t.Errorf("package in %s has no package doc comment: add one (\"// Package x ...\", usually in x.go or doc.go) saying what it is for", dir)
		case p.files == 0 && p.testDocumented == 0:
			t.Errorf("test-only package in %s has no package doc comment in any of its test files", dir)
		}
	}
}

func mustGetwd(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}
