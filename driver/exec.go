package driver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/llmgw/llmgw/driver/supervisor"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
)

// maxExecOutput bounds what ExecTask returns of each stream.
const maxExecOutput = 1 << 20

// execCommand builds a command that runs in the task's context: the task
// dir, the engine's environment and user.
func (p *Plugin) execCommand(h *taskHandle, argv []string) (*exec.Cmd, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, status.Error(codes.InvalidArgument, "exec: empty command")
	}
	if h.exited() {
		return nil, status.Errorf(codes.FailedPrecondition, "exec in task %s: %v", h.id, errNotRunning)
	}
	// The state dir must still be the driver's: an engine that could
	// write a spec.json of its own would choose the exec's user.
	if err := checkStateDir(h.st.StateDir, h.cfg.GetAllocDir()); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "exec in task %s: %v", h.id, err)
	}
	spec, err := supervisor.ReadSpec(h.st.StateDir)
	if err != nil {
		return nil, fmt.Errorf("exec in task %s: %w", h.id, err)
	}
	pathEnv := os.Getenv("PATH")
	for _, kv := range spec.Env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	exe, err := lookPath(argv[0], pathEnv)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "exec: %v", err)
	}
	cmd := exec.Command(exe, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = spec.Env
	cmd.Dir = spec.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The engine's credentials, from the handle Nomad keeps (a driver
	// before default_user kept them only in the spec).
	uid, gid, groups := h.st.UID, h.st.GID, h.st.Groups
	if uid == nil && h.st.User == "" {
		uid, gid, groups = spec.UID, spec.GID, spec.Groups
	}
	if uid != nil && gid != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: *uid, Gid: *gid, Groups: groups}
	}
	return cmd, nil
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func exitResultOf(ps *os.ProcessState) *driverpb.ExitResult {
	res := &driverpb.ExitResult{ExitCode: int32(ps.ExitCode())}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.Signal = int32(ws.Signal())
		res.ExitCode = 128 + res.Signal
	}
	return res
}

// ExecTask implements Driver (script checks): run a command in the task's
// context, capture its output, and kill its process group at the timeout.
func (p *Plugin) ExecTask(ctx context.Context, req *driverpb.ExecTaskRequest) (*driverpb.ExecTaskResponse, error) {
	h, err := p.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	cmd, err := p.execCommand(h, req.GetCommand())
	if err != nil {
		return nil, err
	}
	stdout, stderr := &limitedBuffer{max: maxExecOutput}, &limitedBuffer{max: maxExecOutput}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if timeout := req.GetTimeout().AsDuration(); timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if err := cmd.Start(); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "exec %q: %v", req.GetCommand()[0], err)
	}
	if err := waitOrKill(ctx, cmd); err != nil {
		return nil, status.Errorf(codes.DeadlineExceeded, "exec %q: %v (killed)", req.GetCommand()[0], err)
	}
	return &driverpb.ExecTaskResponse{
		Stdout: stdout.Bytes(),
		Stderr: stderr.Bytes(),
		Result: exitResultOf(cmd.ProcessState),
	}, nil
}

// drainAfterExit bounds how long output is still read after the command
// exited (a child it left behind may hold the pipes).
const drainAfterExit = 2 * time.Second

// ExecTaskStreaming implements Driver (nomad alloc exec): the first message
// carries the setup; then stdin, terminal size and output flow both ways
// until the command exits, which the last message reports.
func (p *Plugin) ExecTaskStreaming(stream driverpb.Driver_ExecTaskStreamingServer) error {
	first, err := stream.Recv()
	if err != nil {
		return fmt.Errorf("exec: receive setup: %w", err)
	}
	setup := first.GetSetup()
	if setup == nil {
		return status.Error(codes.InvalidArgument, "exec: the first message must carry setup")
	}
	h, err := p.task(setup.GetTaskId())
	if err != nil {
		return err
	}
	cmd, err := p.execCommand(h, setup.GetCommand())
	if err != nil {
		return err
	}
	ctx := stream.Context()
	var sendMu sync.Mutex
	send := func(m *driverpb.ExecTaskStreamingResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(m)
	}

	var (
		stdin    io.WriteCloser
		outputs  sync.WaitGroup
		resize   func(rows, cols uint16)
		closeAll func()
	)
	pump := func(r io.Reader, stderr bool) {
		defer outputs.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				op := &driverpb.ExecTaskStreamingIOOperation{Data: append([]byte(nil), buf[:n]...)}
				m := &driverpb.ExecTaskStreamingResponse{Stdout: op}
				if stderr {
					m = &driverpb.ExecTaskStreamingResponse{Stderr: op}
				}
				if send(m) != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	if setup.GetTty() {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cmd.SysProcAttr.Credential}
		ptmx, err := pty.Start(cmd)
		if err != nil {
			return status.Errorf(codes.InvalidArgument, "exec %q with a terminal: %v", setup.GetCommand()[0], err)
		}
		stdin = ptmx
		resize = func(rows, cols uint16) { _ = pty.Setsize(ptmx, &pty.Winsize{Rows: rows, Cols: cols}) }
		closeAll = func() { _ = ptmx.Close() }
		outputs.Add(1)
		go pump(ptmx, false)
	} else {
		ps, err := openPipes(3, os.Pipe)
		if err != nil {
			return fmt.Errorf("exec: %w", err)
		}
		inR, inW, outR, outW, errR, errW := ps[0].r, ps[0].w, ps[1].r, ps[1].w, ps[2].r, ps[2].w
		cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
		err = cmd.Start()
		_ = inR.Close()
		_ = outW.Close()
		_ = errW.Close()
		if err != nil {
			_ = inW.Close()
			_ = outR.Close()
			_ = errR.Close()
			return status.Errorf(codes.InvalidArgument, "exec %q: %v", setup.GetCommand()[0], err)
		}
		stdin = inW
		resize = func(uint16, uint16) {}
		closeAll = func() { _ = inW.Close(); _ = outR.Close(); _ = errR.Close() }
		outputs.Add(2)
		go pump(outR, false)
		go pump(errR, true)
	}
	defer closeAll()

	// Input: owned by this call; it ends when the stream does (the client
	// closes it, or this handler returns and gRPC cancels it).
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				if !errors.Is(err, io.EOF) && ctx.Err() == nil {
					h.log.Debug("exec input ended", "error", err)
				}
				return
			}
			if ts := m.GetTtySize(); ts != nil {
				resize(uint16(ts.GetHeight()), uint16(ts.GetWidth()))
			}
			if in := m.GetStdin(); in != nil {
				if len(in.GetData()) > 0 {
					_, _ = stdin.Write(in.GetData())
				}
				if in.GetClose() {
					if setup.GetTty() {
						_, _ = stdin.Write([]byte{4}) // end of input for a terminal: ^D
					} else {
						_ = stdin.Close()
					}
				}
			}
		}
	}()

	if err := waitOrKill(ctx, cmd); err != nil {
		return err
	}
	drained := make(chan struct{})
	go func() {
		outputs.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(drainAfterExit):
		closeAll()
		<-drained
	}
	return send(&driverpb.ExecTaskStreamingResponse{Exited: true, Result: exitResultOf(cmd.ProcessState)})
}

// waitOrKill waits for cmd to exit. When ctx ends first it kills cmd's
// process group, waits for it, and returns ctx's error.
func waitOrKill(ctx context.Context, cmd *exec.Cmd) error {
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		_ = cmd.Wait()
	}()
	select {
	case <-waited:
		return nil
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-waited
		return ctx.Err()
	}
}

// pipe is both ends of an os.Pipe.
type pipe struct{ r, w *os.File }

// openPipes opens n pipes with open (os.Pipe); when one fails it closes
// those it had opened, so that a long-lived plugin leaks no descriptor on
// the error path.
func openPipes(n int, open func() (*os.File, *os.File, error)) ([]pipe, error) {
	ps := make([]pipe, 0, n)
	for range n {
		r, w, err := open()
		if err != nil {
			for _, p := range ps {
				_ = p.r.Close()
				_ = p.w.Close()
			}
			return nil, err
		}
		ps = append(ps, pipe{r, w})
	}
	return ps, nil
}
