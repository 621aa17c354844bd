package archtest

import (
	"bufio"
	"bytes"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestOnePackageComment checks that every package has exactly one package
// comment, in one of its non-test files, and that it starts the way go doc
// expects: "Package <name> ..." or, for a main package, "Command <dir> ...".
// Test files carry none, so the comment go doc shows cannot depend on
// which files are compiled.
func TestOnePackageComment(t *testing.T) {
	for _, p := range listPackages(t) {
		entries, err := os.ReadDir(p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		var with []string
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || !strings.HasSuffix(name, ".go") {
				continue
			}
			path := filepath.Join(p.Dir, name)
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Errorf("%s: %v", path, err)
				continue
			}
			if f.Doc == nil {
				continue
			}
			if strings.HasSuffix(name, "_test.go") {
				t.Errorf("%s/%s: a test file has a package comment; the package's one comment belongs in a non-test file", relDir(t, p), name)
				continue
			}
			if f.Name.Name != p.Name {
				continue // a file of another package (a go:build ignore generator)
			}
			with = append(with, name)
			want := "Package " + p.Name + " "
			if p.Name == "main" {
				want = "Command " + filepath.Base(p.Dir) + " "
			}
			if text := f.Doc.Text(); !strings.HasPrefix(text, want) {
				t.Errorf("%s/%s: the package comment starts %q, want %q", relDir(t, p), name, firstLine(text), want+"…")
			}
		}
		switch len(with) {
		case 1:
		case 0:
			t.Errorf("%s has no package comment: add a doc.go (or a comment above one file's package clause) saying what it is", relDir(t, p))
		default:
			t.Errorf("%s has %d package comments (%s); keep one, in doc.go or the package's main file", relDir(t, p), len(with), strings.Join(with, ", "))
		}
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// tableRows returns the first cell of every body row of the first table
// under the line heading in the Markdown file: a path in backticks, with
// any trailing slash removed. Each is returned with its line number.
func tableRows(t *testing.T, file, heading string) map[string]int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	under, inTable, header := false, false, 0
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case !under:
			under = line == heading
			continue
		case strings.HasPrefix(line, "|"):
			inTable = true
		case inTable:
			return rows // the table ended
		case strings.HasPrefix(line, "#"):
			t.Fatalf("%s: no table under %q", file, heading)
		default:
			continue // prose before the table
		}
		if header < 2 { // the header row and the |---| row
			header++
			continue
		}
		cell := strings.TrimSpace(strings.Split(strings.Trim(line, "|"), "|")[0])
		path := strings.TrimSuffix(strings.Trim(cell, "`"), "/")
		if !strings.HasPrefix(cell, "`") || !strings.HasSuffix(cell, "`") || path == "" {
			t.Errorf("%s:%d: the first cell %q is not a path in backticks", file, n, cell)
			continue
		}
		if prev, dup := rows[path]; dup {
			t.Errorf("%s:%d: %s has a row already (line %d)", file, n, path, prev)
		}
		rows[path] = n
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no table under %q", file, heading)
	}
	return rows
}

// topDirs lists the repository's top-level directories: not hidden, and not
// build output that .gitignore names at the top (/bin/, /dist/).
func topDirs(t *testing.T) []string {
	t.Helper()
	ignored := map[string]bool{}
	if data, err := os.ReadFile(filepath.Join(root, ".gitignore")); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			line = strings.TrimSpace(line)
			if name, ok := strings.CutPrefix(line, "/"); ok && strings.Count(name, "/") == 1 && strings.HasSuffix(name, "/") {
				ignored[strings.TrimSuffix(name, "/")] = true
			}
		}
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && !ignored[e.Name()] {
			dirs = append(dirs, e.Name())
		}
	}
	return dirs
}

// TestLayoutTables checks the layout tables of README.md and
// docs/architecture.md against the tree: every row names a directory that
// exists, every top-level directory has a row of its own, and every package
// directory has a row for itself or for a directory above it.
func TestLayoutTables(t *testing.T) {
	pkgs := listPackages(t)
	for _, file := range []string{"README.md", "docs/architecture.md"} {
		t.Run(file, func(t *testing.T) {
			rows := tableRows(t, file, "## Layout")
			for path, line := range rows {
				if fi, err := os.Stat(filepath.Join(root, path)); err != nil || !fi.IsDir() {
					t.Errorf("%s:%d: the layout table lists %s/, which is not a directory", file, line, path)
				}
			}
			for _, dir := range topDirs(t) {
				if _, ok := rows[dir]; !ok {
					t.Errorf("%s: the layout table has no row for the top-level directory %s/", file, dir)
				}
			}
			for _, p := range pkgs {
				dir := relDir(t, p)
				if !covered(rows, dir) {
					t.Errorf("%s: no layout row covers the package directory %s/ (add a row for it or a directory above it)", file, dir)
				}
			}
		})
	}
}

// covered reports whether rows holds dir or a directory above it.
func covered(rows map[string]int, dir string) bool {
	for d := dir; d != "." && d != ""; d = filepath.ToSlash(filepath.Dir(d)) {
		if _, ok := rows[d]; ok {
			return true
		}
	}
	return false
}

// TestPackageMap checks that docs/architecture.md's package map has one row
// per package of the module, and no row for a package that is gone.
func TestPackageMap(t *testing.T) {
	const file = "docs/architecture.md"
	rows := tableRows(t, file, "## Packages")
	var missing []string
	for _, p := range listPackages(t) {
		dir := relDir(t, p)
		if _, ok := rows[dir]; !ok {
			missing = append(missing, dir)
		}
		delete(rows, dir)
	}
	sort.Strings(missing)
	for _, dir := range missing {
		t.Errorf("%s: the package map has no row for %s", file, dir)
	}
	for path, line := range rows {
		t.Errorf("%s:%d: the package map lists %s, which is not a package of the module", file, line, path)
	}
}
