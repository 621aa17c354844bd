package supervisor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/llmgw/llmgw/driver/procfs"
	"github.com/llmgw/llmgw/internal/atomicfile"
)

// ErrStart is wrapped by Launch errors that come from the engine failing
// to start (as opposed to the supervisor failing).
var ErrStart = errors.New("engine did not start")

// LimitsError is Launch's error when the supervisor did not start the
// engine because its resource limits could not be enforced
// (Limits.Require). It matches ErrStart and ErrLimits.
type LimitsError struct {
	// Unenforced lists each limit with why it could not be written.
	Unenforced []string
}

func (e *LimitsError) Error() string {
	return ErrLimits.Error() + ": " + strings.Join(e.Unenforced, "; ")
}

// Unwrap makes errors.Is find ErrStart and ErrLimits.
func (e *LimitsError) Unwrap() []error { return []error{ErrStart, ErrLimits} }

// Launched is a supervisor the driver started.
type Launched struct {
	Started Started
	// Reaped is closed once the driver has reaped the supervisor process.
	Reaped <-chan struct{}
}

// Launch writes spec into stateDir and starts exe (the driver binary) in
// supervisor mode in a new session, detached from the caller's stdio, and
// waits until the supervisor reports that the engine started or failed to.
// The caller's process reaps the supervisor when it exits, in a goroutine
// that ends then.
func Launch(exe, stateDir string, spec Spec, timeout time.Duration) (*Launched, error) {
	spec.Version = SpecVersion
	if err := atomicfile.WriteJSON(filepath.Join(stateDir, SpecFile), spec); err != nil {
		return nil, err
	}
	logPath := filepath.Join(stateDir, LogFile)
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open supervisor log: %w", err)
	}
	defer logf.Close() //nolint:errcheck // the child holds its own copy
	hsR, hsW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("handshake pipe: %w", err)
	}
	defer hsR.Close() //nolint:errcheck // read end, done with it below
	cmd := exec.Command(exe, Mode, stateDir)
	cmd.Dir = stateDir
	// A small environment of its own: the engine's comes from the spec.
	// One P is plenty for copying output and waiting, and keeps the
	// supervisor's threads and per-P caches (its private memory) down.
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "GOMAXPROCS=1"}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{hsW} // fd 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		_ = hsW.Close()
		return nil, fmt.Errorf("start supervisor %s: %w", exe, err)
	}
	_ = hsW.Close()
	// Not reaped before the goroutine below waits, so the pid is still it.
	self, _ := procfs.RefOf(cmd.Process.Pid)
	reaped := make(chan struct{})
	go func() {
		defer close(reaped)
		_ = cmd.Wait()
	}()

	type result struct {
		s   Started
		err error
	}
	got := make(chan result, 1)
	go func() {
		var s Started
		line, err := bufio.NewReader(hsR).ReadBytes('\n')
		if err == nil {
			err = json.Unmarshal(line, &s)
		}
		got <- result{s, err}
	}()
	select {
	case r := <-got:
		if r.err != nil {
			<-reaped
			cleanupAfterLaunch(self, stateDir, spec)
			return nil, fmt.Errorf("supervisor exited before reporting the engine's start: %w%s", r.err, logTail(logPath))
		}
		if r.s.Error != "" {
			if len(r.s.Unenforced) > 0 {
				return nil, &LimitsError{Unenforced: r.s.Unenforced}
			}
			return nil, fmt.Errorf("%w: %s", ErrStart, r.s.Error)
		}
		return &Launched{Started: r.s, Reaped: reaped}, nil
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-reaped
		cleanupAfterLaunch(self, stateDir, spec)
		return nil, fmt.Errorf("supervisor did not report the engine's start within %s%s", timeout, logTail(logPath))
	}
}

// cleanupAfterLaunch ends what a supervisor that died before reporting
// may have started: an engine whose start it recorded, and the engine's
// cgroup.
func cleanupAfterLaunch(sup procfs.Ref, stateDir string, spec Spec) {
	rem := Remains{Supervisor: sup}
	if s, ok, _ := ReadStarted(stateDir); ok {
		rem.Engine = s.Engine
	}
	if spec.CgroupParent != "" && spec.CgroupName != "" {
		rem.Cgroup = filepath.Join(spec.CgroupParent, spec.CgroupName)
	}
	_, _ = Cleanup(rem, RemainsTimeout)
}

func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 1000 {
		s = s[len(s)-1000:]
	}
	return "; supervisor log: " + s
}
