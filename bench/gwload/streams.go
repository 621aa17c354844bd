package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/llmgw/llmgw/internal/testing/llamabuild"
	"github.com/llmgw/llmgw/internal/testing/tinymodel"
)

// streamBody asks for a stream of exactly streamTokens tokens: the tiny
// model says "Hello world!" over and over with ignore_eos.
const (
	streamTokens = 64
	streamBody   = `{"model":"m","stream":true,"max_tokens":64,"ignore_eos":true,"messages":[{"role":"user","content":"hello there"}]}`
)

// streamResult is what one target's streams measured: each stream's time
// to its first token, and every gap between two tokens.
type streamResult struct {
	ttft, gaps []time.Duration
	tokens     int
	failed     int
	firstErr   string // the first failure, in words
}

func (r *streamResult) add(o streamResult) {
	r.ttft = append(r.ttft, o.ttft...)
	r.gaps = append(r.gaps, o.gaps...)
	r.tokens += o.tokens
	r.failed += o.failed
	if r.firstErr == "" {
		r.firstErr = o.firstErr
	}
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// oneStream sends one streamed chat completion and times its tokens: a
// token is an event whose delta has content.
func oneStream(ctx context.Context, client *http.Client, url string) (streamResult, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(streamBody))
	if err != nil {
		return streamResult{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	sent := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return streamResult{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return streamResult{}, fmt.Errorf("%s", resp.Status)
	}
	var r streamResult
	var last time.Time
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") || !strings.Contains(line, `"content":"`) || strings.Contains(line, `"content":""`) {
			continue
		}
		now := time.Now()
		if last.IsZero() {
			r.ttft = append(r.ttft, now.Sub(sent))
		} else {
			r.gaps = append(r.gaps, now.Sub(last))
		}
		last = now
		r.tokens++
	}
	return r, sc.Err()
}

// streamLoad keeps n streams going against url for dur (each stream is
// bounded; no new one starts after dur).
func streamLoad(client *http.Client, url string, n int, dur time.Duration) streamResult {
	ctx, cancel := context.WithTimeout(context.Background(), dur+time.Minute)
	defer cancel()
	end := time.Now().Add(dur)
	var mu sync.Mutex
	var all streamResult
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for time.Now().Before(end) {
				r, err := oneStream(ctx, client, url)
				mu.Lock()
				if err != nil {
					all.failed++
					if all.firstErr == "" {
						all.firstErr = err.Error()
					}
				} else {
					all.add(r)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return all
}

// startRealEngine runs llama.cpp's real server with a tiny model on a
// loopback port, serving n slots, and waits until it is ready.
func startRealEngine(slots int) (*server, error) {
	if ok, why := llamabuild.Available(); !ok {
		return nil, errors.New(why)
	}
	dir, err := os.MkdirTemp("", "gwload-")
	if err != nil {
		return nil, err
	}
	o := tinymodel.Defaults
	o.Vocab = llamabuild.Vocab()
	model := filepath.Join(dir, "tiny.gguf")
	if err := tinymodel.Write(model, o); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command(llamabuild.Binary(), "-m", model, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"--alias", "m", "-np", strconv.Itoa(slots), "-c", strconv.Itoa(slots*256), "--metrics")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	stop := func() { _ = cmd.Process.Kill(); <-done; _ = os.RemoveAll(dir) }
	if err := llamabuild.WaitReady(context.Background(), "http://"+addr, done, time.Minute); err != nil {
		stop()
		return nil, err
	}
	pid := cmd.Process.Pid
	return &server{addr: addr, cpu: func() time.Duration { return processCPU(pid) }, stop: stop}, nil
}

// runStreams measures streamed completions from llama.cpp's real server,
// straight and through the gateway (and nginx, with a binary), at each
// number of concurrent streams: time to first token and the gap between
// tokens, p50 and p99, what the gateway adds to each, and the CPU time the
// gateway (and nginx) spent per streamed token. Targets take turns in two
// passes (direct, gateway, nginx, then the reverse), dur/2 each.
func runStreams(concurrency string, dur time.Duration, nginxBin string) error {
	ns, err := intList("-streams", concurrency, 1, 256)
	if err != nil {
		return err
	}
	eng, err := startRealEngine(slices.Max(ns))
	if err != nil {
		return err
	}
	defer eng.stop()
	gc, err := start(nil, "-serve", "gateway", "-upstream", eng.addr)
	if err != nil {
		return err
	}
	defer gc.stop()
	targets := []target{{name: "direct", srv: eng}, {name: "gateway", srv: &server{addr: gc.addr, cpu: gc.cpu}}}
	if nginxBin != "" {
		bin, err := exec.LookPath(nginxBin)
		if err != nil {
			return err
		}
		ng, err := startNginx(bin, eng.addr, nil)
		if err != nil {
			return err
		}
		defer ng.stop()
		targets = append(targets, target{name: "nginx", srv: ng})
	}
	fmt.Printf("llama.cpp %s (%s) with a %d-layer, %d-wide tiny model, %d slots; %d tokens a stream; %s per target per concurrency\n",
		llamabuild.Version, llamabuild.Commit, tinymodel.Defaults.Layers, tinymodel.Defaults.Embed, slices.Max(ns), streamTokens, dur)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512}}
	for _, n := range ns {
		res := map[string]*streamResult{}
		cpu := map[string]time.Duration{}
		for _, t := range targets {
			res[t.name] = &streamResult{}
		}
		for pass := range 2 {
			order := slices.Clone(targets)
			if pass == 1 {
				slices.Reverse(order)
			}
			for _, t := range order {
				c0 := t.srv.cpuNow()
				r := streamLoad(client, "http://"+t.srv.addr+"/v1/chat/completions", n, dur/2)
				cpu[t.name] += t.srv.cpuNow() - c0
				res[t.name].add(r)
			}
		}
		d := res["direct"]
		fmt.Printf("\n%d concurrent streams:\n", n)
		fmt.Printf("  %-8s %8s %8s %8s %8s %12s %12s %9s %7s %s\n", "target", "ttft p50", "ttft p99", "gap p50", "gap p99", "+ttft p50/p99", "+gap p50/p99", "tokens", "failed", "CPU/token")
		for _, t := range targets {
			r := res[t.name]
			added := "-"
			addedGap := "-"
			if t.name != "direct" {
				added = fmt.Sprintf("%s/%s", ms1(pct(r.ttft, 0.5)-pct(d.ttft, 0.5)), ms1(pct(r.ttft, 0.99)-pct(d.ttft, 0.99)))
				addedGap = fmt.Sprintf("%s/%s", ms1(pct(r.gaps, 0.5)-pct(d.gaps, 0.5)), ms1(pct(r.gaps, 0.99)-pct(d.gaps, 0.99)))
			}
			perTok := "-"
			if t.name != "direct" && r.tokens > 0 {
				perTok = fmt.Sprintf("%.1fµs", float64(cpu[t.name])/float64(time.Microsecond)/float64(r.tokens))
			}
			fmt.Printf("  %-8s %8s %8s %8s %8s %12s %12s %9d %7d %s\n", t.name, ms1(pct(r.ttft, 0.5)), ms1(pct(r.ttft, 0.99)),
				ms1(pct(r.gaps, 0.5)), ms1(pct(r.gaps, 0.99)), added, addedGap, r.tokens, r.failed, perTok)
		}
		for _, t := range targets {
			if r := res[t.name]; r.failed > 0 {
				fmt.Printf("  %s: first failure: %s\n", t.name, r.firstErr)
			}
		}
	}
	return nil
}

func ms1(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }
