// Command loraload measures how the requests for many LoRA adapters of one
// model are routed over real llama.cpp servers (llama-server, one thread
// each) serving the tiny model with tiny adapters that change its answer
// (internal/testing/tinymodel), so that every answer shows which adapter
// gave it.
//
// The trace is seeded: -adapters adapters, each with its own system prompt
// (so a replica's slot that keeps an adapter's prompt pays), popularity
// Zipf-distributed over their ranks (adapter a00 the hottest), one request
// each with a user question of its own, arriving open loop as a Poisson
// process at -rate. Every replica loads every adapter, as the controller
// renders a llama.cpp model with adapters (engine.AdapterArgs: --lora with
// the paths comma-separated, --lora-init-without-apply, --cache-ram 0),
// with -slots slots.
//
// Policies, each run on fresh replicas (cold caches):
//   - adapter: the real gateway (gateway.New and its handler), its model
//     list naming the adapters; a request names its adapter as the model,
//     and the gateway routes it to the adapter's home set
//     (gateway/routing.Adapters) and writes the lora list for the replica.
//   - least-outstanding: the same gateway with a model list naming no
//     adapters, so the requests are the base model's, routed by
//     least-outstanding; the tool writes each request's lora list as the
//     gateway would (the adapter at scale 1, by the id every replica lists
//     for its path at GET /lora-adapters, checked equal on all).
//   - prefer-loaded: llm-d's "prefer loaded" score for an engine that loads
//     every adapter everywhere: the tool sends each request straight to a
//     replica, writing the same lora list, preferring (1) the replicas
//     running the adapter now (a request of it in flight there, what
//     vLLM's running_lora_adapters would show) with a slot free, the least
//     loaded of them; else (2) the replica that served the adapter last,
//     if it has a slot free; else (3) the replica with the fewest requests
//     in flight.
//
// Every run is repeated -rounds times, interleaved: each round runs every
// policy once, in an order shuffled afresh each round from -seed (never the
// round before's). Per run it prints the answers that were not their
// adapter's (counted exactly: each adapter's answer is known), TTFT
// p50/p90/p99 (to the first content token of a stream), completed requests
// per second, the hit ratio the engines reported, the replicas each
// adapter's requests went to, the adapters' waits against their fair share,
// and the load average before and after; then per policy the median of the
// rounds and their spread (min–max).
//
// An adapter's wait is its requests' mean time before the engine started
// on their prompt (TTFT less the engine's own prompt time, llama.cpp's
// timings.prompt_ms). Its fair share is the run's mean wait over all
// requests: waiting like any request, whichever adapter it asks for. The
// tool reports the wait over the fair share of three classes of adapters
// (the hottest; ranks 1–9, warm; the rest, cold: where starvation would
// show) and of the worst adapter with at least 3 requests (one request's
// wait is one draw of the queue it met), and counts those adapters above
// twice their fair share.
//
// llama.cpp loads every adapter at start and cannot load or unload one
// later, so there are no loads or unloads during a run; the tool checks
// that each replica lists every adapter at start and at the end of each
// run.
//
// With -engine vllm-model (vllm.go) the replicas are fake-engine
// processes impersonating vLLM with --enable-lora (every adapter a
// --lora-modules entry, --max-loras -max-loras, --max-num-seqs -slots),
// whose scheduler and adapter caches follow vLLM's rules
// (internal/testing/fakeengine/lorasched.go): at most max_loras adapters
// per batch, GPU slots as an LRU cache, a slot load costing -swap (an
// assumption), prefill at -prefill-rate (an assumption) with a prefix
// cache per adapter. An answer is drawn from its adapter's name and names
// it (the expected text is known for each request). adapter goes through
// the gateway, its model list naming the adapters with max_adapters
// -max-loras; least-outstanding is the tool's own (the gateway routes a
// listed adapter only by its home set, and an unlisted one not at all);
// prefer-loaded is llm-d's lora-affinity score over each replica's
// vllm:lora_requests_info, scraped every -scrape. An adapter's wait is
// then its TTFT (no engine prompt time is reported), and the loads are
// the replicas' own count of adapters moved into a GPU slot, per minute.
//
//	go run ./bench/loraload -adapters 50 -replicas 3 -requests 240 -rate 3
//	go run ./bench/loraload -engine vllm-model -requests 160 -rate 18 -swap 50ms
//
// Results are in docs/perf.md ("LoRA adapters (issue 37)").
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmgw/llmgw/bench/internal/benchstat"
	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/enginemetrics"
	"github.com/llmgw/llmgw/gateway"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/testing/llamabuild"
	"github.com/llmgw/llmgw/internal/testing/tinymodel"
)

const (
	policyAdapter = "adapter"
	policyLO      = "least-outstanding"
	policyLoaded  = "prefer-loaded"
)

type config struct {
	adapters, replicas, slots, requests, rounds, maxTokens int
	systemWords, layers, embed, ctx                        int
	rate, zipf                                             float64
	seed                                                   uint64
	policies                                               []string
	runTimeout                                             time.Duration
	serverLogs, dump                                       string
	// -engine vllm-model (vllm.go).
	engine                  string
	maxLoras, kvTokens      int
	swap, scrape            time.Duration
	prefillRate, decodeRate float64
	fakeEngine              string
}

func main() {
	var c config
	var policies string
	flag.IntVar(&c.adapters, "adapters", 50, "LoRA adapters, every replica loading all")
	flag.IntVar(&c.replicas, "replicas", 3, "llama-server replicas (one thread each)")
	flag.IntVar(&c.slots, "slots", 4, "llama-server's --parallel slots per replica (vllm-model: --max-num-seqs)")
	flag.IntVar(&c.requests, "requests", 240, "requests per run")
	flag.Float64Var(&c.rate, "rate", 3, "requests arriving per second (Poisson)")
	flag.Float64Var(&c.zipf, "zipf", 1.1, "the adapters' popularity: Zipf's exponent over their ranks (above 1)")
	flag.IntVar(&c.systemWords, "system-words", 300, "words of each adapter's system prompt")
	flag.IntVar(&c.maxTokens, "max-tokens", 16, "max_tokens of each request (every tiny answer is shorter)")
	flag.IntVar(&c.rounds, "rounds", 3, "rounds: every policy once a round, in an order shuffled each round")
	flag.StringVar(&policies, "policies", "adapter,least-outstanding,prefer-loaded", "policies to run")
	flag.IntVar(&c.layers, "layers", 8, "the tiny model's layers")
	flag.IntVar(&c.embed, "embed", 256, "the tiny model's width (its room for adapters with distinct signatures)")
	flag.IntVar(&c.ctx, "ctx", 8192, "llama-server's -c (shared by its slots)")
	flag.Uint64Var(&c.seed, "seed", 1, "seed of the trace and of the rounds' order")
	flag.DurationVar(&c.runTimeout, "run-timeout", 5*time.Minute, "the longest one run may take")
	flag.StringVar(&c.serverLogs, "server-logs", "", "a directory to write each replica's output to, a file per run and replica (empty: discarded)")
	flag.StringVar(&c.dump, "dump", "", "append every answer of every run to this file, a line each (tab-separated: round, policy, adapter, replica, route, TTFT ms, engine prompt ms, prompt tokens, cached, right answer)")
	flag.StringVar(&c.engine, "engine", engineLlama, "the replicas: llamacpp (real llama-server, every adapter loaded) or vllm-model (fake-engine impersonating vLLM's adapter scheduling, vllm.go)")
	flag.IntVar(&c.maxLoras, "max-loras", 4, "vllm-model: vLLM's --max-loras, adapters per batch and GPU slots")
	flag.DurationVar(&c.swap, "swap", 50*time.Millisecond, "vllm-model: GPU time of moving an adapter into a slot (fake-engine's --fake-lora-swap; an assumption)")
	flag.Float64Var(&c.prefillRate, "prefill-rate", 8000, "vllm-model: prefill tokens per second (an assumption)")
	flag.Float64Var(&c.decodeRate, "decode-rate", 40, "vllm-model: generated tokens per second of each request (an assumption)")
	flag.IntVar(&c.kvTokens, "kv-tokens", 200000, "vllm-model: tokens the prefix cache holds")
	flag.DurationVar(&c.scrape, "scrape", 50*time.Millisecond, "vllm-model: how often prefer-loaded reads each replica's vllm:lora_requests_info")
	flag.StringVar(&c.fakeEngine, "fake-engine", "", "vllm-model: the fake-engine binary (empty: go build cmd/fake-engine, from within the module)")
	flag.Parse()
	c.policies = strings.Split(policies, ",")
	if c.engine != engineLlama && c.engine != engineVLLM {
		fail(fmt.Errorf("-engine %q: want llamacpp or vllm-model", c.engine))
	}
	if c.engine == engineVLLM && (c.maxLoras < 1 || c.swap < 0 || c.prefillRate < 0 || c.decodeRate < 0 || c.kvTokens < 1 || c.scrape <= 0) {
		fail(errors.New("-max-loras and -kv-tokens at least 1, -swap, -prefill-rate and -decode-rate not negative, -scrape above 0"))
	}
	for _, p := range c.policies {
		if p != policyAdapter && p != policyLO && p != policyLoaded {
			fail(fmt.Errorf("-policies: %q is not adapter, least-outstanding or prefer-loaded", p))
		}
	}
	if c.adapters < 1 || c.adapters > len(nouns) {
		fail(fmt.Errorf("-adapters %d: want 1 to %d (each needs an answer of its own)", c.adapters, len(nouns)))
	}
	if c.replicas < 1 || c.slots < 1 || c.requests < 1 || c.rounds < 1 || c.rate <= 0 || c.zipf <= 1 {
		fail(errors.New("-replicas, -slots, -requests, -rounds at least 1, -rate above 0, -zipf above 1"))
	}
	if err := run(c); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "loraload:", err)
	os.Exit(1)
}

// nouns make the adapters' answers: adapter i answers "The <noun i>.".
var nouns = strings.Fields(`apple anchor arrow badge basket bell bridge candle castle cloud comet compass
crown desert dragon eagle falcon feather forest garden glacier harbor island jungle kettle lantern lemon
meadow mirror mountain needle ocean orchard parrot pebble pepper planet pocket prism quartz rabbit river
rocket saddle spider thunder tiger tulip violin walnut`)

// words is the vocabulary of the prompts.
var words = strings.Fields(`the of and to in is that for it as with was on be by at this from or an are
which not have but had they you were their one all we can her has there been if more when will would who
so no system model answer question data value time first new used two may way long use people make like
over such only other than then also after work state number each many some these out could into most
through back much good before well made where right part great same own small large world still around
every place while point order word course between under never last again keep help city house study`)

// adapter is one LoRA adapter of the trace; its index is its popularity
// rank.
type adapter struct {
	name, answer, path, system string
}

// request is one request of the trace.
type request struct {
	id, adapter int
	at          time.Duration // from the run's start
	user        string
}

func trace(c config, dir string) ([]adapter, []request) {
	rng := rand.New(rand.NewPCG(c.seed, 0x9e3779b97f4a7c15))
	var as []adapter
	for i := range c.adapters {
		var b strings.Builder
		fmt.Fprintf(&b, "You are the %s assistant.", nouns[i])
		for range c.systemWords {
			b.WriteByte(' ')
			b.WriteString(words[rng.IntN(len(words))])
		}
		path := filepath.Join(dir, fmt.Sprintf("a%02d.gguf", i))
		if c.engine == engineVLLM {
			path = filepath.Join(dir, fmt.Sprintf("a%02d", i)) // a PEFT directory
		}
		as = append(as, adapter{name: fmt.Sprintf("a%02d", i), answer: "The " + nouns[i] + ".", path: path, system: b.String()})
	}
	z := rand.NewZipf(rng, c.zipf, 1, uint64(c.adapters-1))
	var rs []request
	var at time.Duration
	for i := range c.requests {
		var b strings.Builder
		fmt.Fprintf(&b, "Question %d:", i)
		for range 10 + rng.IntN(20) {
			b.WriteByte(' ')
			b.WriteString(words[rng.IntN(len(words))])
		}
		rs = append(rs, request{id: i, adapter: int(z.Uint64()), at: at, user: b.String()})
		at += time.Duration(rng.ExpFloat64() / c.rate * float64(time.Second))
	}
	return as, rs
}

// replica is one llama-server, or one fake vLLM.
type replica struct {
	name, addr string
	cmd        *exec.Cmd
	done       chan struct{}
}

// llamaArgs is llama-server's command line for port: the tiny model and
// the adapters' args (engine.AdapterArgs).
func llamaArgs(c config, model string, args []string) func(port int) []string {
	return func(port int) []string {
		return append([]string{"-m", model, "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--metrics", "--alias", "tiny",
			"-t", "1", "-tb", "1", "-np", strconv.Itoa(c.slots), "-c", strconv.Itoa(c.ctx)}, args...)
	}
}

// servers is how a run starts its replicas: the binary and its command
// line for a port.
type servers struct {
	bin  string
	args func(port int) []string
}

func startReplica(ctx context.Context, c config, sv servers, i int) (*replica, error) {
	name := fmt.Sprintf("r%d", i)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("replica %s: %w", name, err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command(sv.bin, sv.args(port)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	f, err := logTo(c, name)
	if err != nil {
		return nil, err
	}
	if f != nil {
		defer func() { _ = f.Close() }() // the child holds its own descriptor
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &replica{name: name, addr: "127.0.0.1:" + strconv.Itoa(port), cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(r.done) }()
	if err := llamabuild.WaitReady(ctx, "http://"+r.addr, r.done, 2*time.Minute); err != nil {
		r.stop()
		return nil, fmt.Errorf("replica %s: %w", name, err)
	}
	return r, nil
}

func (r *replica) stop() {
	_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	<-r.done
}

// loraIDs reads r's GET /lora-adapters: each adapter's id, by its index in
// as, and an error unless every adapter is listed.
func loraIDs(ctx context.Context, r *replica, as []adapter) ([]int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.addr+"/lora-adapters", nil)
	if err != nil {
		return nil, err
	}
	resp, err := directClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("replica %s: /lora-adapters: %w", r.name, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var list []struct {
		ID   int    `json:"id"`
		Path string `json:"path"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("replica %s: /lora-adapters: %w", r.name, err)
	}
	ids := make([]int, len(as))
	for i, a := range as {
		j := slices.IndexFunc(list, func(l struct {
			ID   int    `json:"id"`
			Path string `json:"path"`
		}) bool {
			return l.Path == a.path
		})
		if j < 0 {
			return nil, fmt.Errorf("replica %s: /lora-adapters lists %d adapters, not %s (%s)", r.name, len(list), a.name, a.path)
		}
		ids[i] = list[j].ID
	}
	return ids, nil
}

// sample is one request's outcome.
type sample struct {
	adapter        int
	sent, end      time.Time
	ttft           time.Duration
	ok             bool
	answer         string
	replica, route string
	prompt, cached int64
	promptMS       float64
	err            string
	// want is the answer rq's adapter gives; wantModel, where the engine
	// names the adapter in its answer (vLLM), that name, and model the
	// name the answer gave.
	want, wantModel, model string
}

// right reports whether s is its adapter's answer.
func (s sample) right() bool {
	return s.ok && s.answer == s.want && (s.wantModel == "" || s.model == s.wantModel)
}

// client sends to a gateway; directClient straight to a replica, on a new
// connection each (llama-server closes kept-alive connections on its own
// terms, and a POST sent on one it is closing fails unretried).
var (
	client       = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256, DisableCompression: true}}
	directClient = &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true, DisableCompression: true}}
)

// body is a request's chat body: model is the adapter's name (through the
// adapter gateway) or the base model's with a lora list (id ≥ 0).
func body(c config, a adapter, rq request, model string, id int) []byte {
	m := map[string]any{"model": model, "max_tokens": c.maxTokens, "stream": true,
		"stream_options": map[string]any{"include_usage": true},
		"messages":       []map[string]string{{"role": "system", "content": a.system}, {"role": "user", "content": rq.user}}}
	if id >= 0 {
		m["lora"] = []map[string]any{{"id": id, "scale": 1}}
	}
	b, _ := json.Marshal(m)
	return b
}

// send posts b to url's chat completions and reads the stream.
func send(ctx context.Context, hc *http.Client, url string, b []byte) (s sample) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(b))
	if err != nil {
		s.err = err.Error()
		return s
	}
	req.Header.Set("Content-Type", "application/json")
	s.sent = time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		s.err = err.Error()
		return s
	}
	defer func() { _ = resp.Body.Close() }()
	s.replica, s.route = resp.Header.Get(gateway.ReplicaHeader), resp.Header.Get(gateway.RouteHeader)
	if resp.StatusCode != http.StatusOK {
		e, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		s.err = fmt.Sprintf("%s: %s", resp.Status, e)
		return s
	}
	var content strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev struct {
			Model   string `json:"model"`
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Timings *struct {
				CacheN   int64   `json:"cache_n"`
				PromptN  int64   `json:"prompt_n"`
				PromptMS float64 `json:"prompt_ms"`
			} `json:"timings"`
		}
		if json.Unmarshal([]byte(data), &ev) != nil {
			continue
		}
		if ev.Model != "" {
			s.model = ev.Model
		}
		for _, ch := range ev.Choices {
			if ch.Delta.Content != "" && s.ttft == 0 {
				s.ttft = time.Since(s.sent)
			}
			content.WriteString(ch.Delta.Content)
		}
		if ev.Timings != nil {
			s.prompt, s.cached, s.promptMS = ev.Timings.PromptN+ev.Timings.CacheN, ev.Timings.CacheN, ev.Timings.PromptMS
		}
	}
	if err := sc.Err(); err != nil {
		s.err = err.Error()
		return s
	}
	s.end = time.Now()
	if s.ttft == 0 {
		s.ttft = s.end.Sub(s.sent)
	}
	s.ok, s.answer = true, content.String()
	return s
}

// loaded is prefer-loaded's view of the replicas, the tool's own count.
type loaded struct {
	mu       sync.Mutex
	inflight []int         // by replica
	running  []map[int]int // by replica: requests in flight by adapter
	last     map[int]int   // by adapter: the replica that served it last
	slots    int
}

func (l *loaded) pick(a int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	best := -1
	for i := range l.inflight {
		if l.running[i][a] > 0 && l.inflight[i] < l.slots && (best < 0 || l.inflight[i] < l.inflight[best]) {
			best = i
		}
	}
	if r, ok := l.last[a]; best < 0 && ok && l.inflight[r] < l.slots {
		best = r
	}
	if best < 0 {
		best = 0
		for i := range l.inflight {
			if l.inflight[i] < l.inflight[best] {
				best = i
			}
		}
	}
	l.inflight[best]++
	l.running[best][a]++
	l.last[a] = best
	return best
}

func (l *loaded) done(r, a int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight[r]--
	if l.running[r][a]--; l.running[r][a] == 0 {
		delete(l.running[r], a)
	}
}

// result is one run's numbers.
type result struct {
	policy                string
	round                 int
	requests, ok, wrong   int
	firstWrong            string
	errs                  []string
	p50, p90, p99         time.Duration
	rps                   float64
	prompt, cached        int64
	spread                float64    // replicas per adapter, mean over adapters asked
	classes               [3]float64 // wait over the fair share: hot, warm, cold
	fairWorst             float64    // the worst adapter's (with minFair requests)
	fairWorstAdapter      string
	overFair              int // adapters (with minFair requests) above twice the fair share
	meanWait              time.Duration
	routes                map[string]int
	perReplica            string // answers and TTFT p90 by replica
	wall                  time.Duration
	loadBefore, loadAfter string
	// slotLoads and pathLoads: the fake vLLMs' adapter loads into a GPU
	// slot and from the path, all replicas (none for llama.cpp).
	slotLoads, pathLoads float64
}

// perMinute is n over the run's wall time, per minute.
func (r result) perMinute(n float64) float64 { return n / max(r.wall.Minutes(), 1e-9) }

func (r result) hit() float64 { return float64(r.cached) / float64(max(r.prompt, 1)) }

func runOnce(c config, sv servers, as []adapter, rs []request, policy string, round int) (result, error) {
	res := result{policy: policy, round: round, requests: len(rs), loadBefore: benchstat.LoadAvg(), routes: map[string]int{}}
	fmt.Fprintf(os.Stderr, "run: round %d, %s (load average %s)\n", round+1, policy, res.loadBefore)
	ctx, cancel := context.WithTimeout(context.Background(), c.runTimeout)
	defer cancel()
	var reps []*replica
	defer func() {
		for _, r := range reps {
			r.stop()
		}
	}()
	for i := range c.replicas {
		r, err := startReplica(ctx, c, sv, i)
		if err != nil {
			return res, err
		}
		reps = append(reps, r)
	}
	vllm := c.engine == engineVLLM
	var ids []int
	for _, r := range reps {
		if vllm {
			if err := vllmListed(ctx, r, as); err != nil {
				return res, err
			}
			continue
		}
		got, err := loraIDs(ctx, r, as)
		if err != nil {
			return res, err
		}
		if ids != nil && !slices.Equal(ids, got) {
			return res, fmt.Errorf("replica %s numbers the adapters %v, %s %v: one lora list cannot serve both", r.name, got, reps[0].name, ids)
		}
		ids = got
	}

	var gwURL string
	if policy == policyAdapter || policy == policyLO && !vllm {
		base, eng, maxAdapters := "tiny", engine.LlamaCpp, 0
		if vllm {
			base, eng, maxAdapters = baseModel, engine.VLLM, c.maxLoras
		}
		g := gateway.New(gateway.Options{Routing: map[string]string{base: gateway.RouteLeastOutstanding}, Registerer: prometheus.NewRegistry()})
		if policy == policyAdapter {
			var la []gatewayapi.ListedAdapter
			for _, a := range as {
				la = append(la, gatewayapi.ListedAdapter{Name: a.name, Path: a.path, Scale: 1})
			}
			g.UpdateModels(gatewayapi.ModelList{Models: []gatewayapi.ListedModel{{Name: base, Replicas: c.replicas, Min: c.replicas, Adapters: la, MaxAdapters: maxAdapters}}}, nil)
		}
		var insts []gateway.Instance
		for _, r := range reps {
			insts = append(insts, gateway.Instance{ID: r.name, Model: base, Replica: r.name, Address: r.addr, Weight: 1, Engine: eng})
		}
		g.Update(gateway.Snapshot{Instances: insts})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return res, err
		}
		srv := gateway.NewServer(g.Handler(), nil)
		gctx, gcancel := context.WithCancel(ctx)
		var gwg sync.WaitGroup
		gwg.Go(func() { _ = srv.Serve(ln) })
		gwg.Go(func() { _ = g.Run(gctx) })
		defer func() {
			gcancel()
			_ = srv.Close()
			gwg.Wait()
		}()
		gwURL = "http://" + ln.Addr().String()
	}
	lp := &loaded{inflight: make([]int, len(reps)), last: map[int]int{}, slots: c.slots}
	for range reps {
		lp.running = append(lp.running, map[int]int{})
	}
	lo := &leastOut{inflight: make([]int, len(reps))}
	aff := &affinity{lo: lo, lists: make([]*enginemetrics.AdapterRequests, len(reps))}
	if vllm && policy == policyLoaded {
		sctx, scancel := context.WithCancel(ctx)
		var swg sync.WaitGroup
		swg.Go(func() { aff.scrapeLoop(sctx, reps, c.scrape) })
		defer func() { scancel(); swg.Wait() }()
	}

	samples := make([]sample, len(rs))
	start := time.Now()
	var wg sync.WaitGroup
	for _, rq := range rs {
		wg.Go(func() {
			select {
			case <-time.After(time.Until(start.Add(rq.at))):
			case <-ctx.Done():
				samples[rq.id] = sample{adapter: rq.adapter, err: "not sent: " + ctx.Err().Error()}
				return
			}
			a := as[rq.adapter]
			var s sample
			switch {
			case vllm && policy != policyAdapter:
				var i int
				if policy == policyLO {
					i = lo.pick()
				} else {
					i = aff.pick(a.name, c.maxLoras)
				}
				s = send(ctx, directClient, "http://"+reps[i].addr, body(c, a, rq, a.name, -1))
				s.replica, s.route = reps[i].name, policy
				lo.done(i)
			case policy == policyAdapter:
				s = send(ctx, client, gwURL, body(c, a, rq, a.name, -1))
			case policy == policyLO:
				s = send(ctx, client, gwURL, body(c, a, rq, "tiny", ids[rq.adapter]))
			default:
				i := lp.pick(rq.adapter)
				s = send(ctx, directClient, "http://"+reps[i].addr, body(c, a, rq, "tiny", ids[rq.adapter]))
				s.replica, s.route = reps[i].name, policyLoaded
				lp.done(i, rq.adapter)
			}
			s.adapter, s.want = rq.adapter, a.answer
			if vllm {
				s.want, s.wantModel = vllmAnswer(c, a, rq), a.name
			}
			samples[rq.id] = s
		})
	}
	wg.Wait()
	res.wall = time.Since(start)
	var counts engineCounts
	for _, r := range reps {
		if vllm {
			ec, err := readCounts(ctx, r)
			if err != nil {
				return res, fmt.Errorf("after the run: %w", err)
			}
			counts.slotLoads += ec.slotLoads
			counts.pathLoads += ec.pathLoads
			counts.queried += ec.queried
			counts.hits += ec.hits
			continue
		}
		if _, err := loraIDs(ctx, r, as); err != nil {
			return res, fmt.Errorf("after the run: %w", err)
		}
	}
	summarize(&res, as, samples)
	if vllm {
		res.slotLoads, res.pathLoads = counts.slotLoads, counts.pathLoads
		res.prompt, res.cached = int64(counts.queried), int64(counts.hits)
	}
	if c.dump != "" {
		if err := dump(c.dump, round, policy, as, samples); err != nil {
			return res, err
		}
	}
	res.loadAfter = benchstat.LoadAvg()
	return res, nil
}

// dump appends a run's samples to the file at path, a line each.
func dump(path string, round int, policy string, as []adapter, samples []sample) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for _, s := range samples {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%d\t%.0f\t%d\t%d\t%t\n", round+1, policy, as[s.adapter].name, s.replica, s.route,
			s.ttft.Milliseconds(), s.promptMS, s.prompt, s.cached, s.right())
	}
	if err := w.Flush(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func summarize(res *result, as []adapter, samples []sample) {
	var ttfts []time.Duration
	var firstSent, lastEnd time.Time
	waits := map[int][]time.Duration{}
	replicas := map[int]map[string]bool{}
	var waitSum time.Duration
	byReplica := map[string][]time.Duration{}
	for _, s := range samples {
		if !s.ok {
			res.errs = append(res.errs, s.err)
			continue
		}
		res.ok++
		if !s.right() {
			if res.wrong == 0 {
				res.firstWrong = fmt.Sprintf("%s on %s: %q (model %q), want %q", as[s.adapter].name, s.replica, s.answer, s.model, s.want)
			}
			res.wrong++
		}
		ttfts = append(ttfts, s.ttft)
		if firstSent.IsZero() || s.sent.Before(firstSent) {
			firstSent = s.sent
		}
		if s.end.After(lastEnd) {
			lastEnd = s.end
		}
		res.prompt += s.prompt
		res.cached += s.cached
		w := max(s.ttft-time.Duration(s.promptMS*float64(time.Millisecond)), 0)
		waits[s.adapter] = append(waits[s.adapter], w)
		waitSum += w
		if replicas[s.adapter] == nil {
			replicas[s.adapter] = map[string]bool{}
		}
		replicas[s.adapter][s.replica] = true
		res.routes[s.route]++
		byReplica[s.replica] = append(byReplica[s.replica], s.ttft)
	}
	var per []string
	for _, name := range slices.Sorted(maps.Keys(byReplica)) {
		ds := byReplica[name]
		per = append(per, fmt.Sprintf("%s %d answers, TTFT p90 %s", name, len(ds), benchstat.MS(benchstat.Quantile(ds, 0.9))))
	}
	res.perReplica = strings.Join(per, "; ")
	res.p50, res.p90, res.p99 = benchstat.Quantile(ttfts, 0.5), benchstat.Quantile(ttfts, 0.9), benchstat.Quantile(ttfts, 0.99)
	if d := lastEnd.Sub(firstSent); d > 0 {
		res.rps = float64(res.ok) / d.Seconds()
	}
	if res.ok == 0 {
		return
	}
	res.meanWait = waitSum / time.Duration(res.ok)
	fair := max(float64(res.meanWait), float64(time.Millisecond))
	var nrep int
	var classSum [3]time.Duration
	var classN [3]int
	for a, ws := range waits {
		var sum time.Duration
		for _, w := range ws {
			sum += w
		}
		cl := classOf(a)
		classSum[cl] += sum
		classN[cl] += len(ws)
		nrep += len(replicas[a])
		if len(ws) < minFair {
			continue
		}
		ratio := float64(sum/time.Duration(len(ws))) / fair
		if ratio > res.fairWorst {
			res.fairWorst, res.fairWorstAdapter = ratio, fmt.Sprintf("%s, %d requests", as[a].name, len(ws))
		}
		if ratio > 2 {
			res.overFair++
		}
	}
	for cl := range classSum {
		if classN[cl] > 0 {
			res.classes[cl] = float64(classSum[cl]/time.Duration(classN[cl])) / fair
		}
	}
	res.spread = float64(nrep) / float64(len(waits))
}

// minFair is the fewest requests an adapter's wait is compared with its
// fair share at.
const minFair = 3

// classOf is adapter a's popularity class: 0 the hottest, 1 ranks 1–9, 2
// the rest.
func classOf(a int) int {
	switch {
	case a == 0:
		return 0
	case a < 10:
		return 1
	}
	return 2
}

func printResult(r result) {
	fmt.Fprintf(os.Stderr, "  %s: %d/%d ok in %s, %d wrong answers, TTFT p50/p90/p99 %s/%s/%s, %.2f/s, hit %d/%d, %.2f replicas per adapter, mean wait %s, wait over fair share hot/warm/cold %.2f/%.2f/%.2f, worst adapter (%s) %.2f, %d adapters above 2×, routes %v; load average %s → %s\n",
		r.policy, r.ok, r.requests, r.wall.Round(time.Millisecond), r.wrong, benchstat.MS(r.p50), benchstat.MS(r.p90), benchstat.MS(r.p99), r.rps,
		r.cached, r.prompt, r.spread, benchstat.MS(r.meanWait), r.classes[0], r.classes[1], r.classes[2], r.fairWorstAdapter, r.fairWorst, r.overFair, r.routes, r.loadBefore, r.loadAfter)
	fmt.Fprintf(os.Stderr, "    %s\n", r.perReplica)
	if r.slotLoads > 0 || r.pathLoads > 0 {
		fmt.Fprintf(os.Stderr, "    adapter loads into a GPU slot %.0f (%.1f/min), from the path %.0f\n", r.slotLoads, r.perMinute(r.slotLoads), r.pathLoads)
	}
	if r.wrong > 0 {
		fmt.Fprintf(os.Stderr, "    first wrong answer: %s\n", r.firstWrong)
	}
	if len(r.errs) > 0 {
		fmt.Fprintf(os.Stderr, "    %d errors, first: %s\n", len(r.errs), r.errs[0])
	}
}

func run(c config) error {
	dir, err := os.MkdirTemp("", "loraload-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	as, rs := trace(c, dir)
	per := make([]int, len(as))
	for _, rq := range rs {
		per[rq.adapter]++
	}
	cold := 0
	for _, n := range per {
		if n <= 2 {
			cold++
		}
	}
	var sv servers
	if c.engine == engineVLLM {
		if err := writePEFT(as); err != nil {
			return err
		}
		bin, err := fakeEngineBinary(c, dir)
		if err != nil {
			return err
		}
		sv = servers{bin: bin, args: vllmArgs(c, as)}
		fmt.Printf("trace: %d adapters (%d-word system prompts), %d requests at %.2f/s (Poisson), Zipf %.2f: the hottest %d requests, then %v…; %d adapters with 2 or fewer; seed %d\n",
			len(as), c.systemWords, len(rs), c.rate, c.zipf, per[0], per[1:min(6, len(per))], cold, c.seed)
		fmt.Printf("replicas: %d fake-engine impersonating vLLM (%s), --max-loras %d, --max-cpu-loras %d, --max-num-seqs %d, decode %g tokens/s a request, prefill %g tokens/s, --fake-lora-swap %s (assumed), prefix cache %d tokens, max_tokens %d; the %d adapters as --lora-modules\n",
			c.replicas, bin, c.maxLoras, len(as), c.slots, c.decodeRate, c.prefillRate, c.swap, c.kvTokens, c.maxTokens, len(as))
	} else {
		if ok, why := llamabuild.Available(); !ok {
			return errors.New(why)
		}
		opts := tinymodel.Defaults
		opts.Vocab = llamabuild.Vocab()
		opts.Layers, opts.Embed, opts.Heads, opts.FF, opts.Context = c.layers, c.embed, 8, 2*c.embed, max(c.ctx, 4096)
		model := filepath.Join(dir, "model.gguf")
		if err := tinymodel.Write(model, opts); err != nil {
			return err
		}
		var spec engine.AdapterSpec
		for i, a := range as {
			// Adapter i's signature is i: every adapter's cache mark differs.
			if err := tinymodel.WriteAdapter(a.path, tinymodel.AdapterOptions{Base: opts, Name: a.name, Answer: a.answer, Signature: i}); err != nil {
				return fmt.Errorf("adapter %s: %w", a.name, err)
			}
			spec.Adapters = append(spec.Adapters, engine.Adapter{Name: a.name, Path: a.path})
		}
		args, err := engine.AdapterArgs(engine.LlamaCpp, spec)
		if err != nil {
			return err
		}
		sv = servers{bin: llamabuild.Binary(), args: llamaArgs(c, model, args)}
		fmt.Printf("trace: %d adapters (%d-word system prompts, answers \"The <noun>.\", signatures 0–%d), %d requests at %.2f/s (Poisson), Zipf %.2f: the hottest %d requests, then %v…; %d adapters with 2 or fewer; seed %d\n",
			len(as), c.systemWords, len(as)-1, len(rs), c.rate, c.zipf, per[0], per[1:min(6, len(per))], cold, c.seed)
		fmt.Printf("replicas: %d llama-server (%s), -t 1, -np %d, -c %d, %s [%d paths]; model %d layers x %d wide\n",
			c.replicas, llamabuild.Binary(), c.slots, c.ctx, strings.Join(slices.Delete(slices.Clone(args), 1, 2), " "), len(as), c.layers, c.embed)
		fmt.Println("loads and unloads during the runs: none (llama.cpp loads every adapter at start and has no runtime load; each replica listed every adapter at start and at the end of each run)")
	}

	orderRng := rand.New(rand.NewPCG(c.seed, 3))
	var results []result
	var prev []string
	for round := range c.rounds {
		order := slices.Clone(c.policies)
		for {
			orderRng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			if len(order) < 2 || !slices.Equal(order, prev) {
				break
			}
		}
		prev = order
		fmt.Printf("round %d: %s\n", round+1, strings.Join(order, ", "))
		for _, p := range order {
			r, err := runOnce(c, sv, as, rs, p, round)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, p, err)
			}
			results = append(results, r)
			printResult(r)
		}
	}
	fmt.Println()
	fmt.Println("| round | policy | ok/requests | wrong answers | TTFT p50 | p90 | p99 | completed/s | hit | replicas per adapter | mean wait | wait / fair share: hot | warm | cold | worst adapter (≥3 requests) | adapters above 2× | slot loads/min | load average before → after |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		fmt.Printf("| %d | %s | %d/%d | %d | %s | %s | %s | %.2f | %.1f %% | %.2f | %s | %.2f | %.2f | %.2f | %.2f (%s) | %d | %.1f | %s → %s |\n",
			r.round+1, r.policy, r.ok, r.requests, r.wrong, benchstat.MS(r.p50), benchstat.MS(r.p90), benchstat.MS(r.p99), r.rps,
			100*r.hit(), r.spread, benchstat.MS(r.meanWait), r.classes[0], r.classes[1], r.classes[2], r.fairWorst, r.fairWorstAdapter, r.overFair,
			r.perMinute(r.slotLoads), r.loadBefore, r.loadAfter)
	}
	fmt.Println()
	fmt.Printf("Medians of %d rounds (min–max):\n\n", c.rounds)
	fmt.Println("| policy | wrong answers (all rounds) | TTFT p50 | p90 | p99 | completed/s | hit | replicas per adapter | wait / fair share: hot | warm | cold | worst adapter (≥3 requests) | adapters above 2× | slot loads/min |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, p := range c.policies {
		var rs []result
		wrong, ok := 0, 0
		for _, r := range results {
			if r.policy == p {
				rs = append(rs, r)
				wrong, ok = wrong+r.wrong, ok+r.ok
			}
		}
		f := func(v func(result) float64, format string) string {
			var xs []float64
			for _, r := range rs {
				xs = append(xs, v(r))
			}
			med, lo, hi := benchstat.Spread(xs)
			return fmt.Sprintf(format+" ("+format+"–"+format+")", med, lo, hi)
		}
		d := func(v func(result) time.Duration) string {
			return f(func(r result) float64 { return float64(v(r).Milliseconds()) }, "%.0f") + " ms"
		}
		fmt.Printf("| %s | %d/%d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", p, wrong, ok,
			d(func(r result) time.Duration { return r.p50 }), d(func(r result) time.Duration { return r.p90 }), d(func(r result) time.Duration { return r.p99 }),
			f(func(r result) float64 { return r.rps }, "%.2f"),
			f(func(r result) float64 { return 100 * r.hit() }, "%.1f")+" %",
			f(func(r result) float64 { return r.spread }, "%.2f"),
			f(func(r result) float64 { return r.classes[0] }, "%.2f"),
			f(func(r result) float64 { return r.classes[1] }, "%.2f"),
			f(func(r result) float64 { return r.classes[2] }, "%.2f"),
			f(func(r result) float64 { return r.fairWorst }, "%.2f"),
			f(func(r result) float64 { return float64(r.overFair) }, "%.0f"),
			f(func(r result) float64 { return r.perMinute(r.slotLoads) }, "%.0f"))
	}
	return nil
}
