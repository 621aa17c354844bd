package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/enginemetrics"
	"github.com/llmgw/llmgw/internal/testing/fakeengine"
)

// -engine vllm-model: the replicas are fake-engine processes impersonating
// vLLM with --enable-lora, every adapter a --lora-modules entry, scheduled
// as internal/testing/fakeengine/lorasched.go models vLLM's scheduler and
// adapter caches (at most -max-loras adapters per batch, GPU slots and the
// CPU cache as LRU caches, a slot load costing -swap, prefill at
// -prefill-rate with a prefix cache per adapter). The model's rules are
// vLLM's, read from its source; -swap and -prefill-rate are assumptions.
const (
	engineLlama = "llamacpp"
	engineVLLM  = "vllm-model"
)

// baseModel is the fake vLLM's served name.
const baseModel = "base"

// fakeEngineBinary is -fake-engine, or cmd/fake-engine built into dir.
func fakeEngineBinary(c config, dir string) (string, error) {
	if c.fakeEngine != "" {
		return c.fakeEngine, nil
	}
	bin := filepath.Join(dir, "fake-engine")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/llmgw/llmgw/cmd/fake-engine")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build cmd/fake-engine: %w\n%s", err, out)
	}
	return bin, nil
}

// vllmArgs is a fake vLLM's command line for port, serving as's adapters.
func vllmArgs(c config, as []adapter) func(port int) []string {
	return func(port int) []string {
		args := []string{"serve", "org/base", "--served-model-name", baseModel, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
			"--enable-lora", "--max-loras", strconv.Itoa(c.maxLoras), "--max-cpu-loras", strconv.Itoa(len(as)),
			"--max-num-seqs", strconv.Itoa(c.slots), "--max-model-len", strconv.Itoa(c.ctx), "--kv-cache-tokens", strconv.Itoa(c.kvTokens),
			"--tokens-per-second", strconv.FormatFloat(c.decodeRate, 'g', -1, 64),
			"--prefill-tokens-per-second", strconv.FormatFloat(c.prefillRate, 'g', -1, 64),
			"--fake-lora-swap", c.swap.String(), "--lora-modules"}
		for _, a := range as {
			args = append(args, a.name+"="+a.path)
		}
		return args
	}
}

// vllmAnswer is what the fake vLLM answers rq with under adapter a:
// drawn from the adapter's name and the prompt (fakeengine.ChatPrompt),
// so an answer by another adapter differs.
func vllmAnswer(c config, a adapter, rq request) string {
	prompt, _ := fakeengine.ChatPrompt([]fakeengine.ChatMessage{{Role: "system", Content: a.system}, {Role: "user", Content: rq.user}})
	return strings.Join(fakeengine.Tokens(a.name, prompt, c.maxTokens), "")
}

// vllmListed checks that r's GET /v1/models lists every adapter.
func vllmListed(ctx context.Context, r *replica, as []adapter) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.addr+"/v1/models", nil)
	if err != nil {
		return err
	}
	resp, err := directClient.Do(req)
	if err != nil {
		return fmt.Errorf("replica %s: /v1/models: %w", r.name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return fmt.Errorf("replica %s: /v1/models: %w", r.name, err)
	}
	for _, a := range as {
		if !slices.ContainsFunc(list.Data, func(m struct {
			ID string `json:"id"`
		}) bool {
			return m.ID == a.name
		}) {
			return fmt.Errorf("replica %s: /v1/models lists %d models, not %s", r.name, len(list.Data), a.name)
		}
	}
	return nil
}

// engineCounts are the counters a fake vLLM's /metrics holds at the end
// of a run: its slot loads and loads from the path
// (fake_engine_lora_slot_loads_total, fake_engine_lora_path_loads_total)
// and vLLM's prefix cache queries and hits, in tokens.
type engineCounts struct {
	slotLoads, pathLoads, queried, hits float64
}

func readCounts(ctx context.Context, r *replica) (engineCounts, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.addr+"/metrics", nil)
	if err != nil {
		return engineCounts{}, err
	}
	resp, err := directClient.Do(req)
	if err != nil {
		return engineCounts{}, fmt.Errorf("replica %s: /metrics: %w", r.name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var ec engineCounts
	want := map[string]*float64{
		"fake_engine_lora_slot_loads_total": &ec.slotLoads, "fake_engine_lora_path_loads_total": &ec.pathLoads,
		"vllm:prefix_cache_queries_total": &ec.queried, "vllm:prefix_cache_hits_total": &ec.hits,
	}
	seen := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		name, _, _ := strings.Cut(line, "{")
		if p := want[name]; p != nil {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				return ec, fmt.Errorf("replica %s: /metrics: %q: %w", r.name, line, err)
			}
			*p = v
			seen++
		}
	}
	if err := sc.Err(); err != nil {
		return ec, err
	}
	if seen != len(want) {
		return ec, fmt.Errorf("replica %s: /metrics has %d of the %d counters read", r.name, seen, len(want))
	}
	return ec, nil
}

// leastOut is least-outstanding on the tool's side, for the fake vLLMs:
// the gateway routes a request naming an adapter it lists only by the
// adapter's home set, and one naming an adapter it does not list is not
// routed at all. Fewest requests in flight (the tool is the only client),
// ties taken from a starting replica that moves by one each request, as
// the gateway's least-outstanding does (gateway/routing).
type leastOut struct {
	mu       sync.Mutex
	inflight []int
	next     int
}

func (l *leastOut) pick() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.inflight)
	l.next++
	best := -1
	for j := range n {
		k := (l.next + j) % n
		if best < 0 || l.inflight[k] < l.inflight[best] {
			best = k
		}
	}
	l.inflight[best]++
	return best
}

func (l *leastOut) done(i int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight[i]--
}

// affinity is llm-d's lora-affinity-scorer over the fake vLLMs
// (llm-d/llm-d-router, pkg/epp/framework/plugins/scheduling/scorer/
// loraaffinity): a replica whose vllm:lora_requests_info lists the adapter
// (running or waiting) scores 1, one listing fewer adapters than max_lora
// 0.8, another 0; the highest wins, ties to the fewest requests in flight
// (the tool's count, the start among equals moving as leastOut's; llm-d weighs its queue scorer beside it). The
// replicas' lists are scraped every -scrape, as llm-d's endpoint picker
// refreshes its metrics.
type affinity struct {
	lo    *leastOut
	mu    sync.Mutex
	lists []*enginemetrics.AdapterRequests
}

func (f *affinity) scrapeLoop(ctx context.Context, reps []*replica, every time.Duration) {
	names, _ := engine.MetricsOf(engine.VLLM)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for i, r := range reps {
			s, err := enginemetrics.Scrape(ctx, directClient, "http://"+r.addr, names, nil)
			if err != nil {
				continue
			}
			f.mu.Lock()
			f.lists[i] = s.Adapters
			f.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (f *affinity) pick(name string, maxLoras int) int {
	f.mu.Lock()
	scores := make([]float64, len(f.lists))
	for i, l := range f.lists {
		var in []string
		if l != nil {
			in = l.Running
			for _, w := range l.Waiting {
				if !slices.Contains(in, w) {
					in = append(slices.Clone(in), w)
				}
			}
		}
		switch {
		case slices.Contains(in, name):
			scores[i] = 1
		case len(in) < maxLoras:
			scores[i] = 0.8
		}
	}
	f.mu.Unlock()
	l := f.lo
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	best := -1
	for j := range scores {
		i := (l.next + j) % len(scores)
		if best < 0 || scores[i] > scores[best] || scores[i] == scores[best] && l.inflight[i] < l.inflight[best] {
			best = i
		}
	}
	l.inflight[best]++
	return best
}

// writePEFT writes every adapter's directory, as vLLM loads it.
func writePEFT(as []adapter) error {
	for _, a := range as {
		if err := fakeengine.WritePEFTAdapter(a.path, 8); err != nil {
			return fmt.Errorf("adapter %s: %w", a.name, err)
		}
	}
	return nil
}

// logTo is where a replica's output goes: a file in -server-logs, or
// nowhere.
func logTo(c config, name string) (*os.File, error) {
	if c.serverLogs == "" {
		return nil, nil
	}
	return os.CreateTemp(c.serverLogs, name+"-*.log")
}
