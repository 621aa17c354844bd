package supervisor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// cgroup is the engine's own cgroup v2 directory.
type cgroup struct {
	dir string
	fd  int
	// missing holds, per controller the engine needs, why it is not
	// available in the cgroup. The cgroup still serves to find and kill
	// every process of the engine.
	missing map[string]error
	// noMemory says why the memory controller (and so memory.events, the
	// OOM-kill count) is not available in the cgroup; nil when it is.
	noMemory error
}

// errNoCgroup2 says the parent is not on a cgroup v2 (unified) hierarchy.
var errNoCgroup2 = errors.New("not a cgroup v2 hierarchy")

// createCgroup makes <parent>/<name> on a cgroup v2 hierarchy, with the
// controllers in need (memory always) enabled for it where the hierarchy
// allows, and opens it so that the engine can be cloned straight into it.
// Where a controller cannot be enabled (a hybrid host whose memory
// controller is bound to cgroup v1) the cgroup is still made, and missing
// says why: it is what kills every worker of the engine's.
func createCgroup(parent, name string, need []string) (*cgroup, error) {
	// Look at the file system first: on a host without cgroup v2 at that
	// path, MkdirAll would leave directories in whatever is there (the
	// tmpfs of a cgroup v1 host's /sys/fs/cgroup).
	existing := parent
	for {
		if _, err := os.Stat(existing); err == nil || existing == "/" {
			break
		}
		existing = filepath.Dir(existing)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(existing, &sfs); err != nil {
		return nil, fmt.Errorf("statfs %s: %w", existing, err)
	}
	if sfs.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil, fmt.Errorf("%s: %w", existing, errNoCgroup2)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup parent: %w", err)
	}
	if !slices.Contains(need, "memory") {
		need = append([]string{"memory"}, need...)
	}
	missing := enableControllers(parent, need)
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("open cgroup %s: %w", dir, err)
	}
	cg := &cgroup{dir: dir, fd: fd, missing: missing, noMemory: missing["memory"]}
	if cg.noMemory == nil {
		// An OOM kill takes the whole engine: a tensor-parallel engine
		// that lost one worker hangs rather than exits.
		_ = os.WriteFile(filepath.Join(dir, "memory.oom.group"), []byte("1"), 0o644)
	}
	return cg, nil
}

func hasController(path, c string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, f := range strings.Fields(string(b)) {
		if f == c {
			return true
		}
	}
	return false
}

// oomKills reads the oom_kill counter of memory.events: how many of the
// cgroup's processes any OOM killer (the cgroup's own limit or the
// kernel's under global memory pressure) killed.
func (c *cgroup) oomKills() (int, error) {
	if c.noMemory != nil {
		return 0, c.noMemory
	}
	return parseOOMKills(filepath.Join(c.dir, "memory.events"))
}

func parseOOMKills(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("read memory events: %w", err)
	}
	defer f.Close() //nolint:errcheck // read only
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == "oom_kill" {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return 0, fmt.Errorf("memory.events oom_kill %q: %w", v, err)
			}
			return n, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read memory events: %w", err)
	}
	return 0, fmt.Errorf("%s has no oom_kill line", path)
}

// remove closes the cgroup and deletes its directory (and any cgroups
// the engine made below it) once it is empty, waiting a little for
// processes that are still exiting.
func (c *cgroup) remove() error {
	_ = unix.Close(c.fd)
	return removeCgroupTree(c.dir, time.Now().Add(time.Second))
}
