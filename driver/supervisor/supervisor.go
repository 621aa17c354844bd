// Package supervisor is the per-task process that owns an inference
// engine. The driver plugin re-executes its own binary in supervisor mode
// (`nomad-driver-llmgw supervise <state dir>`) in a new session, so that
// neither a plugin crash nor a Nomad client restart touches the engine.
//
// The supervisor starts the engine in its own process group (and cgroup,
// where cgroup v2 is available) with SIGKILL as its parent-death signal,
// copies its stdout and stderr into Nomad's log FIFOs (re-opening them
// when the reader goes away), notes load progress it recognises in the
// log, keeps the last lines of output, and when the engine exits kills
// what is left of it (its process group, its cgroup, and every orphan,
// which comes back to the supervisor as a child subreaper), waits until
// those are gone, and records the exit result atomically in the task's
// state dir. What a supervisor that was itself killed leaves behind,
// Cleanup ends (the driver calls it). The driver reads those files; they
// are the contract between the two processes:
//
//	spec.json        what to run (written by the driver)
//	started.json     supervisor and engine pid + start time, cgroup
//	events.jsonl     one JSON event per line (load progress)
//	exit.json        the engine's exit result (written once, last)
//	supervisor.log   the supervisor's own diagnostics
package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/llmgw/llmgw/driver/procfs"
	"github.com/llmgw/llmgw/internal/atomicfile"
)

// Mode is the first command-line argument that selects supervisor mode.
const Mode = "supervise"

// handshakeFD is the descriptor on which the supervisor reports the
// engine's start (or why it failed) to the driver that launched it.
const handshakeFD = 3

// forwarded are the signals the supervisor passes on to the engine's
// process group.
var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// Main runs the supervisor for the state dir in args and returns the
// process exit status. Call it from main before anything else.
func Main(args []string) int {
	logger := log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds)
	if len(args) != 1 {
		logger.Printf("usage: %s %s <state dir>", filepath.Base(os.Args[0]), Mode)
		return 2
	}
	// Orphans of the engine's (workers whose parent died) are reparented
	// to the supervisor rather than to init, so that it finds and kills
	// them after the engine exits, and reaps them.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		logger.Printf("cannot become a child subreaper (orphaned workers outside the engine's process group and cgroup will not be found): %v", err)
	}
	stateDir := args[0]
	// The handshake descriptor is inherited without close-on-exec; the
	// engine must not inherit it in turn (Launch would wait for its end).
	unix.CloseOnExec(handshakeFD)
	hs := os.NewFile(handshakeFD, "handshake")
	spec, err := ReadSpec(stateDir)
	if err != nil {
		report(hs, Started{Error: err.Error()}, logger)
		logger.Printf("read spec: %v", err)
		return 1
	}
	// Its own files go into its working directory, which is the state
	// dir from here on, by relative paths: renaming a directory above it
	// (the engine's user may own Nomad's task dir) cannot redirect them.
	if err := os.Chdir(stateDir); err != nil {
		report(hs, Started{Error: err.Error()}, logger)
		logger.Printf("enter the state dir: %v", err)
		return 1
	}
	if err := run(spec, ".", hs, logger); err != nil {
		logger.Printf("supervisor: %v", err)
		return 1
	}
	return 0
}

func report(hs *os.File, s Started, logger *log.Logger) {
	if hs == nil {
		return
	}
	if err := json.NewEncoder(hs).Encode(s); err != nil {
		logger.Printf("report start to the driver: %v", err)
	}
	_ = hs.Close()
}

// supervision is one engine's life under the supervisor, run as
// numbered steps: (1) decide its cgroup and limits, (2) start it, (3)
// forward signals, (4) copy its output, (5) wait for its exit, (6) end
// what it left, (7) record the exit. Each step's fields are set by it and
// read by the later ones; nothing runs concurrently with a step but the
// goroutines it starts.
type supervision struct {
	spec     Spec
	stateDir string
	hs       *os.File // the handshake to the driver, until reported
	logger   *log.Logger

	started Started
	cg      *cgroup // the engine's cgroup, nil when it runs without one
	cmd     *exec.Cmd
	pipes   [2]*os.File // read ends of the engine's stdout and stderr

	outTail, errTail *tail
	copiers          sync.WaitGroup
}

func run(spec Spec, stateDir string, hs *os.File, logger *log.Logger) error {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	// SIGCHLD: an orphan reparented to the supervisor exited; reap it.
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	defer signal.Stop(chld)

	sv := &supervision{spec: spec, stateDir: stateDir, hs: hs, logger: logger}
	self, err := procfs.RefOf(os.Getpid())
	if err != nil {
		report(hs, Started{Error: err.Error()}, logger)
		return err
	}
	sv.started = Started{Supervisor: self}
	if err := sv.limit(); err != nil { // 1
		return err
	}
	if err := sv.start(); err != nil { // 2
		return err
	}
	stopFwd := sv.forward(sigs, chld) // 3
	sv.copyOutput()                   // 4
	exit := sv.wait(stopFwd)          // 5
	sv.endRemains()                   // 6
	return sv.recordExit(exit)        // 7
}

// limit (step 1) creates the engine's cgroup with its limits, or says why
// there is none; an engine whose limits are required and cannot all be
// enforced is refused here, before anything is forked.
func (sv *supervision) limit() error {
	spec, started, logger := sv.spec, &sv.started, sv.logger
	if spec.CgroupParent != "" {
		cg, err := createCgroup(spec.CgroupParent, spec.CgroupName, spec.Limits.controllers())
		if err != nil {
			started.CgroupError = err.Error()
			logger.Printf("no cgroup for the engine (OOM kills will not be detected): %v", err)
		} else {
			sv.cg = cg
			started.Cgroup = cg.dir
			if cg.noMemory != nil {
				started.OOMError = cg.noMemory.Error()
				logger.Printf("the engine's cgroup has no memory controller (OOM kills will not be detected): %v", cg.noMemory)
			}
			started.Limits, started.Unenforced = applyLimits(cg.dir, spec.Limits, cg.missing)
		}
	}
	if sv.cg == nil {
		why := "no cgroup for the engine: " + started.CgroupError
		if spec.CgroupParent == "" {
			why = "no cgroup for the engine (cgroup_parent is empty)"
		}
		started.Unenforced = spec.Limits.Unenforced(why)
	}
	if len(started.Limits) > 0 {
		logger.Printf("resource limits of %s: %s", sv.cg.dir, strings.Join(started.Limits, ", "))
	}
	if len(started.Unenforced) > 0 {
		logger.Printf("resource limits not enforced: %s", strings.Join(started.Unenforced, "; "))
	}
	// Everything is decided before the fork: an engine whose limits are
	// required never runs without them.
	if spec.Limits.Require && len(started.Unenforced) > 0 {
		if sv.cg != nil {
			_ = sv.cg.remove()
		}
		err := fmt.Errorf("%w: %s", ErrLimits, strings.Join(started.Unenforced, "; "))
		report(sv.hs, Started{Error: err.Error(), Unenforced: started.Unenforced}, logger)
		return err
	}
	return nil
}

// command is the engine's command line, writing to outW and errW, cloned
// into the cgroup open as cgroupFD (none when negative).
func (sv *supervision) command(cgroupFD int, outW, errW *os.File) *exec.Cmd {
	spec := sv.spec
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cgroupFD >= 0 {
		attr.UseCgroupFD, attr.CgroupFD = true, cgroupFD
	}
	if spec.UID != nil && spec.GID != nil {
		attr.Credential = &syscall.Credential{Uid: *spec.UID, Gid: *spec.GID, Groups: spec.Groups}
	}
	argv0 := spec.Argv0
	if argv0 == "" {
		argv0 = spec.Path
	}
	return &exec.Cmd{
		Path:        spec.Path,
		Args:        append([]string{argv0}, spec.Args...),
		Env:         spec.Env,
		Dir:         spec.Dir,
		Stdout:      outW,
		Stderr:      errW,
		SysProcAttr: attr,
	}
}

// start (step 2) starts the engine in its cgroup (without it when cloning
// into the cgroup fails and its limits are not required), records the
// start and reports it to the driver. The read ends of its output pipes
// are left in pipes for copyOutput.
func (sv *supervision) start() error {
	spec, started, logger := sv.spec, &sv.started, sv.logger
	outR, outW, err := os.Pipe()
	if err != nil {
		report(sv.hs, Started{Error: err.Error()}, logger)
		return fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		report(sv.hs, Started{Error: err.Error()}, logger)
		return fmt.Errorf("stderr pipe: %w", err)
	}
	cgroupFD := -1
	if sv.cg != nil {
		cgroupFD = sv.cg.fd
	}
	cmd := sv.command(cgroupFD, outW, errW)
	err = startLocked(cmd, spec.NoNewPrivs)
	if err != nil && sv.cg != nil && !errors.Is(err, errNoNewPrivs) {
		_ = sv.cg.remove()
		if spec.Limits.Require && spec.Limits.Any() {
			err = fmt.Errorf("%w: start the engine in its cgroup %s: %w", ErrLimits, sv.cg.dir, err)
			report(sv.hs, Started{Error: err.Error(), Unenforced: spec.Limits.Unenforced(err.Error())}, logger)
			return err
		}
		// Cloning into a cgroup can fail where creating it did not
		// (delegation rules); run without it rather than not at all.
		logger.Printf("start engine in cgroup %s: %v; starting it without", sv.cg.dir, err)
		started.CgroupError = err.Error()
		started.Cgroup, started.OOMError = "", ""
		started.Limits = nil
		started.Unenforced = spec.Limits.Unenforced("the engine could not be started in its cgroup: " + err.Error())
		sv.cg = nil
		cmd = sv.command(-1, outW, errW)
		err = startLocked(cmd, spec.NoNewPrivs)
	}
	if err != nil {
		return startFailed(sv.hs, spec, err, logger)
	}
	_ = outW.Close()
	_ = errW.Close()
	sv.cmd = cmd
	sv.pipes = [2]*os.File{outR, errR}
	pid := cmd.Process.Pid
	// Not reaped yet, so its stat is readable even if it already exited.
	engine, err := procfs.RefOf(pid)
	if err != nil {
		engine = procfs.Ref{Pid: pid}
		logger.Printf("read engine start time: %v", err)
	}
	started.Engine = engine
	started.At = time.Now().UTC()
	if err := atomicfile.WriteJSON(filepath.Join(sv.stateDir, StartedFile), *started); err != nil {
		logger.Printf("record start: %v", err)
	}
	report(sv.hs, *started, logger)
	logger.Printf("engine started: pid %d, %s", pid, spec.Path)
	// The supervisor lives as long as the engine: hand back what package
	// initialisation of the (shared) driver binary allocated.
	debug.SetGCPercent(25)
	debug.FreeOSMemory()
	return nil
}

// forward (step 3) passes the signals on to the engine's process group,
// and reaps reparented orphans, until the returned func is called.
func (sv *supervision) forward(sigs, chld <-chan os.Signal) (stop func()) {
	pid := sv.cmd.Process.Pid
	stopFwd := make(chan struct{})
	fwdDone := make(chan struct{})
	go func() {
		defer close(fwdDone)
		for {
			select {
			case s := <-sigs:
				sv.logger.Printf("forwarding %v to the engine's process group", s)
				_ = syscall.Kill(-pid, s.(syscall.Signal))
			case <-chld:
				reapChildren(pid)
			case <-stopFwd:
				return
			}
		}
	}()
	return func() { close(stopFwd); <-fwdDone }
}

// copyOutput (step 4) copies the engine's stdout and stderr into Nomad's
// log FIFOs, keeping their last lines and turning load progress into
// events, until the pipes end.
func (sv *supervision) copyOutput() {
	spec := sv.spec
	events := &eventLog{path: filepath.Join(sv.stateDir, EventsFile), logger: sv.logger}
	progress := &progressTracker{engine: spec.Engine, last: -1, report: events.add}
	sv.errTail = &tail{n: spec.TailLines}
	sv.outTail = &tail{n: spec.TailLines}
	problems := func(err error) { sv.logger.Printf("logs: %v", err) }
	outR, errR := sv.pipes[0], sv.pipes[1]
	sv.copiers.Add(2)
	go func() {
		defer sv.copiers.Done()
		pump(outR, NewSink(spec.Stdout, problems), func(s string) { sv.outTail.add(s); progress.line(s) })
	}()
	go func() {
		defer sv.copiers.Done()
		pump(errR, NewSink(spec.Stderr, problems), func(s string) { sv.errTail.add(s); progress.line(s) })
	}()
}

// wait (step 5) waits for the engine's exit, then stops forwarding
// signals to it.
func (sv *supervision) wait(stopFwd func()) Exit {
	cmd := sv.cmd
	waitErr := cmd.Wait()
	stopFwd()
	exit := Exit{At: time.Now().UTC()}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		switch {
		case ws.Signaled():
			exit.Signal = int(ws.Signal())
			exit.ExitCode = 128 + exit.Signal
		default:
			exit.ExitCode = ws.ExitStatus()
		}
	} else if waitErr != nil {
		var ee *exec.ExitError
		if !errors.As(waitErr, &ee) {
			sv.logger.Printf("wait for engine: %v", waitErr)
		}
		exit.ExitCode = cmd.ProcessState.ExitCode()
	}
	sv.logger.Printf("engine exited: code %d signal %d", exit.ExitCode, exit.Signal)
	return exit
}

// endRemains (step 6) ends what the engine left: workers left behind
// would hold GPU memory, so its process group, its cgroup and every
// orphan reparented here are killed and waited for before the exit is
// reported, so that an exit record means the engine's GPU memory is free.
// It then waits (a bounded time) for the output copies to end.
func (sv *supervision) endRemains() {
	pid := sv.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	rem := Remains{Supervisor: sv.started.Supervisor, Engine: sv.started.Engine, descendants: true}
	if sv.cg != nil {
		rem.Cgroup = sv.cg.dir
	}
	if killed, err := killRemains(rem, time.Now().Add(RemainsTimeout)); err != nil {
		sv.logger.Printf("after the engine exited: %v", err)
	} else if len(killed) > 0 {
		sv.logger.Printf("killed what the engine left running: pids %v", killed)
	}
	copied := make(chan struct{})
	go func() {
		sv.copiers.Wait()
		close(copied)
	}()
	select {
	case <-copied:
	case <-time.After(5 * time.Second):
		// A process outside the group still holds the pipes; do not wait
		// for it to report the exit.
		sv.logger.Printf("output pipes still open 5s after the engine exited; not waiting for them")
	}
}

// recordExit (step 7) completes exit with OOM detection and the output's
// tail, writes it (the last file the supervisor writes) and removes the
// engine's cgroup.
func (sv *supervision) recordExit(exit Exit) error {
	exit.OOMDetection = "unavailable: " + sv.started.CgroupError
	if sv.spec.CgroupParent == "" {
		exit.OOMDetection = "disabled (no cgroup_parent)"
	}
	if sv.cg != nil {
		exit.OOMDetection = "cgroup v2 memory.events"
		n, err := sv.cg.oomKills()
		switch {
		case err != nil:
			exit.OOMDetection = "unavailable: " + err.Error()
		case n > 0:
			exit.OOMKilled = true
		}
	}
	exit.Tail = sv.errTail.get()
	if len(exit.Tail) == 0 {
		exit.Tail = sv.outTail.get()
	}
	if err := atomicfile.WriteJSON(filepath.Join(sv.stateDir, ExitFile), exit); err != nil {
		return fmt.Errorf("record exit: %w", err)
	}
	if sv.cg != nil {
		if err := sv.cg.remove(); err != nil {
			sv.logger.Printf("%v", err)
		}
	}
	return nil
}

// startLocked starts cmd from a goroutine locked to an OS thread of its
// own, which then stays parked for the rest of the process's life. The
// engine's parent-death signal (Pdeathsig) fires when the thread that
// forked it ends, not the process; an ordinary goroutine runs on whatever
// thread the scheduler gives it, and Go ends a thread when a goroutine
// locked to it returns. Forking from a thread that never ends makes the
// signal mean "the supervisor process died", whoever calls Main.
//
// With noNewPrivs the thread sets no_new_privs first, which the engine
// inherits (the flag is per thread, kept across fork and exec, and never
// cleared): nothing it executes gains privileges from set-user-ID bits or
// file capabilities. Only this thread, which starts nothing else, has it.
func startLocked(cmd *exec.Cmd, noNewPrivs bool) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if noNewPrivs {
			if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
				errc <- fmt.Errorf("%w: %w", errNoNewPrivs, err)
				<-make(chan struct{})
			}
		}
		errc <- cmd.Start()
		// Never unlock and never return: a locked goroutine that returns
		// takes its thread with it.
		<-make(chan struct{})
	}()
	return <-errc
}

// ErrLimits is wrapped by the start error of an engine that was not
// started because its resource limits could not be enforced.
var ErrLimits = errors.New("resource limits cannot be enforced")

var errNoNewPrivs = errors.New("set no_new_privs")

func startFailed(hs *os.File, spec Spec, err error, logger *log.Logger) error {
	err = fmt.Errorf("start %s: %w", spec.Path, err)
	report(hs, Started{Error: err.Error()}, logger)
	return err
}

// pump copies r into sink and hands every line to line, until r ends.
func pump(r io.ReadCloser, sink *Sink, line func(string)) {
	defer r.Close()    //nolint:errcheck // read end of our own pipe
	defer sink.Close() //nolint:errcheck // nothing to do about it at exit
	ls := &lineSplitter{line: line}
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, _ = sink.Write(buf[:n])
			ls.Write(buf[:n])
		}
		if err != nil {
			ls.Flush()
			return
		}
	}
}

// eventLog appends events to events.jsonl.
type eventLog struct {
	mu     sync.Mutex
	path   string
	logger *log.Logger
}

func (e *eventLog) add(msg string, annotations map[string]string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	data, err := json.Marshal(Event{At: time.Now().UTC(), Message: msg, Annotations: annotations})
	if err != nil {
		e.logger.Printf("encode event: %v", err)
		return
	}
	f, err := os.OpenFile(e.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		e.logger.Printf("record event: %v", err)
		return
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		e.logger.Printf("record event: %v", err)
	}
	if err := f.Close(); err != nil {
		e.logger.Printf("record event: %v", err)
	}
}
