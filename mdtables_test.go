package muxflow

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMarkdownTables fails for a table row of any Markdown file of the repository whose
// cells do not match its table's header, counted as GitHub does (a pipe splits a cell
// unless escaped as \|, inside code spans too): such a row renders broken, or is a row
// pasted into the wrong table, as docs/results.md's long tables invite.
func TestMarkdownTables(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != "." && (strings.HasPrefix(name, ".") || name == "build" || name == "dist" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".md") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		header, headerLine, line, fenced := 0, 0, 0, false
		for sc.Scan() {
			line++
			text := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(text, "```") {
				fenced = !fenced
			}
			if fenced || !strings.HasPrefix(text, "|") {
				header = 0
				continue
			}
			n := tableCells(text)
			if header == 0 {
				header, headerLine = n, line
				continue
			}
			if n != header {
				t.Errorf("%s:%d: a row of %d cells in the table of %d that starts at line %d", path, line, n, header, headerLine)
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// tableCells counts the cells of a table row that starts with a pipe.
func tableCells(row string) int {
	pipes := 0
	for i := 0; i < len(row); i++ {
		switch row[i] {
		case '\\':
			i++
		case '|':
			pipes++
		}
	}
	if !strings.HasSuffix(row, "|") || strings.HasSuffix(row, `\|`) {
		pipes++ // no closing pipe: the last cell runs to the end
	}
	return pipes - 1
}
