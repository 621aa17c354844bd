package archtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

type pkg struct {
	ImportPath string
	Imports    []string
	Module     *struct{ Path string }
	Standard   bool
}

// listDeps runs go list -deps -json over patterns.
func listDeps(t *testing.T, patterns ...string) []pkg {
	t.Helper()
	args := append([]string{"list", "-deps", "-json=ImportPath,Imports,Module,Standard"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = "../.."
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list %v: %v\n%s", patterns, err, errb.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(&out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// nomadRootAllowed reports whether an import path under
// github.com/hashicorp/nomad is allowed: only the MPL-2.0 api module.
func nomadRootAllowed(path string) bool {
	return path == "github.com/hashicorp/nomad/api" || strings.HasPrefix(path, "github.com/hashicorp/nomad/api/")
}

func TestNoBUSLNomadModule(t *testing.T) {
	for _, p := range listDeps(t, "./...") {
		if strings.HasPrefix(p.ImportPath, "github.com/hashicorp/nomad") && !nomadRootAllowed(p.ImportPath) {
			t.Errorf("%s is a dependency; only github.com/hashicorp/nomad/api may be used (the root module is BUSL)", p.ImportPath)
		}
		if p.Module != nil && p.Module.Path == "github.com/hashicorp/nomad" {
			t.Errorf("package %s comes from the BUSL module github.com/hashicorp/nomad", p.ImportPath)
		}
	}
	cmd := exec.Command("go", "list", "-m", "all")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m all: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		mod := strings.Fields(sc.Text())[0]
		if mod == "github.com/hashicorp/nomad" {
			t.Errorf("go.mod's build list holds github.com/hashicorp/nomad (BUSL); only github.com/hashicorp/nomad/api is allowed")
		}
		if mod == "github.com/mitchellh/mapstructure" {
			t.Errorf("the archived github.com/mitchellh/mapstructure is in the build list; use github.com/go-viper/mapstructure/v2")
		}
	}
}

// testingImporters are third-party packages known to import the standard
// testing package from non-test code, and why that is accepted.
var testingImporters = map[string]string{
	// go-plugin's testing.go (TestConn, TestPluginGRPCConn) imports
	// "testing"; every go-plugin host and plugin, Nomad's own included,
	// links it. Since Go 1.13 the package registers no flags at init.
	"github.com/hashicorp/go-plugin": "go-plugin test helpers in a non-test file",
}

// mockAllowed lists mock packages a binary may link because they are a
// product feature, keyed by binary.
var mockAllowed = map[string][]string{
	// mock { system = "dgxh200" } serves go-nvml's mock DGX systems.
	"nomad-device-nvml": {"github.com/NVIDIA/go-nvml/pkg/nvml/mock"},
}

func TestBinariesLinkNoTestCode(t *testing.T) {
	cmds := listCmds(t)
	if len(cmds) == 0 {
		t.Fatal("no binaries under cmd/")
	}
	for _, name := range cmds {
		t.Run(name, func(t *testing.T) {
			pkgs := listDeps(t, "./cmd/"+name)
			byPath := map[string]pkg{}
			for _, p := range pkgs {
				byPath[p.ImportPath] = p
			}
			for _, p := range pkgs {
				if strings.HasPrefix(p.ImportPath, "github.com/llmgw/llmgw/") && strings.Contains(p.ImportPath, "plugintest") {
					t.Errorf("links the test harness %s", p.ImportPath)
				}
				for _, imp := range p.Imports {
					switch imp {
					case "testing", "net/http/httptest", "testing/synctest", "testing/fstest":
						if _, ok := testingImporters[p.ImportPath]; ok && imp == "testing" {
							continue
						}
						t.Errorf("%s imports %s", p.ImportPath, imp)
					}
				}
				if isMock(p.ImportPath) && !allowedMock(name, p.ImportPath) {
					t.Errorf("links mock package %s", p.ImportPath)
				}
			}
		})
	}
}

func isMock(path string) bool {
	for _, part := range strings.Split(path, "/") {
		if part == "mock" || part == "mocks" || part == "fake" || part == "fakes" {
			return true
		}
	}
	return false
}

func allowedMock(bin, path string) bool {
	for _, prefix := range mockAllowed[bin] {
		if path == prefix || strings.HasPrefix(path, prefix+"/") {
			return true
		}
	}
	return false
}

func listCmds(t *testing.T) []string {
	t.Helper()
	// The binaries are the main packages; cmd/llmgw/internal/... are the
	// llmgw binary's own libraries.
	cmd := exec.Command("go", "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`, "./cmd/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./cmd/...: %v", err)
	}
	var names []string
	for _, line := range strings.Fields(string(out)) {
		names = append(names, line[strings.LastIndex(line, "/")+1:])
	}
	sort.Strings(names)
	return names
}

// pureDirs are packages that must stay pure: no I/O, no logging, no
// goroutines, no clock, so they can be tested exhaustively and reused
// anywhere (facility/, the engine recipes and the controller's decision
// core; docs/architecture.md, "Rules the architecture tests enforce").
var pureDirs = []string{
	"github.com/llmgw/llmgw/facility",
	"github.com/llmgw/llmgw/engine",
	"github.com/llmgw/llmgw/controller/reconcile",
	"github.com/llmgw/llmgw/controller/autoscale",
	"github.com/llmgw/llmgw/controller/observe",
	"github.com/llmgw/llmgw/controller/render",
	"github.com/llmgw/llmgw/internal/hcldecode",
	"github.com/llmgw/llmgw/internal/nomadenv",
	"github.com/llmgw/llmgw/internal/jsonscan",
}

// pureFiles are the pure part of packages that also do I/O, held to the
// same rules file by file: enginemetrics parses and computes rates without
// I/O, and scrapes over HTTP in a file of its own; bounded checks input
// without I/O, and reads a file within its limit in file.go.
var pureFiles = []string{
	"internal/bounded/bounded.go",
	"enginemetrics/enginemetrics.go",
	"enginemetrics/parse.go",
	"enginemetrics/reading.go",
}

// impure are imports a pure package may not have (or any package below
// them, such as os/exec or net/http).
var impure = []string{"os", "net", "log", "io/ioutil", "syscall", "sync", "runtime", "unsafe", "math/rand", "crypto/rand"}

// clockReads are the time functions that read or wait on the clock; a pure
// package may use time.Duration and time.Time values given to it, never these.
var clockReads = map[string]bool{"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true,
	"Tick": true, "NewTimer": true, "NewTicker": true, "AfterFunc": true}

type pkgFiles struct {
	ImportPath string
	Dir        string
	GoFiles    []string
}

func TestPurePackages(t *testing.T) {
	for _, root := range pureDirs {
		cmd := exec.Command("go", "list", "-json=ImportPath,Dir,GoFiles", "./"+strings.TrimPrefix(root, "github.com/llmgw/llmgw/")+"/...")
		cmd.Dir = "../.."
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", root, err)
		}
		found := 0
		dec := json.NewDecoder(bytes.NewReader(out))
		for {
			var p pkgFiles
			if err := dec.Decode(&p); err == io.EOF {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			found++
			for _, name := range p.GoFiles {
				checkPureFile(t, p.ImportPath, filepath.Join(p.Dir, name))
			}
		}
		if found == 0 {
			t.Errorf("no packages under %s: update pureDirs", root)
		}
	}
	for _, f := range pureFiles {
		checkPureFile(t, "github.com/llmgw/llmgw/"+filepath.Dir(f), filepath.Join("..", "..", f))
	}
}

func checkPureFile(t *testing.T, pkgPath, path string) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		ip, _ := strconv.Unquote(imp.Path.Value)
		for _, bad := range impure {
			if ip == bad || strings.HasPrefix(ip, bad+"/") {
				t.Errorf("%s is pure but %s imports %s", pkgPath, filepath.Base(path), ip)
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			t.Errorf("%s: go statement: %s is pure and starts no goroutines", fset.Position(n.Pos()), pkgPath)
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok && id.Name == "time" && clockReads[n.Sel.Name] {
				t.Errorf("%s: time.%s: %s is pure and reads no clock", fset.Position(n.Pos()), n.Sel.Name, pkgPath)
			}
		}
		return true
	})
}
