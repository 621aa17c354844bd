package supervisor

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// cgroup is the engine's own cgroup v2 directory.
type cgroup struct {
	dir string
	fd  int
}

// errNoCgroup2 says the parent is not on a cgroup v2 (unified) hierarchy.
var errNoCgroup2 = errors.New("not a cgroup v2 hierarchy")

// createCgroup makes <parent>/<name> on a cgroup v2 hierarchy with the
// memory controller enabled for it, and opens it so that the engine can be
// cloned straight into it.
func createCgroup(parent, name string) (*cgroup, error) {
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup parent: %w", err)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(parent, &sfs); err != nil {
		return nil, fmt.Errorf("statfs %s: %w", parent, err)
	}
	if sfs.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil, fmt.Errorf("%s: %w", parent, errNoCgroup2)
	}
	if !hasController(filepath.Join(parent, "cgroup.subtree_control"), "memory") {
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory"), 0o644); err != nil {
			return nil, fmt.Errorf("enable the memory controller under %s: %w", parent, err)
		}
	}
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("open cgroup %s: %w", dir, err)
	}
	return &cgroup{dir: dir, fd: fd}, nil
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

// kill ends every process left in the cgroup (cgroup.kill, Linux 5.14+).
func (c *cgroup) kill() {
	_ = os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0o644)
}

// remove deletes the cgroup once it is empty.
func (c *cgroup) remove() error {
	_ = unix.Close(c.fd)
	var err error
	for i := 0; i < 50; i++ {
		if err = os.Remove(c.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", c.dir, err)
}
