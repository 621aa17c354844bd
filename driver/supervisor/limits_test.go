package supervisor

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/internal/testing/proctest"
)

func TestLimitsFilesAndControllers(t *testing.T) {
	l := Limits{CPUWeight: 39, CPUMax: "50000 100000", Cpuset: "2-3", MemoryMax: 64 << 20, MemoryLow: 32 << 20}
	var got []string
	for _, f := range l.files() {
		got = append(got, f.controller+":"+f.String())
	}
	want := []string{"cpu:cpu.weight=39", "cpu:cpu.max=50000 100000", "cpuset:cpuset.cpus=2-3",
		"memory:memory.max=67108864", "memory:memory.low=33554432"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"memory", "cpu", "cpuset"}, l.controllers()); diff != "" {
		t.Errorf("controllers (-want +got):\n%s", diff)
	}
	if got := (Limits{MemoryMax: -1}).files(); len(got) != 1 || got[0].String() != "memory.max=max" {
		t.Errorf("memory_max = -1: %v", got)
	}
	if (Limits{Require: true}).Any() || !l.Any() {
		t.Error("Any")
	}
	if diff := cmp.Diff([]string{"cpu.weight=39: no cgroup", "cpu.max=50000 100000: no cgroup", "cpuset.cpus=2-3: no cgroup",
		"memory.max=67108864: no cgroup", "memory.low=33554432: no cgroup"}, l.Unenforced("no cgroup")); diff != "" {
		t.Errorf("Unenforced (-want +got):\n%s", diff)
	}
}

// TestApplyLimits writes into a plain directory standing in for the
// cgroup: the values land in the interface files, and a controller that
// is missing leaves its limits unenforced with the reason.
func TestApplyLimits(t *testing.T) {
	dir := t.TempDir()
	l := Limits{CPUWeight: 39, Cpuset: "1", MemoryMax: 64 << 20, MemoryLow: 32 << 20}
	applied, unenforced := applyLimits(dir, l, map[string]error{"cpuset": errors.New("the cpuset controller is not available")})
	if diff := cmp.Diff([]string{"cpu.weight=39", "memory.max=67108864", "memory.swap.max=0", "memory.low=33554432"}, applied); diff != "" {
		t.Errorf("applied (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"cpuset.cpus=1: the cpuset controller is not available"}, unenforced); diff != "" {
		t.Errorf("unenforced (-want +got):\n%s", diff)
	}
	for file, want := range map[string]string{"cpu.weight": "39", "memory.max": "67108864", "memory.low": "33554432", "memory.swap.max": "0"} {
		if b, err := os.ReadFile(filepath.Join(dir, file)); err != nil || string(b) != want {
			t.Errorf("%s: %q %v, want %q", file, b, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "cpuset.cpus")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cpuset.cpus written although its controller is missing: %v", err)
	}
	// A write the kernel refuses is unenforced too.
	_, unenforced = applyLimits(filepath.Join(dir, "gone"), Limits{CPUWeight: 5}, nil)
	if len(unenforced) != 1 || !strings.HasPrefix(unenforced[0], "cpu.weight=5: ") {
		t.Errorf("write error: %v", unenforced)
	}
}

// TestEnableControllersWalksToTheRoot: on a stand-in hierarchy (the root
// has no cgroup.type), a controller the root offers but does not pass on
// is enabled there, and one nobody offers is reported with where.
func TestEnableControllersWalksToTheRoot(t *testing.T) {
	root := t.TempDir()
	parent := filepath.Join(root, "llmgw.slice")
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "cgroup.controllers"), "cpu memory")
	write(filepath.Join(root, "cgroup.subtree_control"), "memory")
	write(filepath.Join(parent, "cgroup.type"), "domain")
	write(filepath.Join(parent, "cgroup.controllers"), "memory")
	write(filepath.Join(parent, "cgroup.subtree_control"), "memory")
	missing := enableControllers(parent, []string{"memory", "cpu", "cpuset"})
	if missing["memory"] != nil {
		t.Errorf("memory: %v", missing["memory"])
	}
	if b, _ := os.ReadFile(filepath.Join(root, "cgroup.subtree_control")); string(b) != "+cpu" {
		t.Errorf("root's subtree_control got %q, want +cpu written", b)
	}
	if err := missing["cpuset"]; err == nil || !strings.Contains(err.Error(), "the cpuset controller is not available in "+root) {
		t.Errorf("cpuset: %v", err)
	}
}

// TestRequiredLimitsRefuseBeforeFork: with resource_limits = "enforce"
// and no cgroup v2 at cgroup_parent, the supervisor refuses before it
// forks: the engine never runs, and Launch says which limits and why.
func TestRequiredLimitsRefuseBeforeFork(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	notCgroup := filepath.Join(t.TempDir(), "llmgw.slice")
	spec := Spec{Path: "/bin/sh", Args: []string{"-c", "touch ran; sleep 3600"}, Dir: dir, TailLines: 5,
		CgroupParent: notCgroup, CgroupName: "engine.scope",
		Limits: Limits{CPUWeight: 17, MemoryMax: 128 << 20, Require: true}}
	_, err = Launch(exe, dir, spec, 20*time.Second)
	var le *LimitsError
	if !errors.As(err, &le) || !errors.Is(err, ErrStart) || !errors.Is(err, ErrLimits) {
		t.Fatalf("Launch: %v, want a LimitsError", err)
	}
	if len(le.Unenforced) != 2 || !strings.HasPrefix(le.Unenforced[0], "cpu.weight=17: no cgroup for the engine: ") ||
		!strings.Contains(le.Unenforced[1], "memory.max=134217728: ") || !strings.Contains(le.Unenforced[1], "not a cgroup v2 hierarchy") {
		t.Errorf("unenforced: %q", le.Unenforced)
	}
	if _, ok, _ := ReadStarted(dir); ok {
		t.Error("started.json written for an engine that was refused")
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the engine ran: %v", err)
	}
	if _, err := os.Stat(notCgroup); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a directory was left at the non-cgroup parent: %v", err)
	}

	// Best effort: the same engine starts, and says what is not enforced.
	spec.Limits.Require = false
	spec.Args = []string{"-c", "exit 0"}
	l, err := Launch(exe, dir, spec, 20*time.Second)
	if err != nil {
		t.Fatalf("Launch best effort: %v", err)
	}
	<-l.Reaped
	if len(l.Started.Unenforced) != 2 || len(l.Started.Limits) != 0 || l.Started.Error != "" {
		t.Errorf("started %+v, want both limits unenforced", l.Started)
	}
}

// TestLimitsEnforcedInCgroup starts an engine with limits on a writable
// cgroup v2 hierarchy. Where the hierarchy lacks the cpu, cpuset or
// memory controller (a hybrid host binds them to cgroup v1) the required
// limits must refuse the start, naming the controller; where it has them
// the engine must run in a cgroup holding exactly the limits, and an
// engine that outgrows memory.max must be reported as OOM-killed.
func TestLimitsEnforcedInCgroup(t *testing.T) {
	parent := writableCgroup(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	avail, _ := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
	var lacking []string
	for _, c := range []string{"cpu", "cpuset", "memory"} {
		if !slices.Contains(strings.Fields(string(avail)), c) {
			lacking = append(lacking, c)
		}
	}
	dir := t.TempDir()
	limits := Limits{CPUWeight: 42, Cpuset: "0", MemoryMax: 64 << 20, Require: true}
	spec := Spec{Path: "/bin/sh", Args: []string{"-c", "echo $$ > engine.pid; while [ ! -e go ]; do sleep 0.02; done"},
		Dir: dir, TailLines: 5, CgroupParent: parent, CgroupName: "engine.scope", Limits: limits}
	l, err := Launch(exe, dir, spec, 20*time.Second)
	if len(lacking) > 0 {
		var le *LimitsError
		if !errors.As(err, &le) {
			t.Fatalf("Launch without the %v controllers: %v, want a LimitsError", lacking, err)
		}
		for _, c := range lacking {
			if !strings.Contains(le.Error(), "the "+c+" controller is not available") && !strings.Contains(le.Error(), "enable the "+c+" controller") {
				t.Errorf("refusal does not name the %s controller: %v", c, le)
			}
		}
		if _, err := os.Stat(filepath.Join(parent, "engine.scope")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("refused engine's cgroup left behind: %v", err)
		}
		t.Skipf("limits part skipped: the cgroup v2 hierarchy at %s lacks the %s controller(s) (cgroup.controllers: %q); the refusal was checked",
			parent, strings.Join(lacking, ", "), strings.TrimSpace(string(avail)))
	}
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	cg := l.Started.Cgroup
	for file, want := range map[string]string{"cpu.weight": "42", "cpuset.cpus": "0", "memory.max": "67108864", "memory.oom.group": "1"} {
		b, err := os.ReadFile(filepath.Join(cg, file))
		if err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("%s: %q %v, want %q", file, b, err, want)
		}
	}
	engine := proctest.PidFileRef(t, filepath.Join(dir, "engine.pid"))
	if !slices.Contains(readPids(filepath.Join(cg, "cgroup.procs")), engine.Pid) {
		t.Errorf("engine pid %d not in %s/cgroup.procs", engine.Pid, cg)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	<-l.Reaped

	// Outgrow memory.max: dd fills a 256 MiB buffer.
	dir = t.TempDir()
	spec.Dir, spec.CgroupName = dir, "oom.scope"
	spec.Args = []string{"-c", "dd if=/dev/zero of=/dev/null bs=256M count=1"}
	spec.Limits = Limits{MemoryMax: 32 << 20, Require: true}
	l, err = Launch(exe, dir, spec, 20*time.Second)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	<-l.Reaped
	ex, ok, err := ReadExit(dir)
	if !ok || err != nil {
		t.Fatalf("no exit record: %v", err)
	}
	if !ex.OOMKilled || ex.Signal != 9 {
		t.Errorf("exit %+v, want OOM-killed by SIGKILL", ex)
	}
}
