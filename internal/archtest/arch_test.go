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
	"slices"
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

// impureLinks are what a pure package may not link at any depth, through
// whatever it imports: the network (net, which net/http and every client
// link), processes, signals, logging, a random source, and the Nomad and
// Consul clients. The standard library's own basics link os, sync and
// syscall (fmt does), so those are refused only as a pure package's own
// imports (impure, above).
var impureLinks = []string{"net", "net/http", "os/exec", "os/signal", "log", "log/slog", "crypto/rand",
	"github.com/hashicorp/nomad/api", "github.com/hashicorp/consul/api"}

// pureMayLink are packages a pure package (or file) may import although
// they link some of impureLinks, and why: what they link is held against
// them, not against the pure package. checkPureFile holds a pure package
// to nomad/api's types: no client.
var pureMayLink = map[string]map[string]string{
	module + "/controller/render":  {"github.com/hashicorp/nomad/api": "the Nomad job it renders is nomad/api's Job"},
	module + "/controller/observe": {"github.com/hashicorp/nomad/api": "the nodes, allocations and stats it reads are nomad/api's types"},
	"enginemetrics/parse.go":       {"github.com/prometheus/common/expfmt": "Prometheus's own text parser, which links net/http for its content negotiation (Negotiate), not called here"},
}

// nomadClient are nomad/api's names that talk to Nomad; a pure package
// that may import nomad/api for its types uses none of them.
var nomadClient = map[string]bool{"Client": true, "NewClient": true, "Config": true, "DefaultConfig": true}

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
	g := newLinkGraph(t)
	checked := map[string]bool{}
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
			checkPureLinks(t, g, p.ImportPath)
			checked[p.ImportPath] = true
		}
		if found == 0 {
			t.Errorf("no packages under %s: update pureDirs", root)
		}
	}
	for _, f := range pureFiles {
		imports := checkPureFile(t, "github.com/llmgw/llmgw/"+filepath.Dir(f), filepath.Join("..", "..", f))
		// The file's imports are a node of the graph of their own: what
		// the file links, not what the rest of its package does.
		g[f] = imports
		checkPureLinks(t, g, f)
		checked[f] = true
	}
	for pure, deps := range pureMayLink {
		for dep := range deps {
			if !checked[pure] || !slices.Contains(g[pure], dep) {
				t.Errorf("pureMayLink lets %s import %s, but it is not held pure or imports it no more: remove it", pure, dep)
			}
		}
	}
}

// checkPureLinks fails for every package of impureLinks that the pure
// package (or file) pure links, naming the chain of imports it comes
// through. The walk stops at such a package: the first wrong step is the
// one to fix. A direct import of one is checkPureFile's to report.
func checkPureLinks(t *testing.T, g linkGraph, pure string) {
	t.Helper()
	mayLink := pureMayLink[pure]
	stop := func(q string) bool {
		_, ok := mayLink[q]
		return ok || slices.Contains(impureLinks, q)
	}
	g.links(pure, func(q string) bool { return !stop(q) }, func(q string, chain []string) {
		if _, ok := mayLink[q]; ok || !slices.Contains(impureLinks, q) {
			return
		}
		if len(chain) == 2 && impureImport(q) {
			return
		}
		t.Errorf("%s is pure but links %s through %s", pure, q, chainText(chain))
	})
}

// impureImport reports whether a pure package's own file may not import ip.
func impureImport(ip string) bool {
	for _, bad := range impure {
		if ip == bad || strings.HasPrefix(ip, bad+"/") {
			return true
		}
	}
	return false
}

// checkPureFile holds one file of a pure package to the rules, and returns
// its imports.
func checkPureFile(t *testing.T, pkgPath, path string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var imports []string
	nomadAPI := ""
	for _, imp := range f.Imports {
		ip, _ := strconv.Unquote(imp.Path.Value)
		if ip == "github.com/hashicorp/nomad/api" {
			nomadAPI = "api"
			if imp.Name != nil {
				nomadAPI = imp.Name.Name
			}
		}
		imports = append(imports, ip)
		if impureImport(ip) {
			t.Errorf("%s is pure but %s imports %s", pkgPath, filepath.Base(path), ip)
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
			if id, ok := n.X.(*ast.Ident); ok && nomadAPI != "" && id.Name == nomadAPI && nomadClient[n.Sel.Name] {
				t.Errorf("%s: %s.%s: %s is pure and uses nomad/api's types only, never its client", fset.Position(n.Pos()), id.Name, n.Sel.Name, pkgPath)
			}
		}
		return true
	})
	return imports
}
