package supervisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Limits are the cgroup v2 settings that enforce a task's resources. The
// driver decides the numbers (from what Nomad allocated); the supervisor
// writes them into the engine's cgroup before the engine is cloned into
// it, so the engine never runs unlimited for a moment.
type Limits struct {
	// CPUWeight is cpu.weight (1-10000); 0 leaves it alone.
	CPUWeight uint64 `json:"cpu_weight,omitempty"`
	// CPUMax is cpu.max ("<quota> <period>" in µs); empty leaves it.
	CPUMax string `json:"cpu_max,omitempty"`
	// Cpuset is cpuset.cpus (the task's reserved cores); empty leaves it.
	Cpuset string `json:"cpuset_cpus,omitempty"`
	// MemoryMax is memory.max in bytes: 0 leaves it alone, -1 writes
	// "max" (no hard limit: memory_max = -1).
	MemoryMax int64 `json:"memory_max,omitempty"`
	// MemoryLow is memory.low in bytes; 0 leaves it alone.
	MemoryLow int64 `json:"memory_low,omitempty"`
	// Require refuses to start the engine when any of the above cannot
	// be written (resource_limits = "enforce"); otherwise the engine
	// starts and Started.Unenforced says what was not.
	Require bool `json:"require,omitempty"`
}

// limit is one interface file to write and the controller it needs.
type limit struct {
	file, controller, value string
}

// files lists what l writes, in the order it is written.
func (l Limits) files() []limit {
	var out []limit
	if l.CPUWeight > 0 {
		out = append(out, limit{"cpu.weight", "cpu", strconv.FormatUint(l.CPUWeight, 10)})
	}
	if l.CPUMax != "" {
		out = append(out, limit{"cpu.max", "cpu", l.CPUMax})
	}
	if l.Cpuset != "" {
		out = append(out, limit{"cpuset.cpus", "cpuset", l.Cpuset})
	}
	switch {
	case l.MemoryMax < 0:
		out = append(out, limit{"memory.max", "memory", "max"})
	case l.MemoryMax > 0:
		out = append(out, limit{"memory.max", "memory", strconv.FormatInt(l.MemoryMax, 10)})
	}
	if l.MemoryLow > 0 {
		out = append(out, limit{"memory.low", "memory", strconv.FormatInt(l.MemoryLow, 10)})
	}
	return out
}

// Any reports whether l sets anything.
func (l Limits) Any() bool { return len(l.files()) > 0 }

// controllers returns the controllers l needs, memory always (memory.events
// is how OOM kills are detected).
func (l Limits) controllers() []string {
	need := []string{"memory"}
	for _, f := range l.files() {
		if !slices.Contains(need, f.controller) {
			need = append(need, f.controller)
		}
	}
	return need
}

// String is how a limit reads in events: "memory.max=134217728".
func (f limit) String() string { return f.file + "=" + f.value }

// Unenforced lists every limit of l with why it is not enforced, for a
// host where the engine gets no cgroup at all.
func (l Limits) Unenforced(why string) []string {
	var out []string
	for _, f := range l.files() {
		out = append(out, f.String()+": "+why)
	}
	return out
}

// apply writes l into the cgroup dir. missing holds, per controller, why
// that controller is not available in the cgroup. It returns what was
// written and what was not (each with the reason).
func applyLimits(dir string, l Limits, missing map[string]error) (applied, unenforced []string) {
	for _, f := range l.files() {
		if err := missing[f.controller]; err != nil {
			unenforced = append(unenforced, f.String()+": "+err.Error())
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, f.file), []byte(f.value), 0o644); err != nil {
			unenforced = append(unenforced, f.String()+": "+err.Error())
			continue
		}
		applied = append(applied, f.String())
		if f.file == "memory.max" && f.value != "max" {
			// Past memory.max the kernel would push the engine into swap
			// (which stalls an inference server) before it OOM-kills it;
			// Nomad's cgroup v1 executor turns swappiness off for the same
			// reason. Where swap is not accounted the file is absent.
			swap := limit{"memory.swap.max", "memory", "0"}
			if os.WriteFile(filepath.Join(dir, swap.file), []byte(swap.value), 0o644) == nil {
				applied = append(applied, swap.String())
			}
		}
	}
	return applied, unenforced
}

// enableControllers makes each controller in need available to the
// children of parent: it writes "+<controller>" into cgroup.subtree_control
// of every cgroup from the hierarchy's root down to parent that does not
// have it yet, as Nomad does for nomad.slice. It returns, per controller
// that could not be made available, why.
func enableControllers(parent string, need []string) map[string]error {
	chain := []string{parent}
	for d := parent; ; {
		if _, err := os.Stat(filepath.Join(d, "cgroup.type")); err != nil {
			break // the hierarchy's root has no cgroup.type
		}
		up := filepath.Dir(d)
		if up == d {
			break
		}
		chain = append([]string{up}, chain...)
		d = up
	}
	missing := map[string]error{}
	for _, c := range need {
		for _, d := range chain {
			ctl := filepath.Join(d, "cgroup.subtree_control")
			if hasController(ctl, c) {
				continue
			}
			if !hasController(filepath.Join(d, "cgroup.controllers"), c) {
				avail, _ := os.ReadFile(filepath.Join(d, "cgroup.controllers"))
				missing[c] = fmt.Errorf("the %s controller is not available in %s (cgroup.controllers: %q; bound to a cgroup v1 hierarchy?)",
					c, d, strings.TrimSpace(string(avail)))
				break
			}
			if err := os.WriteFile(ctl, []byte("+"+c), 0o644); err != nil {
				missing[c] = fmt.Errorf("enable the %s controller under %s: %w", c, d, unwrapPath(err))
				break
			}
		}
	}
	return missing
}

// unwrapPath drops the *PathError wrapping (the path is in the message
// already).
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
