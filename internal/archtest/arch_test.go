package archtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"sort"
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
	cmd := exec.Command("go", "list", "./cmd/...")
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

// pureDirs are packages that must stay free of I/O: no os, net, or
// logging, so they can be tested exhaustively and reused anywhere.
var pureDirs = []string{
	"github.com/llmgw/llmgw/facility",
	"github.com/llmgw/llmgw/driver/recipe",
	"github.com/llmgw/llmgw/controller/reconcile",
	"github.com/llmgw/llmgw/controller/observe",
}

var impure = []string{"os", "os/exec", "net", "net/http", "log", "log/slog", "io/ioutil", "syscall"}

func TestPurePackagesDoNoIO(t *testing.T) {
	for _, root := range pureDirs {
		pkgs := listDeps(t, "./"+strings.TrimPrefix(root, "github.com/llmgw/llmgw/")+"/...")
		found := 0
		for _, p := range pkgs {
			if !strings.HasPrefix(p.ImportPath, root) {
				continue
			}
			found++
			for _, imp := range p.Imports {
				for _, bad := range impure {
					if imp == bad {
						t.Errorf("%s is pure but imports %s", p.ImportPath, imp)
					}
				}
			}
		}
		if found == 0 {
			t.Errorf("no packages under %s: update pureDirs", root)
		}
	}
}
