package driver

import (
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/driver/supervisor"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
)

// decodeConf decodes a plugin config body as Nomad would send it.
func decodeConf(t *testing.T, body string) (Config, error) {
	t.Helper()
	return DecodeConfig(encode(t, ConfigSpec(), body))
}

func TestPolicyConfigDefaults(t *testing.T) {
	c, err := decodeConf(t, ``)
	if err != nil {
		t.Fatal(err)
	}
	if c.AllowAnyCommand || c.AllowRoot || len(c.AllowedCommands) != 0 || len(c.AllowedUsers) != 0 {
		t.Errorf("defaults allow more than the engines' own executables as default_user: %+v", c)
	}
	if c.DefaultUser != "nobody" || c.ResourceLimits != LimitsEnforce || !c.NomadCgroup {
		t.Errorf("default_user %q resource_limits %q nomad_cgroup %v", c.DefaultUser, c.ResourceLimits, c.NomadCgroup)
	}
	if diff := cmp.Diff(DefaultEnvDenylist, c.EnvDenylist); diff != "" {
		t.Errorf("env_denylist default (-want +got):\n%s", diff)
	}
	c, err = decodeConf(t, `env_denylist = []
allowed_commands = ["/opt/vllm/bin/*"]
allowed_users = ["svc-*"]
supplementary_groups = ["video"]`)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.EnvDenylist) != 0 || c.AllowedCommands[0] != "/opt/vllm/bin/*" || c.AllowedUsers[0] != "svc-*" {
		t.Errorf("got %+v", c)
	}
}

func TestBadPolicyConfig(t *testing.T) {
	for body, want := range map[string]string{
		`resource_limits = "strict"`:                              `resource_limits: "strict" is not one of "enforce", "best_effort"`,
		"cgroup_parent = \"\"\nnomad_cgroup = false":              `resource_limits = "best_effort"`,
		`allowed_commands = ["vllm"]`:                             `allowed_commands[0]: "vllm" is not an absolute path`,
		`allowed_commands = ["/opt/[x"]`:                          `allowed_commands[0]: "/opt/[x"`,
		`default_user = "no-such-user-llmgw"`:                     `default_user: look up "no-such-user-llmgw"`,
		`default_user = "root"`:                                   `default_user: "root" is uid 0: engines do not run as root unless allow_root = true`,
		`supplementary_groups = ["no-such-group-llmgw"]`:          `supplementary_groups[0]: group "no-such-group-llmgw"`,
		`env_denylist = ["LD_[*"]`:                                `env_denylist[0]: "LD_[*" is not a variable name or glob`,
		`allowed_env = ["A=B"]`:                                   `allowed_env[0]`,
		`allowed_users = [""]`:                                    `allowed_users[0]`,
		`engines { vllm = "bin/vllm" }`:                           `engines.vllm: "bin/vllm" is a relative path`,
		"default_user = \"\"":                                     `default_user: must name a user`,
		"resource_limits = \"best_effort\"\ncgroup_parent = \"\"": "",
	} {
		_, err := decodeConf(t, body)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v, want it accepted", body, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: got %v, want an error containing %q", body, err, want)
		}
	}
}

// executables lays out dir/bin with an engine, a symlink to it, another
// program, a symlink to /bin/sh, a python3, and dir/task as a task dir.
func executables(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	for _, d := range []string{bin, filepath.Join(dir, "task"), filepath.Join(dir, "evil")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"bin/engine", "bin/other", "bin/python3", "evil/engine"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, to := range map[string]string{"bin/link": "engine", "bin/sh": "/bin/sh"} {
		if err := os.Symlink(to, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	// Canonical from here on (t.TempDir may sit below a symlink).
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	return real
}

func TestResolveCommand(t *testing.T) {
	dir := executables(t)
	bin := filepath.Join(dir, "bin")
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":/usr/bin:/bin") // the plugin's own PATH
	base := DefaultConfig()
	base.Engines = Engines{
		"vllm":   filepath.Join(bin, "engine"),
		"sglang": "python3", // found on the plugin's PATH: bin/python3
	}
	cases := []struct {
		name     string
		conf     func(*Config)
		tc       TaskConfig
		pathEnv  string
		wantExe  string
		wantArg0 string
		err      string
	}{
		{name: "engine's own executable", tc: TaskConfig{Engine: "vllm"}, wantExe: bin + "/engine", wantArg0: bin + "/engine"},
		{name: "a symlink to the engine's executable is the same file",
			tc: TaskConfig{Engine: "vllm", Command: bin + "/link"}, wantExe: bin + "/engine", wantArg0: bin + "/link"},
		{name: "a relative command resolves in the task dir",
			tc: TaskConfig{Engine: "vllm", Command: "../bin/engine"}, wantExe: bin + "/engine", wantArg0: dir + "/bin/engine"},
		{name: "another engine's executable is not this engine's",
			tc: TaskConfig{Engine: "vllm", Command: bin + "/python3"}, err: `command: "` + bin + `/python3" is not an allowed executable (engines.vllm: ` + bin + `/engine; allowed_commands is empty); set allowed_commands, or allow_any_command = true, in the plugin config`},
		{name: "the sglang interpreter runs sglang", tc: TaskConfig{Engine: "sglang"}, wantExe: bin + "/python3", wantArg0: bin + "/python3"},
		{name: "the sglang interpreter is not a command engine",
			tc: TaskConfig{Engine: "command", Command: "python3"}, err: `command: "python3" (` + bin + `/python3) is not an allowed executable (allowed_commands is empty)`},
		{name: "a shell", tc: TaskConfig{Engine: "command", Command: "/bin/sh"}, err: `command: "/bin/sh"`},
		{name: "a symlink to a shell inside an allowed glob",
			conf: func(c *Config) { c.AllowedCommands = []string{bin + "/*"} },
			tc:   TaskConfig{Engine: "command", Command: bin + "/sh"}, err: `command: "` + bin + `/sh" (` + sh + `) is not an allowed executable`},
		{name: "../ out of the task dir to a symlinked shell",
			conf: func(c *Config) { c.AllowedCommands = []string{bin + "/*"} },
			tc:   TaskConfig{Engine: "command", Command: "../bin/sh"}, err: `is not an allowed executable`},
		{name: "a glob of allowed_commands",
			conf: func(c *Config) { c.AllowedCommands = []string{"/nonexistent/x", bin + "/o*"} },
			tc:   TaskConfig{Engine: "command", Command: bin + "/other"}, wantExe: bin + "/other", wantArg0: bin + "/other"},
		{name: "an allowed_commands entry that is a symlink allows its target",
			conf: func(c *Config) { c.AllowedCommands = []string{bin + "/link"} },
			tc:   TaskConfig{Engine: "command", Command: bin + "/engine"}, wantExe: bin + "/engine", wantArg0: bin + "/engine"},
		{name: "the engine's name found on a PATH the task chose",
			conf:    func(c *Config) { c.Engines = Engines{"vllm": "engine", "sglang": "python3"} },
			tc:      TaskConfig{Engine: "vllm"},
			pathEnv: dir + "/evil", err: `engines.vllm: "engine" (` + dir + `/evil/engine) is not an allowed executable (engines.vllm: ` + bin + `/engine; allowed_commands is empty)`},
		{name: "allow_any_command", conf: func(c *Config) { c.AllowAnyCommand = true },
			tc: TaskConfig{Engine: "command", Command: bin + "/sh"}, wantExe: sh, wantArg0: bin + "/sh"},
		{name: "not found", tc: TaskConfig{Engine: "command", Command: dir + "/nope"}, err: `command: executable "` + dir + `/nope"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conf := base
			if c.conf != nil {
				c.conf(&conf)
			}
			pathEnv := c.pathEnv
			if pathEnv == "" {
				pathEnv = os.Getenv("PATH")
			}
			argv0, exe, err := resolveCommand(conf, c.tc, filepath.Join(dir, "task"), pathEnv)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %q, %q, %v; want an error containing %q", argv0, exe, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if exe != c.wantExe || argv0 != c.wantArg0 {
				t.Errorf("got argv0 %q exe %q, want %q %q", argv0, exe, c.wantArg0, c.wantExe)
			}
		})
	}
}

func TestCheckEnvPolicy(t *testing.T) {
	host := map[string]string{"LD_LIBRARY_PATH": "/usr/local/cuda/lib64"}
	hostEnv := func(k string) (string, bool) { v, ok := host[k]; return v, ok }
	conf := DefaultConfig()
	for _, c := range []struct {
		name            string
		conf            func(*Config)
		taskEnv, cfgEnv map[string]string
		err             string
	}{
		{name: "nothing denied", cfgEnv: map[string]string{"VLLM_LOGGING_LEVEL": "DEBUG"}, taskEnv: map[string]string{"PATH": "/bin"}},
		{name: "LD_PRELOAD in the task config", cfgEnv: map[string]string{"LD_PRELOAD": "/alloc/data/x.so"},
			err: `env.LD_PRELOAD: denied by env_denylist (set allowed_env = ["LD_PRELOAD"] in the plugin config to allow it)`},
		{name: "PYTHONPATH in the task config", cfgEnv: map[string]string{"PYTHONPATH": "/alloc/data"}, err: `env.PYTHONPATH: denied`},
		{name: "the client's own LD_LIBRARY_PATH", taskEnv: map[string]string{"LD_LIBRARY_PATH": "/usr/local/cuda/lib64"}},
		{name: "the job's LD_LIBRARY_PATH", taskEnv: map[string]string{"LD_LIBRARY_PATH": "/alloc/data"},
			err: `task environment LD_LIBRARY_PATH: denied by env_denylist; the job sets it (its env block or a template), the client's environment does not (set allowed_env = ["LD_LIBRARY_PATH"]`},
		{name: "the job's BASH_ENV", taskEnv: map[string]string{"BASH_ENV": "/alloc/data/rc"}, err: `task environment BASH_ENV`},
		{name: "allowed_env", conf: func(c *Config) { c.AllowedEnv = []string{"LD_PRELOAD", "PYTHON*"} },
			cfgEnv: map[string]string{"LD_PRELOAD": "x", "PYTHONPATH": "y"}},
		{name: "allowed_env is not the whole glob", conf: func(c *Config) { c.AllowedEnv = []string{"LD_PRELOAD"} },
			cfgEnv: map[string]string{"LD_AUDIT": "x"}, err: `env.LD_AUDIT`},
		{name: "env_denylist = []", conf: func(c *Config) { c.EnvDenylist = nil }, cfgEnv: map[string]string{"LD_PRELOAD": "x"}},
		{name: "an env_denylist of one's own", conf: func(c *Config) { c.EnvDenylist = []string{"HF_TOKEN"} },
			cfgEnv: map[string]string{"LD_PRELOAD": "x", "HF_TOKEN": "t"}, err: `env.HF_TOKEN`},
	} {
		t.Run(c.name, func(t *testing.T) {
			cf := conf
			cf.EnvDenylist = append([]string(nil), conf.EnvDenylist...)
			if c.conf != nil {
				c.conf(&cf)
			}
			err := checkEnvPolicy(cf, c.taskEnv, c.cfgEnv, hostEnv)
			if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
				t.Errorf("got %v, want %q", err, c.err)
			}
		})
	}
}

func TestResolveUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: resolveUser refuses users other than the driver's own when the driver is not root")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody here: %v", err)
	}
	if _, err := user.Lookup("daemon"); err != nil {
		t.Skipf("no user daemon here: %v", err)
	}
	video, err := user.LookupGroup("video")
	if err != nil {
		t.Skipf("no group video here: %v", err)
	}
	conf := DefaultConfig()
	u, err := resolveUser(conf, "")
	if err != nil {
		t.Fatal(err)
	}
	if u.Name != "nobody" || nobody.Uid != itoa(u.UID) || nobody.Gid != itoa(u.GID) {
		t.Errorf("default user %+v, want nobody %s:%s", u, nobody.Uid, nobody.Gid)
	}
	for _, c := range []struct {
		name, user string
		conf       func(*Config)
		err        string
	}{
		{name: "a user not allowed", user: "daemon", err: `user: "daemon" is not in allowed_users (engines run as default_user "nobody"; set allowed_users in the plugin config to let tasks choose this user)`},
		{name: "root", user: "root",
			err: `user: "root" is uid 0: engines do not run as root (set allow_root = true in the plugin config)`},
		{name: "root allowed", user: "root", conf: func(c *Config) { c.AllowedUsers = []string{"root"}; c.AllowRoot = true }},
		{name: "a glob", user: "daemon", conf: func(c *Config) { c.AllowedUsers = []string{"dae*"} }},
		{name: "the default user by name", user: "nobody"},
		{name: "unknown", user: "no-such-user-llmgw", err: `user: look up "no-such-user-llmgw"`},
		{name: "root allowed but not in allowed_users", user: "root", conf: func(c *Config) { c.AllowRoot = true }, err: `user: "root" is not in allowed_users`},
	} {
		t.Run(c.name, func(t *testing.T) {
			cf := conf
			if c.conf != nil {
				c.conf(&cf)
			}
			_, err := resolveUser(cf, c.user)
			if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
				t.Errorf("got %v, want %q", err, c.err)
			}
		})
	}
	conf.SupplementaryGroups = []string{"video"}
	u, err = resolveUser(conf, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Groups) == 0 || itoa(u.Groups[len(u.Groups)-1]) != video.Gid {
		t.Errorf("groups %v, want the video group (%s) added", u.Groups, video.Gid)
	}
	uid, gid, groups := u.credentials()
	if uid == nil || gid == nil || *uid != u.UID || *gid != u.GID || len(groups) != len(u.Groups) {
		t.Errorf("credentials %v %v %v of %+v", uid, gid, groups, u)
	}
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// openTempDir is a t.TempDir that every user can reach (t.TempDir's
// parent is mode 0700).
func openTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestCheckAccess(t *testing.T) {
	dir := openTempDir(t)
	closed := filepath.Join(dir, "closed")
	open := filepath.Join(dir, "open")
	grp := filepath.Join(dir, "group")
	for d, mode := range map[string]os.FileMode{closed: 0o700, open: 0o755, grp: 0o750} {
		if err := os.Mkdir(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	exe := filepath.Join(open, "engine")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	stranger := engineUser{Name: "stranger", UID: 4242, GID: 4242}
	member := stranger
	member.Groups = []uint32{uint32(os.Getgid())}
	if err := checkAccess(open, stranger, accessX); err != nil {
		t.Errorf("0755 dir: %v", err)
	}
	if err := checkAccess(filepath.Join(closed), stranger, accessX); err == nil || !strings.Contains(err.Error(), "stranger (uid 4242) cannot use "+closed+" (mode 0700") {
		t.Errorf("0700 dir: got %v", err)
	}
	if err := os.WriteFile(filepath.Join(closed, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkAccess(filepath.Join(closed, "f"), stranger, accessR); err == nil || !strings.Contains(err.Error(), "cannot reach "+filepath.Join(closed, "f")+": "+closed+" is mode 0700") {
		t.Errorf("file in a 0700 dir: got %v", err)
	}
	if err := checkAccess(exe, stranger, accessX); err == nil || !strings.Contains(err.Error(), "(mode 0700") {
		t.Errorf("0700 executable: got %v", err)
	}
	if err := checkAccess(grp, stranger, accessX); err == nil {
		t.Error("0750 dir of another group: accessible")
	}
	if err := checkAccess(grp, member, accessX); err != nil {
		t.Errorf("0750 dir of a supplementary group: %v", err)
	}
	if err := checkAccess(closed, engineUser{Name: "root"}, accessX); err != nil {
		t.Errorf("root: %v", err)
	}
}

func TestUserEnv(t *testing.T) {
	taskDir := t.TempDir()
	if err := os.Mkdir(filepath.Join(taskDir, "local"), 0o777); err != nil {
		t.Fatal(err)
	}
	host := map[string]string{"HOME": "/root", "USER": "root"}
	hostEnv := func(k string) (string, bool) { v, ok := host[k]; return v, ok }
	u := engineUser{Name: "nobody", UID: 65534, GID: 65534, Home: "/nonexistent"}
	conf := DefaultConfig()
	got := userEnv(conf, map[string]string{"HOME": "/root", "USER": "root"}, nil, u, taskDir, hostEnv)
	want := map[string]string{"HOME": filepath.Join(taskDir, "local"), "USER": "nobody", "LOGNAME": "nobody"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("client's HOME replaced (-want +got):\n%s", diff)
	}
	// What the job or the operator set stays.
	conf.ExtraEnv = map[string]string{"LOGNAME": "svc"}
	got = userEnv(conf, map[string]string{"HOME": "/srv/cache"}, map[string]string{"USER": "me"}, u, taskDir, hostEnv)
	if diff := cmp.Diff(map[string]string{}, got); diff != "" {
		t.Errorf("set by the job and the operator (-want +got):\n%s", diff)
	}
	// A home the user owns is used.
	home := t.TempDir()
	own := engineUser{Name: "me", UID: uint32(os.Getuid()) + 1, Home: home}
	if err := os.Chown(home, int(own.UID), -1); err != nil {
		t.Skipf("cannot chown a home dir here: %v", err)
	}
	if got := userEnv(DefaultConfig(), nil, nil, own, taskDir, hostEnv)["HOME"]; got != home {
		t.Errorf("HOME %q, want the user's own %q", got, home)
	}
	if got := userEnv(DefaultConfig(), nil, nil, engineUser{Name: "root"}, taskDir, hostEnv); got != nil {
		t.Errorf("root engine: %v, want the environment left alone", got)
	}
}

func TestCPUWeight(t *testing.T) {
	for shares, want := range map[int64]uint64{0: 0, 1: 1, 2: 1, 1024: 100, 262144: 10000, 1 << 20: 10000} {
		if got := cpuWeight(shares); got != want {
			t.Errorf("cpuWeight(%d) = %d, want %d", shares, got, want)
		}
	}
	last := uint64(0)
	for s := int64(2); s < 262144; s += 97 {
		w := cpuWeight(s)
		if w < last || w < 1 || w > 10000 {
			t.Fatalf("cpuWeight(%d) = %d after %d: not monotonic in 1..10000", s, w, last)
		}
		last = w
	}
}

func TestLimitsFor(t *testing.T) {
	const mib = 1 << 20
	res := func(shares, mem, memMax int64, cores string, ticks float64) *driverpb.Resources {
		return &driverpb.Resources{
			AllocatedResources: &driverpb.AllocatedTaskResources{
				Cpu:    &driverpb.AllocatedCpuResources{CpuShares: shares},
				Memory: &driverpb.AllocatedMemoryResources{MemoryMb: mem, MemoryMaxMb: memMax},
			},
			LinuxResources: &driverpb.LinuxResources{CpuShares: shares, CpusetCpus: cores, PercentTicks: ticks,
				MemoryLimitBytes: max(mem, memMax) * mib},
		}
	}
	enforce, hard := DefaultConfig(), DefaultConfig()
	hard.CPUHardLimit, hard.ResourceLimits = true, LimitsBestEffort
	for _, c := range []struct {
		name string
		conf Config
		res  *driverpb.Resources
		want supervisor.Limits
	}{
		{"memory is the hard limit", enforce, res(1024, 300, 0, "", 0),
			supervisor.Limits{CPUWeight: 100, MemoryMax: 300 * mib, Require: true}},
		{"memory_max: memory is protected, memory_max the limit", enforce, res(500, 300, 600, "", 0),
			supervisor.Limits{CPUWeight: cpuWeight(500), MemoryMax: 600 * mib, MemoryLow: 300 * mib, Require: true}},
		{"memory_max = -1: no hard limit", enforce, res(500, 300, -1, "", 0),
			supervisor.Limits{CPUWeight: cpuWeight(500), MemoryMax: -1, MemoryLow: 300 * mib, Require: true}},
		{"cores", enforce, res(4000, 1024, 0, "2,3", 0),
			supervisor.Limits{CPUWeight: cpuWeight(4000), Cpuset: "2,3", MemoryMax: 1024 * mib, Require: true}},
		{"cpu_hard_limit", hard, res(1000, 100, 0, "", 0.25),
			supervisor.Limits{CPUWeight: cpuWeight(1000), CPUMax: itoa(uint32(0.25*cpuPeriod*float64(runtime.NumCPU()))) + " 100000", MemoryMax: 100 * mib}},
		{"nothing allocated", enforce, &driverpb.Resources{}, supervisor.Limits{Require: true}},
		{"only the Linux resources", enforce, &driverpb.Resources{LinuxResources: &driverpb.LinuxResources{CpuShares: 1024, MemoryLimitBytes: 5 * mib}},
			supervisor.Limits{CPUWeight: 100, MemoryMax: 5 * mib, Require: true}},
	} {
		if diff := cmp.Diff(c.want, limitsFor(c.conf, c.res)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}

func TestCheckStateDir(t *testing.T) {
	alloc := t.TempDir()
	good := filepath.Join(alloc, "task", "private", "llmgw", "task-1")
	if err := os.MkdirAll(good, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := checkStateDir(good, alloc); err != nil {
		t.Errorf("the driver's own state dir: %v", err)
	}
	open := filepath.Join(alloc, "task", "private", "llmgw", "task-2")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := checkStateDir(open, alloc); err == nil || !strings.Contains(err.Error(), "mode 0777") {
		t.Errorf("a world-writable state dir: %v", err)
	}
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(alloc, "task", "private", "swapped")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(elsewhere, "task-3"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := checkStateDir(filepath.Join(alloc, "task", "private", "swapped", "task-3"), alloc); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("a state dir through a symlink: %v", err)
	}
	if err := checkStateDir(elsewhere, alloc); err == nil {
		t.Error("a state dir outside the alloc dir accepted")
	}
}

func TestCgroupParentFor(t *testing.T) {
	conf := DefaultConfig()
	for name, p := range map[string]string{
		"no path":             "",
		"cgroup v1 partition": "/sys/fs/cgroup/cpuset/nomad/share",
		"not a cgroup":        filepath.Join(t.TempDir(), "share.slice", "a.t.scope"),
	} {
		res := &driverpb.Resources{LinuxResources: &driverpb.LinuxResources{CpusetCgroup: p}}
		if got := cgroupParentFor(conf, res); got != conf.CgroupParent {
			t.Errorf("%s: %q, want cgroup_parent %q", name, got, conf.CgroupParent)
		}
	}
}
