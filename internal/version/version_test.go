package version

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	goversion "github.com/hashicorp/go-version"
)

// Nomad's plugin loader refuses a plugin whose version is not a semantic
// version: the default must be one.
func TestDefaultIsASemanticVersion(t *testing.T) {
	if _, err := goversion.NewSemver(Version); err != nil {
		t.Fatalf("Version %q: %v", Version, err)
	}
}

func need(t *testing.T, tool string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		t.Skipf("skipping: %s is not on PATH (%v)", tool, err)
	}
	return p
}

// scripts/version.sh turns git describe into a semantic version, for a tree
// with no version tag, on a tag, past one, with changes, and refuses a tag
// that is not a semantic version.
func TestVersionScript(t *testing.T) {
	git := need(t, "git")
	need(t, "bash")
	script, err := filepath.Abs("../../scripts/version.sh")
	if err != nil {
		t.Fatal(err)
	}
	repo := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(git, args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	version := func() (string, error) {
		cmd := exec.Command("bash", script, "0.1.0-dev")
		cmd.Env = append(os.Environ(), "VERSION_DIR="+repo, "GIT_CEILING_DIRECTORIES="+filepath.Dir(repo), "GIT_CONFIG_GLOBAL=/dev/null")
		out, err := cmd.Output()
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			return "", &scriptError{string(ee.Stderr)}
		}
		return strings.TrimSpace(string(out)), err
	}
	check := func(step, want string) {
		t.Helper()
		got, err := version()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if got != want {
			t.Errorf("%s: version %q, want %q", step, got, want)
		}
		if _, err := goversion.NewSemver(got); err != nil {
			t.Errorf("%s: %q is not a semantic version: %v", step, got, err)
		}
	}

	// Not a git work tree yet: the base.
	check("no repository", "0.1.0-dev")
	run("init", "-q")
	run("commit", "-q", "--allow-empty", "-m", "one")
	check("no tag", "0.1.0-dev+g"+run("rev-parse", "--short", "HEAD"))
	run("tag", "v1.2.3")
	check("on v1.2.3", "1.2.3")
	run("commit", "-q", "--allow-empty", "-m", "two")
	past := run("rev-parse", "--short", "HEAD")
	check("a commit past v1.2.3", "1.2.3+1.g"+past)
	if err := os.WriteFile(filepath.Join(repo, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	run("add", "f")
	check("with changes", "1.2.3+1.g"+past+".dirty")
	run("commit", "-q", "-m", "three")
	run("tag", "v1.3.0-rc.1")
	check("on a prerelease tag", "1.3.0-rc.1")
	run("commit", "-q", "--allow-empty", "-m", "four")
	run("tag", "v2")
	if got, err := version(); err == nil || !strings.Contains(err.Error(), "tag v2 is not a semantic version") {
		t.Errorf("on the tag v2: %q, %v; want an error naming the tag", got, err)
	}
}

type scriptError struct{ stderr string }

func (e *scriptError) Error() string { return strings.TrimSpace(e.stderr) }

// The linker flag the make targets use reaches the binary: llmgw built with
// -X …/internal/version.Version says so in --version.
func TestLinkerStampsTheVersion(t *testing.T) {
	goTool := need(t, "go")
	if testing.Short() {
		t.Skip("skipping in -short: builds cmd/llmgw")
	}
	const stamp = "9.8.7-test.1+g1234abc.dirty"
	bin := filepath.Join(t.TempDir(), "llmgw")
	cmd := exec.Command(goTool, "build", "-trimpath", "-o", bin,
		"-ldflags", "-X github.com/llmgw/llmgw/internal/version.Version="+stamp, "github.com/llmgw/llmgw/cmd/llmgw")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("llmgw --version: %v: %s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "llmgw "+stamp; got != want {
		t.Errorf("llmgw --version printed %q, want %q", got, want)
	}
}
