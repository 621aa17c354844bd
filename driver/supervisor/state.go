package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/llmgw/llmgw/driver/procfs"
)

// File names inside a task's state dir.
const (
	SpecFile    = "spec.json"
	StartedFile = "started.json"
	EventsFile  = "events.jsonl"
	ExitFile    = "exit.json"
	LogFile     = "supervisor.log"
)

// SpecVersion is the version of Spec this binary writes. Version 2 added
// the engine's groups, resource limits and no_new_privs: a supervisor
// that reads only version 1 refuses a version 2 spec rather than run the
// engine without them.
const SpecVersion = 2

// minSpecVersion is the oldest spec this binary still reads (the spec of
// a task a driver before version 2 started, read for exec).
const minSpecVersion = 1

// Spec is what the supervisor runs.
type Spec struct {
	Version int `json:"version"`
	// Engine names the engine's descriptor (its load-progress lines);
	// empty reads the checkpoint-shard lines vLLM and SGLang print.
	Engine string `json:"engine,omitempty"`
	// Path is the engine executable: the canonical path the driver
	// checked against allowed_commands. Argv0 is the program name the
	// engine sees (the path as configured, which a Python venv's
	// interpreter needs to find its venv); Path when empty. Args exclude
	// the program name.
	Path  string   `json:"path"`
	Argv0 string   `json:"argv0,omitempty"`
	Args  []string `json:"args"`
	Env   []string `json:"env"`
	Dir   string   `json:"dir"`
	// Stdout and Stderr are Nomad's log FIFOs (or /dev/null); empty
	// discards the stream.
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// CgroupParent is a cgroup v2 directory under which the supervisor
	// creates the engine's own cgroup (for OOM-kill detection and for
	// killing every process of the engine); empty disables it.
	CgroupParent string `json:"cgroup_parent,omitempty"`
	// CgroupName is the engine's cgroup's directory name.
	CgroupName string `json:"cgroup_name,omitempty"`
	// UID and GID, when set, are the user the engine runs as; Groups its
	// supplementary groups (set, replacing the supervisor's, whenever UID
	// is).
	UID    *uint32  `json:"uid,omitempty"`
	GID    *uint32  `json:"gid,omitempty"`
	Groups []uint32 `json:"groups,omitempty"`
	// NoNewPrivs sets no_new_privs for the engine: set-user-ID bits and
	// file capabilities of what it executes grant nothing.
	NoNewPrivs bool `json:"no_new_privs,omitempty"`
	// Limits enforce the task's resources in the engine's cgroup.
	Limits Limits `json:"limits,omitzero"`
	// TailLines is how many of the last output lines the exit record
	// keeps.
	TailLines int `json:"tail_lines"`
}

// Started is what the supervisor records once the engine runs.
type Started struct {
	Supervisor procfs.Ref `json:"supervisor"`
	Engine     procfs.Ref `json:"engine"`
	// Cgroup is the engine's cgroup directory, empty when none;
	// CgroupError says why there is none when one was asked for.
	Cgroup      string `json:"cgroup,omitempty"`
	CgroupError string `json:"cgroup_error,omitempty"`
	// OOMError says why OOM kills are not detected although the engine
	// has a cgroup (no memory controller in it).
	OOMError string `json:"oom_error,omitempty"`
	// Limits are the resource limits written into the engine's cgroup
	// ("memory.max=134217728"); Unenforced those that could not be, each
	// with the reason. With Limits.Require, a non-empty Unenforced comes
	// with Error: the engine was not started.
	Limits     []string  `json:"limits,omitempty"`
	Unenforced []string  `json:"unenforced,omitempty"`
	At         time.Time `json:"at"`
	// Error is set instead of the rest when the engine could not start.
	Error string `json:"error,omitempty"`
}

// Exit is the engine's exit result.
type Exit struct {
	ExitCode  int  `json:"exit_code"`
	Signal    int  `json:"signal"`
	OOMKilled bool `json:"oom_killed"`
	// OOMDetection says how OOM kills were looked for ("cgroup v2
	// memory.events" or why not).
	OOMDetection string    `json:"oom_detection"`
	At           time.Time `json:"at"`
	// Tail holds the last lines the engine wrote to stderr (or to stdout
	// when it wrote nothing to stderr).
	Tail []string `json:"tail,omitempty"`
}

// Event is one notable line from the engine's output.
type Event struct {
	At          time.Time         `json:"at"`
	Message     string            `json:"message"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func readJSON(path string, v any) (bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("decode %s: %w", path, err)
	}
	return true, nil
}

// ReadSpec reads the spec in stateDir.
func ReadSpec(stateDir string) (Spec, error) {
	var s Spec
	ok, err := readJSON(filepath.Join(stateDir, SpecFile), &s)
	if err != nil {
		return Spec{}, err
	}
	if !ok {
		return Spec{}, fmt.Errorf("no %s in %s", SpecFile, stateDir)
	}
	if s.Version < minSpecVersion || s.Version > SpecVersion {
		return Spec{}, fmt.Errorf("%s: version %d, this binary reads versions %d to %d", SpecFile, s.Version, minSpecVersion, SpecVersion)
	}
	return s, nil
}

// ReadStarted reads the started record; ok is false when there is none.
func ReadStarted(stateDir string) (s Started, ok bool, err error) {
	ok, err = readJSON(filepath.Join(stateDir, StartedFile), &s)
	return s, ok, err
}

// ReadExit reads the exit record; ok is false while the engine runs.
func ReadExit(stateDir string) (e Exit, ok bool, err error) {
	ok, err = readJSON(filepath.Join(stateDir, ExitFile), &e)
	return e, ok, err
}
