package fakeengine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Exit codes of Run besides a configured crash.
const (
	ExitOK    = 0
	ExitError = 1 // could not listen or serve
	ExitUsage = 2 // bad command line
	ExitGPUs  = 3 // CUDA_VISIBLE_DEVICES does not give the GPUs asked for
)

// shutdownGrace is how long a graceful shutdown waits for requests before
// closing their connections; the process exits within a second of SIGTERM.
const shutdownGrace = 800 * time.Millisecond

// Options is what Run needs from its process.
type Options struct {
	Args      []string                    // command line after the program name
	LookupEnv func(string) (string, bool) // os.LookupEnv
	Stdout    io.Writer                   // startup line, access log
	Stderr    io.Writer                   // load progress, errors
	Signals   <-chan os.Signal            // SIGTERM and SIGINT, as signal.Notify delivers them
	Listener  net.Listener                // optional: serve here instead of --host/--port
}

// Run is fake-engine's main: it parses the command line, checks the GPUs,
// serves until a signal, ctx's end or the configured crash, and returns the
// process exit code.
func Run(ctx context.Context, o Options) int {
	stdout, stderr := &lineWriter{w: o.Stdout}, &lineWriter{w: o.Stderr}
	lookup := o.LookupEnv
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	getenv := func(k string) string { v, _ := lookup(k); return v }

	strict, cfg, err := parseStrict(o.Args, getenv)
	if e, ok := asContractError(err); ok {
		// What the real engine prints and exits with.
		fmt.Fprint(stderr, e.Stderr)
		return e.Status
	}
	if err != nil {
		fmt.Fprintf(stderr, "fake-engine: %v\nRun 'fake-engine --help' for usage.\n", err)
		return ExitUsage
	}
	if cfg.Help {
		fmt.Fprint(stdout, Usage)
		return ExitOK
	}
	cvd, cvdSet := lookup("CUDA_VISIBLE_DEVICES")
	visible, err := ResolveGPUs(cfg, cvd, cvdSet, getenv("CUDA_DEVICE_ORDER"))
	if err == nil {
		err = CheckGPUs(cfg, cvd, cvdSet, visible)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ERROR fake-engine: %v\n", err)
		return ExitGPUs
	}
	// The engine loads its LoRA adapters before it listens; one that
	// fails stops it.
	if err := LoadAdapters(cfg); err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return ExitError
	}
	ln := o.Listener
	if ln == nil {
		addr := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))
		if ln, err = net.Listen("tcp", addr); err != nil {
			fmt.Fprintf(stderr, "ERROR fake-engine: listen on %s: %v\n", addr, err)
			return ExitError
		}
	}

	host, port := cfg.Host, strconv.Itoa(cfg.Port)
	if h, p, err := net.SplitHostPort(ln.Addr().String()); err == nil {
		host, port = h, p
	}
	gpus := "unset"
	if cvdSet || cfg.HostGPUs != nil {
		gpus = strings.Join(visible, ",")
		if gpus == "" {
			gpus = "none"
		}
	}
	strictNote := ""
	if strict != nil {
		strictNote = " strict=" + strict.Spec()
	}
	fmt.Fprintf(stdout, "fake-engine: serving model=%s served_model_name=%s host=%s port=%s tensor_parallel=%d gpus=%s load_seconds=%g%s\n",
		logValue(cfg.Model), logValue(strings.Join(cfg.names(), ",")), host, port, cfg.TensorParallel, gpus, cfg.LoadTime.Seconds(), strictNote)
	if len(cfg.Ignored) > 0 {
		fmt.Fprintf(stderr, "WARNING fake-engine: ignoring arguments: %s\n", strings.Join(cfg.Ignored, " "))
	}

	srv := NewServer(cfg, stdout, stderr)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	httpSrv := &http.Server{
		Handler:           srv.Handler(),
		BaseContext:       func(net.Listener) context.Context { return runCtx },
		ReadHeaderTimeout: 10 * time.Second,
	}
	var wg sync.WaitGroup
	serveErr := make(chan error, 1)
	wg.Go(func() { serveErr <- httpSrv.Serve(ln) })
	wg.Go(func() { srv.Load(runCtx) })
	defer wg.Wait()

	var crash <-chan time.Time
	if cfg.Crash {
		t := time.NewTimer(cfg.CrashAfter)
		defer t.Stop()
		crash = t.C
	}
	// The loop turns once per SIGTERM ignored, and at the first signal
	// under --hang-on-stop or --lose-first-stop; every other event ends it.
	var drained chan struct{} // --hang-on-stop: closed once the requests in flight have ended
	lost := false             // --lose-first-stop: the first stop signal was taken
	for {
		select {
		case <-ctx.Done():
			return shutdown(httpSrv, cancel, stderr, "context done")
		case sig := <-o.Signals:
			if sig == syscall.SIGTERM && cfg.IgnoreSIGTERM {
				fmt.Fprintln(stderr, "WARNING fake-engine: ignoring SIGTERM (--ignore-sigterm)")
				continue
			}
			if cfg.LoseFirstStop && !lost {
				// llama.cpp's handler deadlocked: it says nothing.
				lost = true
				continue
			}
			if cfg.HangOnStop && drained == nil && !lost {
				// llama.cpp's words (tools/server/server.cpp at 80fb11a).
				fmt.Fprintln(stderr, "srv    operator(): operator(): cleaning up before exit...")
				drained = make(chan struct{})
				go func() { _ = httpSrv.Shutdown(context.Background()); close(drained) }()
				continue
			}
			if drained != nil || lost {
				fmt.Fprintln(stderr, "Received second interrupt, terminating immediately.")
				cancel()
				_ = httpSrv.Close()
				return ExitError
			}
			return shutdown(httpSrv, cancel, stderr, signalName(sig))
		case <-drained:
			cancel()
			return ExitOK
		case <-crash:
			cancel()
			_ = httpSrv.Close()
			writeCrash(stderr, cfg)
			return cfg.ExitCode
		case err := <-serveErr:
			if drained != nil && errors.Is(err, http.ErrServerClosed) {
				serveErr = nil // the stop closed the port; wait for drained
				continue
			}
			cancel()
			fmt.Fprintf(stderr, "ERROR fake-engine: serve: %v\n", err)
			return ExitError
		}
	}
}

// shutdown stops serving: in-flight generations end, idle connections
// close, and what has not finished within shutdownGrace is cut.
func shutdown(s *http.Server, cancel context.CancelFunc, stderr io.Writer, why string) int {
	fmt.Fprintf(stderr, "INFO fake-engine: shutting down (%s)\n", why)
	cancel()
	ctx, stop := context.WithTimeout(context.Background(), shutdownGrace)
	defer stop()
	if err := s.Shutdown(ctx); err != nil {
		_ = s.Close()
	}
	fmt.Fprintln(stderr, "INFO fake-engine: stopped")
	return ExitOK
}

func writeCrash(w io.Writer, cfg Config) {
	if cfg.CrashPanic {
		fmt.Fprint(w, "Traceback (most recent call last):\n"+
			"  File \"/fake-engine/engine/core.py\", line 42, in run_engine_core\n"+
			"    engine_core.run_busy_loop()\n"+
			"  File \"/fake-engine/engine/core.py\", line 87, in run_busy_loop\n"+
			"    raise RuntimeError(\"CUDA error: an illegal memory access was encountered\")\n"+
			"RuntimeError: CUDA error: an illegal memory access was encountered\n")
	}
	fmt.Fprintf(w, "ERROR fake-engine: simulated crash after %s (--crash-after), exit code %d\n", cfg.CrashAfter, cfg.ExitCode)
}

func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGTERM:
		return "SIGTERM"
	case os.Interrupt:
		return "SIGINT"
	}
	return sig.String()
}

// logValue quotes a value for a key=value line when it needs it.
func logValue(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\"=") {
		return strconv.Quote(s)
	}
	return s
}

// lineWriter serialises writes, so that lines from concurrent requests do
// not interleave.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.w.Write(p)
	if err != nil {
		return n, fmt.Errorf("write log: %w", err)
	}
	return n, nil
}
