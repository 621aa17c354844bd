package fakeengine

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/internal/testing/wait"
)

// chanListener is a listener no one dials: Accept blocks on a channel, so a
// server on it sleeps durably inside a synctest bubble.
type chanListener struct {
	once   sync.Once
	closed chan struct{}
}

func newChanListener() *chanListener { return &chanListener{closed: make(chan struct{})} }

func (l *chanListener) Accept() (net.Conn, error) {
	<-l.closed
	return nil, net.ErrClosed
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8000} }

func lookupEnv(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

type runResult struct {
	code   int
	after  time.Duration
	stdout string
	stderr string
}

// startRun runs Run in the bubble on a chanListener and returns a channel
// that yields its result.
func startRun(ctx context.Context, args string, sigs <-chan os.Signal, env func(string) (string, bool)) <-chan runResult {
	res := make(chan runResult, 1)
	go func() {
		var stdout, stderr syncBuffer
		start := time.Now()
		code := Run(ctx, Options{
			Args: strings.Fields(args), LookupEnv: env, Stdout: &stdout, Stderr: &stderr,
			Signals: sigs, Listener: newChanListener(),
		})
		res <- runResult{code: code, after: time.Since(start), stdout: stdout.String(), stderr: stderr.String()}
	}()
	return res
}

func TestRunCrash(t *testing.T) {
	tests := []struct {
		name       string
		args       string
		wantCode   int
		wantAfter  time.Duration
		wantStderr []string
	}{
		{
			name:       "crash after 3s with code 7",
			args:       "serve m --crash-after 3 --exit-code 7",
			wantCode:   7,
			wantAfter:  3 * time.Second,
			wantStderr: []string{"ERROR fake-engine: simulated crash after 3s (--crash-after), exit code 7"},
		},
		{
			name:       "crash after 1.5s with the default code, during load",
			args:       "serve m --crash-after 1.5 --load-seconds 10",
			wantCode:   1,
			wantAfter:  1500 * time.Millisecond,
			wantStderr: []string{"ERROR fake-engine: simulated crash after 1.5s (--crash-after), exit code 1"},
		},
		{
			name:      "exit code alone exits at once",
			args:      "serve m --exit-code 4",
			wantCode:  4,
			wantAfter: 0,
		},
		{
			name:      "a clean exit",
			args:      "serve m --crash-after 2 --exit-code 0",
			wantCode:  0,
			wantAfter: 2 * time.Second,
		},
		{
			name:      "with a traceback",
			args:      "serve m --crash-after 1 --crash-panic",
			wantCode:  1,
			wantAfter: time.Second,
			wantStderr: []string{
				"Traceback (most recent call last):",
				"RuntimeError: CUDA error: an illegal memory access was encountered",
				"ERROR fake-engine: simulated crash after 1s (--crash-after), exit code 1",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				got := <-startRun(t.Context(), tt.args, nil, lookupEnv())
				if got.code != tt.wantCode || got.after != tt.wantAfter {
					t.Errorf("Run = %d after %s, want %d after %s\nstderr:\n%s", got.code, got.after, tt.wantCode, tt.wantAfter, got.stderr)
				}
				for _, want := range tt.wantStderr {
					if !strings.Contains(got.stderr, want+"\n") {
						t.Errorf("stderr lacks %q:\n%s", want, got.stderr)
					}
				}
			})
		})
	}
}

func TestRunSignals(t *testing.T) {
	t.Run("SIGTERM shuts down with 0", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			sigs := make(chan os.Signal, 1)
			res := startRun(t.Context(), "serve m --load-seconds 30", sigs, lookupEnv())
			time.Sleep(2 * time.Second)
			sigs <- syscall.SIGTERM
			got := <-res
			if got.code != 0 || got.after != 2*time.Second {
				t.Errorf("Run = %d after %s, want 0 after 2s", got.code, got.after)
			}
			for _, want := range []string{"INFO fake-engine: shutting down (SIGTERM)\n", "INFO fake-engine: stopped\n"} {
				if !strings.Contains(got.stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, got.stderr)
				}
			}
		})
	})
	t.Run("ignored SIGTERM, then SIGINT", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			sigs := make(chan os.Signal, 1)
			res := startRun(t.Context(), "serve m --ignore-sigterm", sigs, lookupEnv())
			sigs <- syscall.SIGTERM
			time.Sleep(time.Minute)
			synctest.Wait()
			select {
			case got := <-res:
				t.Fatalf("Run returned %d on an ignored SIGTERM", got.code)
			default:
			}
			sigs <- os.Interrupt
			got := <-res
			if got.code != 0 || got.after != time.Minute {
				t.Errorf("Run = %d after %s, want 0 after 1m", got.code, got.after)
			}
			for _, want := range []string{"WARNING fake-engine: ignoring SIGTERM (--ignore-sigterm)\n", "INFO fake-engine: shutting down (SIGINT)\n"} {
				if !strings.Contains(got.stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, got.stderr)
				}
			}
		})
	})
	t.Run("context end shuts down with 0", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			got := <-startRun(ctx, "serve m", nil, lookupEnv())
			if got.code != 0 || got.after != 5*time.Second {
				t.Errorf("Run = %d after %s, want 0 after 5s", got.code, got.after)
			}
		})
	})
}

func TestRunStartup(t *testing.T) {
	tests := []struct {
		name       string
		args       string
		env        func(string) (string, bool)
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{
			name:       "startup line",
			args:       "serve org/m --served-model-name a b --tensor-parallel-size 2 --load-seconds 0.5 --exit-code 0 --max-model-len 64 --seed 3",
			env:        lookupEnv("CUDA_VISIBLE_DEVICES", "2,3"),
			wantStdout: "fake-engine: serving model=org/m served_model_name=a,b host=127.0.0.1 port=8000 tensor_parallel=2 gpus=2,3 load_seconds=0.5\n",
			wantStderr: "WARNING fake-engine: ignoring arguments: --seed 3\n",
		},
		{
			name:       "environment and no GPUs",
			args:       "--exit-code 0",
			env:        lookupEnv("LLMGW_MODEL", "env model", "CUDA_VISIBLE_DEVICES", ""),
			wantStdout: `fake-engine: serving model="env model" served_model_name="env model" host=127.0.0.1 port=8000 tensor_parallel=0 gpus=none load_seconds=0` + "\n",
		},
		{
			name:       "usage error",
			args:       "serve",
			wantCode:   ExitUsage,
			wantStderr: "fake-engine: usage: no model: give `serve MODEL`, --model or LLMGW_MODEL\nRun 'fake-engine --help' for usage.\n",
		},
		{
			name:       "help",
			args:       "--help",
			wantStdout: Usage,
		},
		{
			name:       "expect-gpus mismatch",
			args:       "serve m --expect-gpus 2",
			env:        lookupEnv("CUDA_VISIBLE_DEVICES", "0"),
			wantCode:   ExitGPUs,
			wantStderr: "ERROR fake-engine: GPU check failed: --expect-gpus 2 but CUDA_VISIBLE_DEVICES=\"0\" holds 1\n",
		},
		{
			name:       "expect-gpus without CUDA_VISIBLE_DEVICES",
			args:       "serve m --expect-gpus 1",
			wantCode:   ExitGPUs,
			wantStderr: "ERROR fake-engine: GPU check failed: --expect-gpus 1 but CUDA_VISIBLE_DEVICES is not set\n",
		},
		{
			name:       "host GPUs: indices resolved to UUIDs",
			args:       "serve m --exit-code 0 --expect-gpus 2 --host-gpus GPU-a0,GPU-b1,GPU-c2",
			env:        lookupEnv("CUDA_VISIBLE_DEVICES", "2,0", "CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
			wantStdout: "fake-engine: serving model=m served_model_name=m host=127.0.0.1 port=8000 tensor_parallel=0 gpus=GPU-c2,GPU-a0 load_seconds=0\n",
		},
		{
			name:       "host GPUs: indices without PCI_BUS_ID",
			args:       "serve m --host-gpus GPU-a0,GPU-b1",
			env:        lookupEnv("CUDA_VISIBLE_DEVICES", "1"),
			wantCode:   ExitGPUs,
			wantStderr: "ERROR fake-engine: GPU check failed: CUDA_VISIBLE_DEVICES=\"1\" holds indices but CUDA_DEVICE_ORDER=\"\": CUDA would number the GPUs fastest first, not by PCI bus as --host-gpus lists them\n",
		},
		{
			name:       "host GPUs: a bad list",
			args:       "serve m --host-gpus 0,1",
			wantCode:   ExitUsage,
			wantStderr: "fake-engine: usage: --host-gpus \"0,1\": want GPU UUIDs (GPU-...), comma-separated\nRun 'fake-engine --help' for usage.\n",
		},
		{
			name:       "tensor parallel above the GPUs",
			args:       "serve m --tensor-parallel-size 4",
			env:        lookupEnv("CUDA_VISIBLE_DEVICES", "0,1"),
			wantCode:   ExitGPUs,
			wantStderr: "ERROR fake-engine: GPU check failed: tensor parallel size 4 but CUDA_VISIBLE_DEVICES=\"0,1\" holds 2\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				env := tt.env
				if env == nil {
					env = lookupEnv()
				}
				got := <-startRun(t.Context(), tt.args, nil, env)
				if got.code != tt.wantCode {
					t.Errorf("Run = %d, want %d\nstderr:\n%s", got.code, tt.wantCode, got.stderr)
				}
				if tt.wantCode != 0 || tt.name == "help" {
					if diff := cmp.Diff(tt.wantStdout, got.stdout); diff != "" {
						t.Errorf("stdout (-want +got):\n%s", diff)
					}
					if diff := cmp.Diff(tt.wantStderr, got.stderr); diff != "" {
						t.Errorf("stderr (-want +got):\n%s", diff)
					}
					return
				}
				if first, _, _ := strings.Cut(got.stdout, "\n"); first+"\n" != tt.wantStdout {
					t.Errorf("startup line\n got %q\nwant %q", first+"\n", tt.wantStdout)
				}
				if tt.wantStderr != "" && !strings.Contains(got.stderr, tt.wantStderr) {
					t.Errorf("stderr lacks %q:\n%s", tt.wantStderr, got.stderr)
				}
			})
		})
	}
}

func TestRunListenError(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, port, _ := net.SplitHostPort(busy.Addr().String())
	var stderr syncBuffer
	code := Run(t.Context(), Options{
		Args: []string{"serve", "m", "--host", "127.0.0.1", "--port", port}, Stdout: io.Discard, Stderr: &stderr,
	})
	if code != ExitError || !strings.Contains(stderr.String(), "listen on 127.0.0.1:"+port) {
		t.Errorf("Run on a busy port = %d, stderr %q; want %d and a listen error", code, stderr.String(), ExitError)
	}
}

// TestRunOverHTTP serves on a real loopback socket: health, a streamed
// chat through the access-log wrapper, and shutdown with a stream open.
func TestRunOverHTTP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, Options{
			Args: []string{"serve", "m", "--tokens-per-second", "1000"}, Stdout: &stdout, Stderr: &stderr, Listener: ln,
		})
	}()
	client := &http.Client{Timeout: 10 * time.Second}
	waitHealthy(t, client, base+"/health")

	resp, err := client.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":true}`))
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("read stream: %v", err)
	}
	events := sseEvents(t, string(body))
	if len(events) != 7 || events[6] != "[DONE]" {
		t.Errorf("got %d events ending %q, want 7 ending [DONE]", len(events), events[len(events)-1])
	}

	// A slow stream is cut by shutdown, which ends within a second.
	slow, err := client.Post(base+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"hi","max_tokens":100000,"stream":true}`))
	if err != nil {
		t.Fatalf("slow stream: %v", err)
	}
	defer slow.Body.Close()
	if _, err := bufio.NewReader(slow.Body).ReadString('\n'); err != nil {
		t.Fatalf("first event of the slow stream: %v", err)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("Run = %d, want 0\nstderr:\n%s", code, stderr.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5s of its context's end")
	}
	if want := `"POST /v1/chat/completions HTTP/1.1" 200 OK`; !strings.Contains(stdout.String(), want) {
		t.Errorf("stdout lacks an access log line with %q:\n%s", want, stdout.String())
	}
}

// waitHealthy waits (wait.For) until url answers 200.
func waitHealthy(t *testing.T, client *http.Client, url string) {
	t.Helper()
	wait.For(t, url+" to answer 200", func() (bool, string) {
		resp, err := client.Get(url)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	}, wait.Every(50*time.Millisecond))
}
