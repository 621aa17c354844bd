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
	"sync"
	"syscall"
	"time"

	"github.com/llmgw/llmgw/driver/procfs"
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
	// The engine gets SIGKILL when the thread that started it ends
	// (Pdeathsig); pin this goroutine to the main thread, which ends only
	// with the process.
	runtime.LockOSThread()
	logger := log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds)
	if len(args) != 1 {
		logger.Printf("usage: %s %s <state dir>", filepath.Base(os.Args[0]), Mode)
		return 2
	}
	stateDir := args[0]
	hs := os.NewFile(handshakeFD, "handshake")
	spec, err := ReadSpec(stateDir)
	if err != nil {
		report(hs, Started{Error: err.Error()}, logger)
		logger.Printf("read spec: %v", err)
		return 1
	}
	if err := run(spec, stateDir, hs, logger); err != nil {
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

func run(spec Spec, stateDir string, hs *os.File, logger *log.Logger) error {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	self, err := procfs.RefOf(os.Getpid())
	if err != nil {
		report(hs, Started{Error: err.Error()}, logger)
		return err
	}
	started := Started{Supervisor: self}
	var cg *cgroup
	if spec.CgroupParent != "" {
		cg, err = createCgroup(spec.CgroupParent, spec.CgroupName)
		if err != nil {
			started.CgroupError = err.Error()
			logger.Printf("no cgroup for the engine (OOM kills will not be detected): %v", err)
		} else {
			started.Cgroup = cg.dir
		}
	}

	outR, outW, err := os.Pipe()
	if err != nil {
		report(hs, Started{Error: err.Error()}, logger)
		return fmt.Errorf("stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		report(hs, Started{Error: err.Error()}, logger)
		return fmt.Errorf("stderr pipe: %w", err)
	}
	newCmd := func(cgroupFD int) *exec.Cmd {
		attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if cgroupFD >= 0 {
			attr.UseCgroupFD, attr.CgroupFD = true, cgroupFD
		}
		if spec.UID != nil && spec.GID != nil {
			attr.Credential = &syscall.Credential{Uid: *spec.UID, Gid: *spec.GID}
		}
		return &exec.Cmd{
			Path:        spec.Path,
			Args:        append([]string{spec.Path}, spec.Args...),
			Env:         spec.Env,
			Dir:         spec.Dir,
			Stdout:      outW,
			Stderr:      errW,
			SysProcAttr: attr,
		}
	}
	cgroupFD := -1
	if cg != nil {
		cgroupFD = cg.fd
	}
	cmd := newCmd(cgroupFD)
	err = cmd.Start()
	if err != nil && cg != nil {
		// Cloning into a cgroup can fail where creating it did not
		// (delegation rules); run without it rather than not at all.
		logger.Printf("start engine in cgroup %s: %v; starting it without", cg.dir, err)
		started.CgroupError = err.Error()
		started.Cgroup = ""
		_ = cg.remove()
		cg = nil
		cmd = newCmd(-1)
		err = cmd.Start()
	}
	if err != nil {
		return startFailed(hs, spec, err, logger)
	}
	_ = outW.Close()
	_ = errW.Close()
	pid := cmd.Process.Pid
	// Not reaped yet, so its stat is readable even if it already exited.
	engine, err := procfs.RefOf(pid)
	if err != nil {
		engine = procfs.Ref{Pid: pid}
		logger.Printf("read engine start time: %v", err)
	}
	started.Engine = engine
	started.At = time.Now().UTC()
	if err := WriteJSONAtomic(filepath.Join(stateDir, StartedFile), started); err != nil {
		logger.Printf("record start: %v", err)
	}
	report(hs, started, logger)
	logger.Printf("engine started: pid %d, %s", pid, spec.Path)
	// The supervisor lives as long as the engine: hand back what package
	// initialisation of the (shared) driver binary allocated.
	debug.SetGCPercent(25)
	debug.FreeOSMemory()

	// Forward signals to the engine's process group until it exits.
	stopFwd := make(chan struct{})
	fwdDone := make(chan struct{})
	go func() {
		defer close(fwdDone)
		for {
			select {
			case s := <-sigs:
				logger.Printf("forwarding %v to the engine's process group", s)
				_ = syscall.Kill(-pid, s.(syscall.Signal))
			case <-stopFwd:
				return
			}
		}
	}()

	events := &eventLog{path: filepath.Join(stateDir, EventsFile), logger: logger}
	progress := &progressTracker{last: -1, report: events.add}
	errTail := &tail{n: spec.TailLines}
	outTail := &tail{n: spec.TailLines}
	problems := func(err error) { logger.Printf("logs: %v", err) }
	var copiers sync.WaitGroup
	copiers.Add(2)
	go func() {
		defer copiers.Done()
		pump(outR, NewSink(spec.Stdout, problems), func(s string) { outTail.add(s); progress.line(s) })
	}()
	go func() {
		defer copiers.Done()
		pump(errR, NewSink(spec.Stderr, problems), func(s string) { errTail.add(s); progress.line(s) })
	}()

	waitErr := cmd.Wait()
	close(stopFwd)
	<-fwdDone
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
			logger.Printf("wait for engine: %v", waitErr)
		}
		exit.ExitCode = cmd.ProcessState.ExitCode()
	}
	logger.Printf("engine exited: code %d signal %d", exit.ExitCode, exit.Signal)

	// Workers the engine leaves behind would hold GPU memory: end the
	// whole process group (and cgroup) before reporting the exit.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	if cg != nil {
		cg.kill()
	}
	copied := make(chan struct{})
	go func() {
		copiers.Wait()
		close(copied)
	}()
	select {
	case <-copied:
	case <-time.After(5 * time.Second):
		// A process outside the group still holds the pipes; do not wait
		// for it to report the exit.
		logger.Printf("output pipes still open 5s after the engine exited; not waiting for them")
	}

	exit.OOMDetection = "unavailable: " + started.CgroupError
	if spec.CgroupParent == "" {
		exit.OOMDetection = "disabled (no cgroup_parent)"
	}
	if cg != nil {
		exit.OOMDetection = "cgroup v2 memory.events"
		n, err := cg.oomKills()
		switch {
		case err != nil:
			exit.OOMDetection = "unavailable: " + err.Error()
		case n > 0:
			exit.OOMKilled = true
		}
	}
	exit.Tail = errTail.get()
	if len(exit.Tail) == 0 {
		exit.Tail = outTail.get()
	}
	if err := WriteJSONAtomic(filepath.Join(stateDir, ExitFile), exit); err != nil {
		return fmt.Errorf("record exit: %w", err)
	}
	if cg != nil {
		if err := cg.remove(); err != nil {
			logger.Printf("%v", err)
		}
	}
	return nil
}

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
	f, err := os.OpenFile(e.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
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
