package localnomad

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// DriverPolicy is what a local cluster adds to the llmgw driver's default
// client config, as an operator would: its tasks run the engines given
// (fake-engine, a copy of the real llama-server) through the task's command
// override, so allowed_commands names them; and
// on a host whose cgroup v2 hierarchy lacks the cpu or memory controller
// (cgroup v1, or a hybrid host as some CI machines are) the engines'
// resources cannot be enforced, so resource_limits is "best_effort" there.
// Engines run as the default user, nobody.
func DriverPolicy(engines ...string) string {
	quoted := make([]string, len(engines))
	for i, e := range engines {
		quoted[i] = fmt.Sprintf("%q", e)
	}
	s := "\n    allowed_commands = [" + strings.Join(quoted, ", ") + "]"
	if why := CgroupLimitsUnavailable(); why != "" {
		s += "\n    resource_limits  = \"best_effort\" # " + why
	}
	return s
}

// CgroupLimitsUnavailable says why this host cannot enforce cgroup v2
// limits on engines ("" when it can).
func CgroupLimitsUnavailable() string {
	var sfs unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &sfs); err != nil || sfs.Type != unix.CGROUP2_SUPER_MAGIC {
		return "/sys/fs/cgroup is not a cgroup v2 hierarchy"
	}
	b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
	if err != nil {
		return err.Error()
	}
	for _, c := range []string{"cpu", "memory"} {
		if !slices.Contains(strings.Fields(string(b)), c) {
			return "no " + c + " controller in /sys/fs/cgroup"
		}
	}
	return ""
}
