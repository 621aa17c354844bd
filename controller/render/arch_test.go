package render

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// render is pure: no I/O, no logging, no goroutines, no clock; and, like
// everything here, it never imports Nomad's root module (BUSL), only its
// api module.
func TestPure(t *testing.T) {
	forbidden := []string{"os", "net", "log", "io/ioutil", "syscall", "sync", "runtime", "unsafe", "math/rand", "crypto/rand", "os/exec"}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbidden {
				if path == bad || strings.HasPrefix(path, bad+"/") {
					t.Errorf("%s imports %s: render is pure", name, path)
				}
			}
			if strings.HasPrefix(path, "github.com/hashicorp/nomad") && path != "github.com/hashicorp/nomad/api" {
				t.Errorf("%s imports %s: only github.com/hashicorp/nomad/api may be imported", name, path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: go statement: render starts no goroutines", fset.Position(n.Pos()))
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && id.Name == "time" {
					switch n.Sel.Name {
					case "Now", "Since", "Until", "Sleep", "After", "Tick", "NewTimer", "NewTicker", "AfterFunc":
						t.Errorf("%s: time.%s: render reads no clock", fset.Position(n.Pos()), n.Sel.Name)
					}
				}
			}
			return true
		})
	}
}
