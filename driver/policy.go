package driver

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/llmgw/llmgw/driver/supervisor"
	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
)

// This file holds what makes the driver safe to enable on a shared
// cluster: which executables a task may run (allowed_commands), who
// engines run as (default_user, allowed_users, allow_root), which
// environment variables a job may not set (env_denylist), and how a
// task's resources become cgroup v2 limits (resource_limits). Every check
// runs in StartTask before the supervisor is launched, and every refusal
// names the field at fault and the plugin option that would allow it.

// validatePolicy checks the policy settings of the plugin configuration.
func (c *Config) validatePolicy() error {
	switch c.ResourceLimits {
	case LimitsEnforce, LimitsBestEffort:
	default:
		return fmt.Errorf("resource_limits: %q is not one of %q, %q", c.ResourceLimits, LimitsEnforce, LimitsBestEffort)
	}
	if c.CgroupParent == "" && !c.NomadCgroup && c.ResourceLimits == LimitsEnforce {
		return fmt.Errorf(`cgroup_parent: "" (and nomad_cgroup = false) gives engines no cgroup, so resource_limits = %q would refuse every task; set cgroup_parent, or resource_limits = %q`, LimitsEnforce, LimitsBestEffort)
	}
	for _, e := range engine.Engines() {
		// An executable is a bare name (looked up on PATH) or absolute: a
		// relative path would mean one file to the check and another
		// from the task dir the engine starts in.
		if x := c.Engines.Executable(e); strings.Contains(x, "/") && !filepath.IsAbs(x) {
			return fmt.Errorf("engines.%s: %q is a relative path (give an absolute path, or a bare name looked up on PATH)", e, x)
		}
	}
	for i, p := range c.AllowedCommands {
		field := fmt.Sprintf("allowed_commands[%d]", i)
		if !filepath.IsAbs(p) {
			return fmt.Errorf("%s: %q is not an absolute path (a path or glob such as \"/opt/vllm/bin/*\")", field, p)
		}
		if _, err := filepath.Match(p, ""); err != nil {
			return fmt.Errorf("%s: %q: %w", field, p, err)
		}
	}
	for i, p := range c.AllowedUsers {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			return fmt.Errorf("allowed_users[%d]: %q is not a user name or glob", i, p)
		}
	}
	for _, l := range []struct {
		field string
		pats  []string
	}{{"env_denylist", c.EnvDenylist}, {"allowed_env", c.AllowedEnv}} {
		for i, p := range l.pats {
			if _, err := path.Match(p, ""); err != nil || p == "" || strings.ContainsAny(p, "=\x00") {
				return fmt.Errorf("%s[%d]: %q is not a variable name or glob", l.field, i, p)
			}
		}
	}
	if c.DefaultUser == "" {
		return errors.New(`default_user: must name a user (for example "nobody", or a dedicated "llmgw" user)`)
	}
	u, err := lookupEngineUser(c.DefaultUser)
	if err != nil {
		return fmt.Errorf("default_user: %w (create the user, or set default_user to an existing one)", err)
	}
	if u.UID == 0 && !c.AllowRoot {
		return fmt.Errorf("default_user: %q is uid 0: engines do not run as root unless allow_root = true", c.DefaultUser)
	}
	if _, err := c.supplementaryGIDs(); err != nil {
		return err
	}
	return nil
}

func (c *Config) supplementaryGIDs() ([]uint32, error) {
	var out []uint32
	for i, g := range c.SupplementaryGroups {
		grp, err := user.LookupGroup(g)
		if err != nil {
			if _, nerr := strconv.ParseUint(g, 10, 32); nerr == nil {
				grp, err = user.LookupGroupId(g)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("supplementary_groups[%d]: group %q: %w", i, g, err)
		}
		id, err := strconv.ParseUint(grp.Gid, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("supplementary_groups[%d]: gid of %q: %w", i, g, err)
		}
		out = append(out, uint32(id))
	}
	return out, nil
}

// engineUser is who an engine runs as.
type engineUser struct {
	Name     string
	UID, GID uint32
	Groups   []uint32
	Home     string
}

func (u engineUser) String() string { return fmt.Sprintf("%s (uid %d)", u.Name, u.UID) }

func lookupEngineUser(name string) (engineUser, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return engineUser{}, fmt.Errorf("look up %q: %w", name, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return engineUser{}, fmt.Errorf("uid of %q: %w", name, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return engineUser{}, fmt.Errorf("gid of %q: %w", name, err)
	}
	eu := engineUser{Name: name, UID: uint32(uid), GID: uint32(gid), Home: u.HomeDir}
	// The user's own groups; where they cannot be listed the engine gets
	// fewer groups, never more.
	if ids, err := u.GroupIds(); err == nil {
		for _, s := range ids {
			if g, err := strconv.ParseUint(s, 10, 32); err == nil && uint32(g) != eu.GID {
				eu.Groups = append(eu.Groups, uint32(g))
			}
		}
	}
	return eu, nil
}

// resolveUser decides who the task's engine runs as: the task's user when
// allowed, else default_user; never uid 0 unless allow_root.
func resolveUser(conf Config, taskUser string) (engineUser, error) {
	name, field := taskUser, "user"
	if name == "" {
		name, field = conf.DefaultUser, "default_user"
	}
	u, err := lookupEngineUser(name)
	if err != nil {
		return engineUser{}, fmt.Errorf("%s: %w", field, err)
	}
	if u.UID == 0 && !conf.AllowRoot {
		return engineUser{}, fmt.Errorf("%s: %q is uid 0: engines do not run as root (set allow_root = true in the plugin config)", field, name)
	}
	if field == "user" && name != conf.DefaultUser && !matchAny(path.Match, conf.AllowedUsers, name) {
		return engineUser{}, fmt.Errorf("user: %q is not in allowed_users (engines run as default_user %q; set allowed_users in the plugin config to let tasks choose this user)", name, conf.DefaultUser)
	}
	extra, err := conf.supplementaryGIDs()
	if err != nil {
		return engineUser{}, err
	}
	for _, g := range extra {
		if g != u.GID && !slices.Contains(u.Groups, g) {
			u.Groups = append(u.Groups, g)
		}
	}
	if euid := uint32(os.Geteuid()); euid != 0 && u.UID != euid {
		return engineUser{}, fmt.Errorf("%s: %s: the driver runs as uid %d and cannot start engines as another user (run the Nomad client as root)", field, u, euid)
	}
	return u, nil
}

// credentials returns the uid, gid and groups for the supervisor spec:
// none when the driver is not root (the engine then runs as the driver's
// user, which resolveUser made sure is u).
func (u engineUser) credentials() (uid, gid *uint32, groups []uint32) {
	if os.Geteuid() != 0 {
		return nil, nil, nil
	}
	return &u.UID, &u.GID, slices.Clone(u.Groups)
}

func matchAny(match func(pattern, name string) (bool, error), patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := match(p, name); ok {
			return true
		}
	}
	return false
}

// resolveCommand finds the executable of the task (its command, else the
// engine's configured one) and checks it against the allowlist. argv0 is
// the path as found (what the engine sees as its name); exe is the file
// that will be executed: absolute, with every symlink and ./.. resolved.
// That canonical path is what is compared with allowed_commands (each
// entry canonicalised the same way), and what the supervisor executes, so
// a symlink swapped after the check changes nothing.
func resolveCommand(conf Config, tc TaskConfig, taskDir, pathEnv string) (argv0, exe string, err error) {
	name, field := tc.Command, "command"
	if name == "" {
		name, field = conf.Engines.Executable(tc.Engine), "engines."+tc.Engine
	}
	argv0, err = findExecutable(name, taskDir, pathEnv)
	if err != nil {
		hint := fmt.Sprintf("set command in the task config or engines { %s = ... } in the plugin config", tc.Engine)
		if field == "command" {
			hint = "check the task config's command"
		}
		return "", "", fmt.Errorf("%s: %w; %s", field, err, hint)
	}
	exe, err = canonical(argv0)
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", field, err)
	}
	if conf.AllowAnyCommand {
		return argv0, exe, nil
	}
	var own string
	if ownExe := conf.Engines.Executable(tc.Engine); ownExe != "" {
		// The engine's own executable (the command engine has none),
		// found as the fingerprint finds it: on the plugin's PATH, never
		// the task's.
		if p, err := lookPath(ownExe, os.Getenv("PATH")); err == nil {
			own, _ = canonical(p)
		}
		if own != "" && own == exe {
			return argv0, exe, nil
		}
	}
	for _, p := range conf.AllowedCommands {
		if ok, _ := filepath.Match(canonicalPattern(p), exe); ok {
			return argv0, exe, nil
		}
	}
	spelled := strconv.Quote(name)
	if exe != name {
		spelled += " (" + exe + ")"
	}
	allowed := "allowed_commands is empty"
	if len(conf.AllowedCommands) > 0 {
		allowed = "allowed_commands: " + strings.Join(conf.AllowedCommands, ", ")
	}
	if own != "" {
		allowed = fmt.Sprintf("engines.%s: %s; %s", tc.Engine, own, allowed)
	}
	return "", "", fmt.Errorf("%s: %s is not an allowed executable (%s); set allowed_commands, or allow_any_command = true, in the plugin config", field, spelled, allowed)
}

// findExecutable finds name as exec would run it from the task dir: a
// bare name on pathEnv, a relative path under taskDir.
func findExecutable(name, taskDir, pathEnv string) (string, error) {
	if !strings.Contains(name, "/") {
		return lookPath(name, pathEnv)
	}
	if !filepath.IsAbs(name) {
		name = filepath.Join(taskDir, name)
	}
	if err := isExecutable(name); err != nil {
		return "", err
	}
	return name, nil
}

// canonical is p made absolute with every symlink resolved.
func canonical(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("resolve %q: %w", p, err)
	}
	return real, nil
}

// canonicalPattern canonicalises an allowed_commands entry: a path is
// resolved as a command is; in a glob, the directories before the first
// wildcard are.
func canonicalPattern(p string) string {
	p = filepath.Clean(p)
	i := strings.IndexAny(p, `*?[\`)
	if i < 0 {
		if c, err := canonical(p); err == nil {
			return c
		}
		return p
	}
	dir := p[:strings.LastIndexByte(p[:i], '/')+1]
	if c, err := canonical(dir); err == nil {
		return filepath.Join(c, p[len(dir):])
	}
	return p
}

// checkEnvPolicy refuses variables of env_denylist (less allowed_env)
// that the job set: in the task config's env, or in the task environment
// Nomad built with a value other than the client's own. Nomad passes the
// client's environment to drivers without filesystem isolation; a denied
// variable with the very value the client (and so this plugin) has is the
// operator's, and stays. extra_env is the operator's and never checked.
func checkEnvPolicy(conf Config, taskEnv, cfgEnv map[string]string, hostEnv func(string) (string, bool)) error {
	denied := func(k string) bool {
		return matchAny(path.Match, conf.EnvDenylist, k) && !matchAny(path.Match, conf.AllowedEnv, k)
	}
	hint := func(k string) string {
		return fmt.Sprintf("set allowed_env = [%q] in the plugin config to allow it", k)
	}
	for _, k := range slices.Sorted(maps.Keys(cfgEnv)) {
		if denied(k) {
			return fmt.Errorf("env.%s: denied by env_denylist (%s)", k, hint(k))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(taskEnv)) {
		if !denied(k) {
			continue
		}
		if v, ok := hostEnv(k); ok && v == taskEnv[k] {
			continue
		}
		return fmt.Errorf("task environment %s: denied by env_denylist; the job sets it (its env block or a template), the client's environment does not (%s)", k, hint(k))
	}
	return nil
}

// userEnv is what the driver sets for a non-root engine: HOME (the user's
// home if it is a directory the user owns, else the task's local dir),
// USER and LOGNAME, except where the operator (extra_env) or the job (the
// task config's env, or a task environment value other than the client's)
// set them.
func userEnv(conf Config, taskEnv, cfgEnv map[string]string, u engineUser, taskDir string, hostEnv func(string) (string, bool)) map[string]string {
	if u.UID == 0 {
		return nil
	}
	home := u.Home
	if !ownedDir(home, u.UID) {
		home = filepath.Join(taskDir, "local")
		if fi, err := os.Stat(home); err != nil || !fi.IsDir() {
			home = taskDir
		}
	}
	out := map[string]string{}
	for k, v := range map[string]string{"HOME": home, "USER": u.Name, "LOGNAME": u.Name} {
		if _, ok := conf.ExtraEnv[k]; ok {
			continue
		}
		if _, ok := cfgEnv[k]; ok {
			continue
		}
		if tv, ok := taskEnv[k]; ok {
			if hv, hok := hostEnv(k); !hok || hv != tv {
				continue
			}
		}
		out[k] = v
	}
	return out
}

func ownedDir(p string, uid uint32) bool {
	var st unix.Stat_t
	if p == "" || p == "/" || unix.Stat(p, &st) != nil {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Uid == uid
}

// Access bits for checkAccess.
const (
	accessX = 1
	accessW = 2
	accessR = 4
)

// checkAccess tells whether u can reach p (search permission on every
// directory on the way) and has the want bits on p itself, from the mode
// bits; a file or directory with a POSIX ACL is left to the kernel. It
// lets StartTask refuse, naming the directory, what would otherwise fail
// in the engine's exec or chdir.
func checkAccess(p string, u engineUser, want uint32) error {
	if u.UID == 0 {
		return nil
	}
	real, err := canonical(p)
	if err != nil {
		return err
	}
	parts := strings.Split(strings.TrimPrefix(real, "/"), "/")
	cur := "/"
	for i := -1; i < len(parts); i++ {
		if i >= 0 {
			cur = filepath.Join(cur, parts[i])
		}
		need := uint32(accessX)
		if i == len(parts)-1 {
			need = want
		}
		var st unix.Stat_t
		if err := unix.Stat(cur, &st); err != nil {
			return fmt.Errorf("stat %s: %w", cur, err)
		}
		if permits(st, u, need) || hasACL(cur) {
			continue
		}
		if cur != real {
			return fmt.Errorf("%s cannot reach %s: %s is mode %04o, owner uid %d gid %d", u, real, cur, st.Mode&0o7777, st.Uid, st.Gid)
		}
		return fmt.Errorf("%s cannot use %s (mode %04o, owner uid %d gid %d)", u, real, st.Mode&0o7777, st.Uid, st.Gid)
	}
	return nil
}

func permits(st unix.Stat_t, u engineUser, want uint32) bool {
	mode := st.Mode
	switch {
	case st.Uid == u.UID:
		return (mode>>6)&want == want
	case st.Gid == u.GID || slices.Contains(u.Groups, st.Gid):
		return (mode>>3)&want == want
	default:
		return mode&want == want
	}
}

func hasACL(p string) bool {
	n, err := unix.Getxattr(p, "system.posix_acl_access", nil)
	return err == nil && n > 0
}

// cpuPeriod is the cpu.max period (µs) of cpu_hard_limit, the kernel's
// default CFS period.
const cpuPeriod = 100000

// limitsFor maps the task's resources to cgroup v2 limits as Nomad's exec
// driver does on cgroup v2:
//
//   - cpu (MHz, Nomad's cpu_shares) → cpu.weight, by the conversion from
//     cgroup v1 shares to v2 weight that runc, crun and Nomad use;
//     cpu_hard_limit adds cpu.max = the task's fraction of the node's
//     compute (percent_ticks) × period × CPUs;
//   - cores → cpuset.cpus, the cores Nomad reserved;
//   - memory alone → memory.max; memory with memory_max → memory.low =
//     memory and memory.max = memory_max; memory_max = -1 → memory.low =
//     memory and no hard limit.
func limitsFor(conf Config, res *driverpb.Resources) supervisor.Limits {
	lr, ar := res.GetLinuxResources(), res.GetAllocatedResources()
	var l supervisor.Limits
	shares := lr.GetCpuShares()
	if shares == 0 {
		shares = ar.GetCpu().GetCpuShares()
	}
	l.CPUWeight = cpuWeight(shares)
	if conf.CPUHardLimit && lr.GetPercentTicks() > 0 {
		quota := max(int64(lr.GetPercentTicks()*cpuPeriod*float64(runtime.NumCPU())), 1000)
		l.CPUMax = fmt.Sprintf("%d %d", quota, cpuPeriod)
	}
	l.Cpuset = lr.GetCpusetCpus()
	const mib = 1 << 20
	mem, memMax := ar.GetMemory().GetMemoryMb(), ar.GetMemory().GetMemoryMaxMb()
	switch {
	case mem > 0 && memMax < 0:
		l.MemoryMax, l.MemoryLow = -1, mem*mib
	case mem > 0 && memMax > mem:
		l.MemoryMax, l.MemoryLow = memMax*mib, mem*mib
	case mem > 0:
		l.MemoryMax = mem * mib
	case lr.GetMemoryLimitBytes() > 0:
		l.MemoryMax = lr.GetMemoryLimitBytes()
	}
	l.Require = conf.ResourceLimits == LimitsEnforce
	return l
}

// cpuWeight converts cgroup v1 cpu.shares (2-262144, default 1024) to
// cgroup v2 cpu.weight (1-10000, default 100): a quadratic in log2(shares)
// that maps 2 → 1, 1024 → 100 and 262144 → 10000, so that weights keep
// their ratios as Nomad's exec driver computes them. 0 is unset.
func cpuWeight(shares int64) uint64 {
	switch {
	case shares <= 0:
		return 0
	case shares <= 2:
		return 1
	case shares >= 262144:
		return 10000
	}
	l := math.Log2(float64(shares))
	return uint64(math.Ceil(math.Pow(10, (l*l+125*l)/612.0-7.0/34.0)))
}

// cgroupParentFor is where the engine's cgroup goes: in the partition of
// the cgroup Nomad names for the task (nomad.slice/share.slice, or
// reserve.slice for tasks with reserved cores) when nomad_cgroup is on and
// Nomad runs on cgroup v2; else under cgroup_parent.
func cgroupParentFor(conf Config, res *driverpb.Resources) string {
	if !conf.NomadCgroup {
		return conf.CgroupParent
	}
	p := res.GetLinuxResources().GetCpusetCgroup()
	// cgroup v1 clients name a per-controller directory (or the shared
	// partition itself), which is not a place for the engine's cgroup.
	if p == "" || !strings.HasSuffix(p, ".scope") || !filepath.IsAbs(p) {
		return conf.CgroupParent
	}
	part := filepath.Dir(p)
	var sfs unix.Statfs_t
	if unix.Statfs(part, &sfs) != nil || sfs.Type != unix.CGROUP2_SUPER_MAGIC {
		return conf.CgroupParent
	}
	if _, err := os.Stat(filepath.Join(part, "cgroup.type")); err != nil {
		return conf.CgroupParent
	}
	return part
}

// protectPrivateDir makes the task's private dir, which holds the state
// dir, root's alone (owner root, mode 0700) when the engine does not run
// as root. Nomad makes it world-writable and owned by nobody; an engine
// that could write there could swap the driver's state dir for one of
// its own. Nomad itself only writes there as root.
func protectPrivateDir(stateDir string, u engineUser) error {
	if u.UID == 0 || os.Geteuid() != 0 {
		return nil
	}
	private := filepath.Dir(filepath.Dir(stateDir))
	fi, err := os.Lstat(private)
	if err != nil {
		return fmt.Errorf("task private dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("task private dir %s is not a directory", private)
	}
	if err := os.Chown(private, 0, 0); err != nil {
		return fmt.Errorf("task private dir: %w", err)
	}
	if err := os.Chmod(private, 0o700); err != nil {
		return fmt.Errorf("task private dir: %w", err)
	}
	return nil
}

// checkStateDir makes sure dir is a state dir the driver made: a real
// directory (no symlink on the way from the alloc dir), owned by root
// (when the driver is) and closed to everyone else, so that a spec.json
// read from it (for exec) was written by the driver, not by the engine.
func checkStateDir(dir, allocDir string) error {
	rel, err := filepath.Rel(allocDir, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("state dir %s is not under the alloc dir %s", dir, allocDir)
	}
	cur := allocDir
	for _, part := range strings.Split(rel, "/") {
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("state dir: %s is not a directory (%s)", cur, fi.Mode().Type())
		}
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if st.Uid != uint32(os.Geteuid()) || st.Mode&0o077 != 0 {
		return fmt.Errorf("state dir %s is owned by uid %d with mode %04o, not the driver's with 0700: not using it", dir, st.Uid, st.Mode&0o7777)
	}
	return nil
}
