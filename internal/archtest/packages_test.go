package archtest

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"testing"
)

// root is the repository root, relative to this package's directory (go
// test runs in it).
const root = "../.."

type modPkg struct {
	ImportPath string
	Dir        string
	Name       string
	Imports    []string
}

// listPackages runs go list over the module's packages (not their
// dependencies).
func listPackages(t *testing.T) []modPkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Dir,Name,Imports", "./...")
	cmd.Dir = root
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list ./...: %v\n%s", err, errb.String())
	}
	var pkgs []modPkg
	dec := json.NewDecoder(&out)
	for {
		var p modPkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list ./... found no packages")
	}
	return pkgs
}

// relDir is a package's directory relative to the repository root, with
// forward slashes: "nomadplugin/pb/basepb".
func relDir(t *testing.T, p modPkg) string {
	t.Helper()
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(abs, p.Dir)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.ToSlash(rel)
}
