// Command prefixload measures the gateway's routing policies on real
// llama.cpp servers (llama-server, one thread each) serving a tiny model
// large enough that prefill dominates: a seeded trace of tenants with long
// shared system prompts, users with multi-turn conversations and one hot
// tenant. Open loop (the default), conversations arrive as a Poisson
// process at -rate and each turn is sent when the previous one is answered
// plus a think time; with -sequential, one request at a time, the next
// turn a seeded draw among the conversations with turns left. Each run
// starts fresh replicas (cold caches) and sends the whole trace through one
// or two in-process gateways (least-outstanding or prefix; with two, every
// request goes to one of them at random), or straight to a replica:
// random (a replica drawn for each request) or affinity (perfect affinity:
// tenant t's every request to replica t mod n, the ideal's routing).
// -churn adds a run per gateway policy where a replica joins at a third of
// the conversations and one leaves at two thirds.
//
// Every run is repeated -rounds times, interleaved: each round runs every
// policy (at every -cache-ram setting) once, in an order shuffled afresh
// each round from -seed (never the round before's), so no policy always
// runs first or after the same one. Per run it prints TTFT p50/p90/p99 (to the first
// content token of a stream), completed requests per second, the hit
// ratio the engines reported (cached over prompt tokens, from each
// answer's usage) against the ideal (the share of prompt tokens an
// unbounded cache with perfect affinity would hit: each request's longest
// token prefix shared with an earlier request of the trace, tokenized by
// the engine), the conversations whose turns did not all go to one
// replica, the spills, and the load average before and after; then, per
// policy and setting, the median of the rounds and their spread (min–max).
//
// For prefix runs it also measures, request by request, whether two
// gateways agree: before each request is sent, two more gateways that are
// sent nothing (the replicas listed in opposite orders under other IDs)
// are asked where it would go (gateway.Gateway.Choose) from one load
// snapshot, the requests in flight per replica as the load generator
// counts them (from an answer's headers to its end); and, with two
// gateways, the gateway not sent the request is asked from its own view at
// that moment, against the replica that answered it.
//
// On standard error, per run: where the hits the ideal counts were lost (a
// conversation's first turn, a later turn on the replica of the turn
// before, a later turn elsewhere), the engines' own prompt and answer
// time, and each replica's answers and TTFT. -dump writes every answer,
// -server-logs each replica's log (with -server-args "-lv 4", llama.cpp's
// slot and prompt-cache decisions). Bounded: the trace's requests once per
// run, each run within -run-timeout.
//
//	go run ./bench/prefixload -replicas 3 -tenants 4 -users 4 -turns 4 -rate 0.5
//
// Results are in docs/perf.md ("Gateway: prefix routing on real engines",
// "Prefix routing with bounded loads (issue 36)").
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
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
	"github.com/llmgw/llmgw/gateway"
	"github.com/llmgw/llmgw/internal/testing/llamabuild"
	"github.com/llmgw/llmgw/internal/testing/tinymodel"
)

// Policies besides the gateway's: a replica drawn at random for each
// request, and perfect affinity, both sent straight to the replica.
const (
	policyRandom   = "random"
	policyAffinity = "affinity"
)

type config struct {
	replicas, tenants, users, turns, systemWords, maxTokens, layers, embed, slots, ctx int
	portBase, rounds, live                                                             int
	hot, rate, loadFactor, historyFactor                                               float64
	think, runTimeout, engineEvery, openingWait                                        time.Duration
	openingLimit                                                                       int
	seed                                                                               uint64
	slotSimilarity, cacheRAM, dump, serverArgs, serverLogs                             string
	cacheRAMs, policies                                                                []string
	gateways                                                                           []int
	churn, sequential                                                                  bool
}

func main() {
	var c config
	var policies, gateways, cacheRAMs string
	flag.IntVar(&c.replicas, "replicas", 3, "llama-server replicas (one thread each)")
	flag.IntVar(&c.tenants, "tenants", 4, "tenants, each with its own system prompt")
	flag.IntVar(&c.users, "users", 4, "conversations per ordinary tenant")
	flag.IntVar(&c.turns, "turns", 4, "turns per conversation")
	flag.Float64Var(&c.hot, "hot", 0.5, "the hot tenant's share of all conversations (0: none hot)")
	flag.IntVar(&c.systemWords, "system-words", 700, "words of each system prompt")
	flag.IntVar(&c.maxTokens, "max-tokens", 8, "max_tokens of each request")
	flag.Float64Var(&c.rate, "rate", 0.5, "conversations starting per second (Poisson; not with -sequential)")
	flag.BoolVar(&c.sequential, "sequential", false, "send one request at a time, the next turn a seeded draw among the conversations with turns left (-rate and -think unused)")
	flag.IntVar(&c.live, "live", 8, "with -sequential, the conversations open at once")
	flag.IntVar(&c.rounds, "rounds", 3, "rounds: every run once a round, in an order rotated each round")
	flag.Float64Var(&c.loadFactor, "load-factor", gateway.DefaultPrefixLoadFactor, "the prefix policy's load factor (gateway.Options.PrefixLoadFactor)")
	flag.DurationVar(&c.engineEvery, "engine-metrics-interval", gateway.DefaultEngineMetricsInterval, "how often each gateway reads the replicas' engine metrics (gateway.Options.EngineMetricsInterval)")
	flag.Float64Var(&c.historyFactor, "history-load-factor", gateway.DefaultPrefixHistoryLoadFactor, "the prefix policy's load factor for a turn that continues a conversation (gateway.Options.PrefixHistoryLoadFactor)")
	flag.IntVar(&c.openingLimit, "opening-limit", 0, "requests a replica may hold before a conversation's first turn waits for it (gateway.Options.PrefixOpeningLimit; 0: one more than its slots, learned)")
	flag.DurationVar(&c.openingWait, "opening-wait", gateway.DefaultPrefixOpeningWait, "the longest a first turn waits for its replica (gateway.Options.PrefixOpeningWait; 0: none waits)")
	flag.DurationVar(&c.think, "think", time.Second, "mean pause between a turn's answer and the next turn (exponential)")
	flag.Uint64Var(&c.seed, "seed", 1, "seed of the trace, of the rounds' order and of the random choices")
	flag.StringVar(&policies, "policies", "least-outstanding,random,prefix,affinity", "policies to run: least-outstanding, prefix (through gateways), random, affinity (direct)")
	flag.StringVar(&gateways, "gateways", "1,2", "gateway counts to run each gateway policy with")
	flag.BoolVar(&c.churn, "churn", true, "also run each gateway policy with a replica joining and one leaving")
	flag.IntVar(&c.layers, "layers", 8, "the tiny model's layers")
	flag.IntVar(&c.embed, "embed", 512, "the tiny model's width")
	flag.IntVar(&c.slots, "slots", 2, "llama-server's --parallel slots per replica")
	flag.IntVar(&c.ctx, "ctx", 8192, "llama-server's -c (shared by its slots)")
	flag.StringVar(&c.slotSimilarity, "slot-similarity", "", "llama-server's --slot-prompt-similarity (empty: its default, 0.10)")
	flag.StringVar(&cacheRAMs, "cache-ram", "", "llama-server's --cache-ram in MiB, its host-memory prompt cache (empty: its default, 8192; 0: off); several, comma-separated, run every policy at each")
	flag.StringVar(&c.dump, "dump", "", "append every answer of every run to this file, a line each (tab-separated: run, conversation, turn, replica, route, prompt tokens, ideal, cached, TTFT ms)")
	flag.StringVar(&c.serverArgs, "server-args", "", "more llama-server arguments, split at spaces (after the ones above: a later one wins)")
	flag.StringVar(&c.serverLogs, "server-logs", "", "a directory to write each replica's output to, a file per run and replica (empty: discarded)")
	flag.IntVar(&c.portBase, "port-base", 0, "replica i listens on 127.0.0.1:port-base+i in every run, so the prefix policy (it hashes the address) draws the same in every run (0: ports the kernel picks, a new draw each run)")
	flag.DurationVar(&c.runTimeout, "run-timeout", 4*time.Minute, "the longest one run may take")
	flag.Parse()
	c.policies = strings.Split(policies, ",")
	for _, p := range c.policies {
		if p != policyRandom && p != policyAffinity && p != gateway.RouteLeastOutstanding && p != gateway.RoutePrefix {
			fail(fmt.Errorf("-policies: %q is not least-outstanding, prefix, random or affinity", p))
		}
	}
	for _, s := range strings.Split(gateways, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 8 {
			fail(fmt.Errorf("-gateways: %q: want counts from 1 to 8", s))
		}
		c.gateways = append(c.gateways, n)
	}
	c.cacheRAMs = strings.Split(cacheRAMs, ",")
	for _, s := range c.cacheRAMs {
		if n, err := strconv.Atoi(s); s != "" && (err != nil || n < 0) {
			fail(fmt.Errorf("-cache-ram: %q: want MiB (0 or more), or nothing for llama-server's default", s))
		}
	}
	if c.replicas < 1 || c.tenants < 1 || c.users < 1 || c.turns < 1 || c.rate <= 0 || c.hot < 0 || c.hot >= 1 || c.rounds < 1 || c.live < 1 {
		fail(errors.New("-replicas, -tenants, -users, -turns, -rounds, -live at least 1, -rate above 0, -hot in [0, 1)"))
	}
	if c.portBase != 0 && (c.portBase < 1024 || c.portBase+c.replicas > 65535) {
		fail(fmt.Errorf("-port-base %d: want 0, or a port from 1024 with room for %d replicas after it", c.portBase, c.replicas+1))
	}
	if err := run(c); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "prefixload:", err)
	os.Exit(1)
}

// conversation is one user's chat with one tenant's assistant.
type conversation struct {
	id, tenant int
	hot        bool
	start      time.Duration // from the run's start
	users      []string      // the user's turns
	thinks     []time.Duration
}

// words is the vocabulary the prompts are drawn from.
var words = strings.Fields(`the of and to in is that for it as with was on be by at this from or an are
which not have but had they you were their one all we can her has there been if more when will would who
so no system model answer question data value time first new used two may way long use people make like
over such only other than then also after work state number each many some these out could into most
through back much good before well made where right part great same own small large world still around
every place while point order word course between under never last again keep help city house study
light water power field line story group short plan early real play hold turn open close begin end`)

// step is one request of a sequential run: conversation conv's turn.
type step struct{ conv, turn int }

// trace builds the conversations: tenant 0 is the hot one (a -hot share
// of all conversations), the others have -users each. With -sequential,
// seq is the order of every request: -live conversations open at once (in
// the trace's order), the next turn drawn among them, one that ends
// replaced by the next.
func trace(c config) (systems []string, convs []*conversation, seq []step) {
	rng := rand.New(rand.NewPCG(c.seed, 0x9e3779b97f4a7c15))
	for t := range c.tenants {
		var b strings.Builder
		fmt.Fprintf(&b, "You are the assistant of tenant %d.", t)
		for range c.systemWords {
			b.WriteByte(' ')
			b.WriteString(words[rng.IntN(len(words))])
		}
		systems = append(systems, b.String())
	}
	perTenant := make([]int, c.tenants)
	for t := range perTenant {
		perTenant[t] = c.users
	}
	if c.hot > 0 && c.tenants > 1 {
		// Hot share h of all: n0 / (n0 + others) = h.
		others := c.users * (c.tenants - 1)
		perTenant[0] = max(1, int(math.Round(c.hot*float64(others)/(1-c.hot))))
	}
	for t, n := range perTenant {
		for u := range n {
			cv := &conversation{tenant: t, hot: t == 0 && c.hot > 0}
			for k := range c.turns {
				var b strings.Builder
				fmt.Fprintf(&b, "User %d-%d, turn %d:", t, u, k+1)
				for range 20 + rng.IntN(40) {
					b.WriteByte(' ')
					b.WriteString(words[rng.IntN(len(words))])
				}
				cv.users = append(cv.users, b.String())
				cv.thinks = append(cv.thinks, time.Duration(rng.ExpFloat64()*float64(c.think)))
			}
			convs = append(convs, cv)
		}
	}
	rng.Shuffle(len(convs), func(i, j int) { convs[i], convs[j] = convs[j], convs[i] })
	var at time.Duration
	for i, cv := range convs {
		cv.id = i
		cv.start = at
		at += time.Duration(rng.ExpFloat64() / c.rate * float64(time.Second))
	}
	if c.sequential {
		draw := rand.New(rand.NewPCG(c.seed, 2))
		next := make([]int, len(convs))
		var open []int
		started := 0
		for started < len(convs) || len(open) > 0 {
			for len(open) < c.live && started < len(convs) {
				open = append(open, started)
				started++
			}
			i := draw.IntN(len(open))
			id := open[i]
			seq = append(seq, step{id, next[id]})
			if next[id]++; next[id] == c.turns {
				open = slices.Delete(open, i, i+1)
			}
		}
	}
	return systems, convs, seq
}

// replica is one llama-server.
type replica struct {
	name, addr string
	cmd        *exec.Cmd
	done       chan struct{}
}

func startReplica(ctx context.Context, c config, model string, i int) (*replica, error) {
	name := fmt.Sprintf("r%d", i)
	// With -port-base the port is replica i's; otherwise the kernel's.
	// Free now? llama-server's own error would say less.
	port := 0
	if c.portBase != 0 {
		port = c.portBase + i
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		if c.portBase != 0 {
			return nil, fmt.Errorf("-port-base: replica %s: %w", name, err)
		}
		return nil, fmt.Errorf("replica %s: %w", name, err)
	}
	port = ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	args := []string{"-m", model, "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--metrics", "--alias", "tiny",
		"-t", "1", "-tb", "1", "-np", strconv.Itoa(c.slots), "-c", strconv.Itoa(c.ctx), "--context-shift"}
	if c.slotSimilarity != "" {
		args = append(args, "--slot-prompt-similarity", c.slotSimilarity)
	}
	if c.cacheRAM != "" {
		args = append(args, "--cache-ram", c.cacheRAM)
	}
	args = append(args, strings.Fields(c.serverArgs)...)
	cmd := exec.Command(llamabuild.Binary(), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if c.serverLogs != "" {
		f, err := os.CreateTemp(c.serverLogs, name+"-*.log")
		if err != nil {
			return nil, err
		}
		defer func() { _ = f.Close() }() // the child holds its own descriptor
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &replica{name: name, addr: "127.0.0.1:" + strconv.Itoa(port), cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(r.done) }()
	if err := llamabuild.WaitReady(ctx, "http://"+r.addr, r.done, time.Minute); err != nil {
		r.stop()
		return nil, fmt.Errorf("replica %s: %w", name, err)
	}
	return r, nil
}

func (r *replica) stop() {
	_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	<-r.done
}

func (r *replica) instance() gateway.Instance {
	return gateway.Instance{ID: r.name, Model: "tiny", Replica: r.name, Address: r.addr, Weight: 1}
}

// sample is one request's outcome.
type sample struct {
	conv, turn     int
	hot            bool
	sent, end      time.Time
	ttft           time.Duration
	ok             bool
	replica, route string
	prompt, cached int64
	cacheKnown     bool
	messages       []map[string]string
	// From the engine's timings (llama.cpp's last chunk): time spent on
	// the prompt and on the answer.
	promptMS, predictedMS float64
	// idealTokens and tokens: this request's longest token prefix shared
	// with a request sent before it, and all its tokens (idealHit).
	idealTokens, tokens int
}

// setup is what one run sends to: gateways, or the replicas direct.
type setup struct {
	policy   string
	gws      []*gateway.Gateway
	gwURLs   []string
	mu       sync.Mutex
	replicas []*replica // in the view now
	// shadows are two gateways sent nothing, asked where each request of a
	// prefix run would go from one load snapshot; they list the replicas
	// in opposite orders under other IDs, as two gateways' discoveries
	// may.
	shadows [2]*gateway.Gateway
}

func (s *setup) view() []*replica {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.replicas)
}

func (s *setup) publish(rs []*replica) {
	s.mu.Lock()
	s.replicas = rs
	s.mu.Unlock()
	var insts, others []gateway.Instance
	for i, r := range rs {
		insts = append(insts, r.instance())
		in := rs[len(rs)-1-i].instance()
		in.ID = "shadow-" + in.ID
		others = append(others, in)
	}
	for _, g := range s.gws {
		g.Update(gateway.Snapshot{Instances: insts})
	}
	if s.shadows[0] != nil {
		s.shadows[0].Update(gateway.Snapshot{Instances: insts})
		s.shadows[1].Update(gateway.Snapshot{Instances: others})
	}
}

// flight counts the requests in flight per replica as the load generator
// sees them: from an answer's headers (which name the replica) to its end.
type flight struct {
	mu sync.Mutex
	n  map[string]int64 // by address
}

func (f *flight) add(addr string, d int64) {
	f.mu.Lock()
	f.n[addr] += d
	f.mu.Unlock()
}

func (f *flight) snapshot() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.n)
}

// agreement counts, request by request, whether two gateways agree.
type agreement struct {
	mu sync.Mutex
	// same: the two shadows from one snapshot; live: the gateway not sent
	// the request, from its own view when it was sent, against the replica
	// that answered.
	same, sameN, live, liveN int
}

// client sends every request to a gateway; directClient sends random's
// straight to a replica, on a new connection each: llama-server
// (cpp-httplib) closes a kept-alive connection on its own terms, and a POST
// sent on one it is closing fails ("server closed idle connection", EOF)
// and is not retried, which a gateway's own transport does for it.
var (
	client       = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256, DisableCompression: true}}
	directClient = &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true, DisableCompression: true}}
)

// chatBody is the body of a turn with msgs.
func chatBody(msgs []map[string]string, maxTokens int) []byte {
	body, _ := json.Marshal(map[string]any{"model": "tiny", "messages": msgs, "max_tokens": maxTokens, "stream": true,
		"stream_options": map[string]any{"include_usage": true}})
	return body
}

// send sends one turn's body and reads its stream, counting it in fl on
// its replica (direct's, or the one the gateway's answer names, whose
// address is addrOf's) from its headers to its end.
func send(ctx context.Context, hc *http.Client, url string, body []byte, direct string, addrOf map[string]string, fl *flight) (s sample, answer string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return s, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	s.sent = time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return s, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	s.replica, s.route = resp.Header.Get(gateway.ReplicaHeader), resp.Header.Get(gateway.RouteHeader)
	if direct != "" {
		s.replica = direct
	}
	if addr := addrOf[s.replica]; addr != "" {
		fl.add(addr, 1)
		defer fl.add(addr, -1)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return s, "", fmt.Errorf("%s: %s", resp.Status, b)
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
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens int64 `json:"prompt_tokens"`
				Details      *struct {
					CachedTokens *int64 `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
			Timings *struct {
				CacheN      *int64  `json:"cache_n"`
				PromptN     *int64  `json:"prompt_n"`
				PromptMS    float64 `json:"prompt_ms"`
				PredictedMS float64 `json:"predicted_ms"`
			} `json:"timings"`
		}
		if json.Unmarshal([]byte(data), &ev) != nil {
			continue
		}
		for _, ch := range ev.Choices {
			if ch.Delta.Content != "" && s.ttft == 0 {
				s.ttft = time.Since(s.sent)
			}
			content.WriteString(ch.Delta.Content)
		}
		if ev.Timings != nil {
			s.promptMS, s.predictedMS = ev.Timings.PromptMS, ev.Timings.PredictedMS
		}
		if ev.Usage != nil && ev.Usage.Details != nil && ev.Usage.Details.CachedTokens != nil {
			s.prompt, s.cached, s.cacheKnown = ev.Usage.PromptTokens, *ev.Usage.Details.CachedTokens, true
		} else if ev.Timings != nil && ev.Timings.CacheN != nil && ev.Timings.PromptN != nil && !s.cacheKnown {
			s.prompt, s.cached, s.cacheKnown = *ev.Timings.PromptN+*ev.Timings.CacheN, *ev.Timings.CacheN, true
		}
	}
	if err := sc.Err(); err != nil {
		return s, "", err
	}
	s.end = time.Now()
	if s.ttft == 0 {
		s.ttft = s.end.Sub(s.sent)
	}
	s.ok = true
	return s, content.String(), nil
}

// kind is one run of a round: a policy through a number of gateways (0:
// direct), with or without churn, at a cache size (empty: llama-server's
// default).
type kind struct {
	policy   string
	gateways int
	churn    bool
	cacheRAM string
}

func (k kind) name() string {
	name := k.policy
	switch {
	case k.gateways == 0:
		name += " (direct)"
	case k.churn:
		name += ", 1 gateway, churn"
	default:
		name += fmt.Sprintf(", %d gateway", k.gateways)
		if k.gateways > 1 {
			name += "s"
		}
	}
	return name
}

func (k kind) setting() string { return "cache-ram " + cmp.Or(k.cacheRAM, "default") }

// result is one run's numbers.
type result struct {
	kind                  kind
	round                 int
	requests, ok          int
	p50, p90, p99         time.Duration
	hotP99, otherP99      time.Duration
	rps                   float64
	prompt, cached        int64
	unknown               int
	ideal                 float64
	moved, convs          int
	spills, prefixRoutes  int
	waits                 map[string]float64 // first turns that waited, by outcome
	wall                  time.Duration
	errs                  []string
	losses                string
	loadBefore, loadAfter string
	// Two gateways' agreement (prefix runs): from one snapshot, and live.
	same, sameN, live, liveN int
}

func (r result) hit() float64 { return float64(r.cached) / float64(max(r.prompt, 1)) }

func run(c config) error {
	if ok, why := llamabuild.Available(); !ok {
		return errors.New(why)
	}
	dir, err := os.MkdirTemp("", "prefixload-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	opts := tinymodel.Defaults
	opts.Vocab = llamabuild.Vocab()
	opts.Layers, opts.Embed, opts.Heads, opts.FF, opts.Context = c.layers, c.embed, 8, 2*c.embed, max(c.ctx, 4096)
	model := filepath.Join(dir, "model.gguf")
	if err := tinymodel.Write(model, opts); err != nil {
		return err
	}
	systems, convs, seq := trace(c)
	nreq := len(convs) * c.turns
	arrival := fmt.Sprintf("open loop: %.2f conversations/s (Poisson), think %s", c.rate, c.think)
	if c.sequential {
		arrival = fmt.Sprintf("sequential: one request at a time, %d conversations open at once", c.live)
	}
	fmt.Printf("trace: %d tenants (%d-word system prompts), %d conversations (hot tenant: %d), %d turns each, %d requests; %s; seed %d\n",
		c.tenants, c.systemWords, len(convs), countHot(convs), c.turns, nreq, arrival, c.seed)
	var caches []string
	for _, cr := range c.cacheRAMs {
		caches = append(caches, cmp.Or(cr, "default (8192)"))
	}
	fmt.Printf("replicas: %d llama-server (%s), -t 1, -np %d, -c %d, --slot-prompt-similarity %s, --cache-ram %s MiB; model %d layers x %d wide\n",
		c.replicas, llamabuild.Binary(), c.slots, c.ctx, cmp.Or(c.slotSimilarity, "default"), strings.Join(caches, " and "), c.layers, c.embed)
	fmt.Printf("prefix load factor %g, for a conversation's later turns %g; opening limit %d (0: slots+1), opening wait %s (0: none); engine reads every %s\n",
		c.loadFactor, c.historyFactor, c.openingLimit, c.openingWait, c.engineEvery)
	var kinds []kind
	for _, cr := range c.cacheRAMs {
		for _, p := range c.policies {
			if p == policyRandom || p == policyAffinity {
				kinds = append(kinds, kind{policy: p, cacheRAM: cr})
				continue
			}
			for _, n := range c.gateways {
				kinds = append(kinds, kind{policy: p, gateways: n, cacheRAM: cr})
			}
			if c.churn {
				kinds = append(kinds, kind{policy: p, gateways: 1, churn: true, cacheRAM: cr})
			}
		}
	}
	// Each round's order: a seeded shuffle, drawn again while it is the
	// round before's.
	orderRng := rand.New(rand.NewPCG(c.seed, 3))
	var results []result
	var prev []kind
	for round := range c.rounds {
		order := slices.Clone(kinds)
		for {
			orderRng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			if len(order) < 2 || !slices.Equal(order, prev) {
				break
			}
		}
		prev = order
		var names []string
		for _, k := range order {
			names = append(names, k.name()+" at "+k.setting())
		}
		fmt.Printf("round %d: %s\n", round+1, strings.Join(names, "; "))
		for _, k := range order {
			r, err := runOnce(c, model, systems, convs, seq, k, round)
			if err != nil {
				return err
			}
			results = append(results, r)
			printResult(r)
		}
	}
	fmt.Println()
	fmt.Println("| round | run | setting | ok/requests | TTFT p50 | p90 | p99 | hot p99 | others p99 | completed/s | hit | ideal | hit/ideal | conversations moved | spills | first turns waited (expired) | two gateways agree: snapshot | live | load average before → after |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		fmt.Printf("| %d | %s | %s | %d/%d | %s | %s | %s | %s | %s | %.2f | %.1f %% | %.1f %% | %.0f %% | %d/%d | %d | %.0f (%.0f) | %s | %s | %s → %s |\n",
			r.round+1, r.kind.name(), r.kind.setting(), r.ok, r.requests, benchstat.MS(r.p50), benchstat.MS(r.p90), benchstat.MS(r.p99), cmp.Or(msOr(r.hotP99), "—"), benchstat.MS(r.otherP99), r.rps,
			100*r.hit(), 100*r.ideal, 100*r.hit()/max(r.ideal, 1e-9), r.moved, r.convs, r.spills,
			r.waits["sent"]+r.waits["expired"]+r.waits["cancelled"], r.waits["expired"], share(r.same, r.sameN), share(r.live, r.liveN), r.loadBefore, r.loadAfter)
	}
	fmt.Println()
	fmt.Printf("Medians of %d rounds (min–max):\n\n", c.rounds)
	fmt.Println("| run | setting | hit | hit/ideal | TTFT p50 | p90 | p99 | completed/s | spills | conversations moved | two gateways agree: snapshot | live |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, k := range kinds {
		var rs []result
		for _, r := range results {
			if r.kind == k {
				rs = append(rs, r)
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
		var same, sameN, live, liveN int
		for _, r := range rs {
			same, sameN, live, liveN = same+r.same, sameN+r.sameN, live+r.live, liveN+r.liveN
		}
		fmt.Printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", k.name(), k.setting(),
			f(func(r result) float64 { return 100 * r.hit() }, "%.1f")+" %",
			f(func(r result) float64 { return 100 * r.hit() / max(r.ideal, 1e-9) }, "%.0f")+" %",
			d(func(r result) time.Duration { return r.p50 }), d(func(r result) time.Duration { return r.p90 }), d(func(r result) time.Duration { return r.p99 }),
			f(func(r result) float64 { return r.rps }, "%.2f"),
			f(func(r result) float64 { return float64(r.spills) }, "%.0f"),
			f(func(r result) float64 { return float64(r.moved) }, "%.0f"),
			share(same, sameN), share(live, liveN))
	}
	return nil
}

// share is n of of as "n/of (p %)", or "—" when of is 0.
func share(n, of int) string {
	if of == 0 {
		return "—"
	}
	return fmt.Sprintf("%d/%d (%.1f %%)", n, of, 100*float64(n)/float64(of))
}

func countHot(convs []*conversation) int {
	n := 0
	for _, cv := range convs {
		if cv.hot {
			n++
		}
	}
	return n
}

// msOr is ms, or "" for no time (a quantile of nothing: no hot tenant).
func msOr(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return benchstat.MS(d)
}

func runOnce(c config, model string, systems []string, convs []*conversation, seq []step, k kind, round int) (result, error) {
	policy, name := k.policy, k.name()+" at "+k.setting()
	c.cacheRAM = k.cacheRAM
	res := result{kind: k, round: round, convs: len(convs), loadBefore: benchstat.LoadAvg()}
	fmt.Fprintf(os.Stderr, "run: round %d, %s (load average %s)\n", round+1, name, res.loadBefore)
	ctx, cancel := context.WithTimeout(context.Background(), c.runTimeout)
	defer cancel()
	var all []*replica
	defer func() {
		for _, r := range all {
			r.stop()
		}
	}()
	for i := range c.replicas {
		r, err := startReplica(ctx, c, model, i)
		if err != nil {
			return result{}, err
		}
		all = append(all, r)
	}
	var spare *replica
	if k.churn {
		r, err := startReplica(ctx, c, model, c.replicas)
		if err != nil {
			return result{}, err
		}
		all = append(all, r)
		spare = r
	}
	addrOf := map[string]string{}
	for _, r := range all {
		addrOf[r.name] = r.addr
	}
	s := &setup{policy: policy}
	var srvs []*gateway.FastServer
	var regs []*prometheus.Registry
	gctx, gcancel := context.WithCancel(ctx)
	var gwg sync.WaitGroup
	defer func() {
		gcancel()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		for _, srv := range srvs {
			_ = srv.ShutdownWithContext(sctx)
		}
		gwg.Wait()
	}()
	gwOpts := func(reg prometheus.Registerer) gateway.Options {
		return gateway.Options{Routing: map[string]string{"tiny": policy}, EngineMetricsInterval: c.engineEvery,
			PrefixLoadFactor: c.loadFactor, PrefixHistoryLoadFactor: c.historyFactor,
			PrefixOpeningLimit: c.openingLimit, PrefixOpeningWait: cmp.Or(c.openingWait, -1), Registerer: reg}
	}
	for range k.gateways {
		reg := prometheus.NewRegistry()
		regs = append(regs, reg)
		g := gateway.New(gwOpts(reg))
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return result{}, err
		}
		srv := gateway.NewFastServer(g.Handler(), g.BodyTimeout, nil)
		srvs = append(srvs, srv)
		gwg.Go(func() { _ = srv.Serve(ln) })
		gwg.Go(func() { _ = g.Run(gctx) })
		s.gws = append(s.gws, g)
		s.gwURLs = append(s.gwURLs, "http://"+ln.Addr().String())
	}
	if policy == gateway.RoutePrefix {
		for i := range s.shadows {
			s.shadows[i] = gateway.New(gwOpts(prometheus.NewRegistry()))
		}
	}
	s.publish(all[:c.replicas])

	fl := &flight{n: map[string]int64{}}
	var ag agreement
	const path = "/v1/chat/completions"
	// turn sends one turn of cv, with msgs, by the run's policy.
	turn := func(cv *conversation, msgs []map[string]string, rng *rand.Rand) (sample, string, error) {
		body := chatBody(msgs, c.maxTokens)
		var url, direct, other string
		hc := client
		switch policy {
		case policyRandom, policyAffinity:
			v := s.view()
			r := v[rng.IntN(len(v))]
			if policy == policyAffinity {
				r = v[cv.tenant%len(v)]
			}
			url, direct, hc = "http://"+r.addr, r.name, directClient
		default:
			gi := rng.IntN(len(s.gwURLs))
			url = s.gwURLs[gi]
			if policy == gateway.RoutePrefix {
				snap := fl.snapshot()
				a1, _ := s.shadows[0].Choose("tiny", path, body, snap)
				a2, _ := s.shadows[1].Choose("tiny", path, body, snap)
				ag.mu.Lock()
				ag.sameN++
				if a1 != "" && a1 == a2 {
					ag.same++
				}
				ag.mu.Unlock()
				if len(s.gws) > 1 {
					other, _ = s.gws[(gi+1)%len(s.gws)].Choose("tiny", path, body, nil)
				}
			}
		}
		smp, answer, err := send(ctx, hc, url, body, direct, addrOf, fl)
		if direct != "" {
			smp.route = policy
		}
		if other != "" && err == nil {
			ag.mu.Lock()
			ag.liveN++
			if addrOf[smp.replica] == other {
				ag.live++
			}
			ag.mu.Unlock()
		}
		return smp, answer, err
	}

	samples := make([][]sample, len(convs))
	var errMu sync.Mutex
	var errs []string
	start := time.Now()
	var wg sync.WaitGroup
	// join and leave are the churn's: a replica joins, then the first
	// leaves.
	join := func() { s.publish(append(slices.Clone(all[:c.replicas]), spare)) }
	leave := func() { s.publish(append(slices.Clone(all[1:c.replicas]), spare)) }
	if c.sequential {
		rng := rand.New(rand.NewPCG(c.seed+uint64(round), 0))
		msgs := make([][]map[string]string, len(convs))
		for i, st := range seq {
			if ctx.Err() != nil {
				break
			}
			if k.churn && i == len(seq)/3 {
				join()
			}
			if k.churn && i == 2*len(seq)/3 {
				leave()
			}
			cv := convs[st.conv]
			if st.turn == 0 {
				msgs[cv.id] = []map[string]string{{"role": "system", "content": systems[cv.tenant]}}
			}
			msgs[cv.id] = append(msgs[cv.id], map[string]string{"role": "user", "content": cv.users[st.turn]})
			smp, answer, err := turn(cv, msgs[cv.id], rng)
			smp.conv, smp.turn, smp.hot = cv.id, st.turn, cv.hot
			smp.messages = slices.Clone(msgs[cv.id])
			samples[cv.id] = append(samples[cv.id], smp)
			if err != nil {
				errs = append(errs, err.Error())
				break
			}
			msgs[cv.id] = append(msgs[cv.id], map[string]string{"role": "assistant", "content": answer})
		}
	} else {
		for _, cv := range convs {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(c.seed+uint64(round), uint64(cv.id)+1))
				select {
				case <-time.After(time.Until(start.Add(cv.start))):
				case <-ctx.Done():
					return
				}
				msgs := []map[string]string{{"role": "system", "content": systems[cv.tenant]}}
				for k, u := range cv.users {
					msgs = append(msgs, map[string]string{"role": "user", "content": u})
					smp, answer, err := turn(cv, msgs, rng)
					smp.conv, smp.turn, smp.hot = cv.id, k, cv.hot
					smp.messages = slices.Clone(msgs)
					samples[cv.id] = append(samples[cv.id], smp)
					if err != nil {
						errMu.Lock()
						errs = append(errs, err.Error())
						errMu.Unlock()
						return
					}
					msgs = append(msgs, map[string]string{"role": "assistant", "content": answer})
					select {
					case <-time.After(cv.thinks[k]):
					case <-ctx.Done():
						return
					}
				}
			})
		}
		if k.churn {
			// A replica joins a third of the way through the
			// conversations' starts, the first leaves at two thirds.
			var first, last time.Duration
			for _, cv := range convs {
				first, last = min(first, cv.start), max(last, cv.start)
			}
			at := func(d time.Duration) bool {
				select {
				case <-time.After(time.Until(start.Add(d))):
					return true
				case <-ctx.Done():
					return false
				}
			}
			wg.Go(func() {
				if at(first + (last-first)/3) {
					join()
					if at(first + 2*(last-first)/3) {
						leave()
					}
				}
			})
		}
		wg.Wait()
	}
	res.wall = time.Since(start)
	res.errs, res.waits = errs, openingWaits(regs)
	res.same, res.sameN, res.live, res.liveN = ag.same, ag.sameN, ag.live, ag.liveN
	var flat []sample
	for _, ss := range samples {
		flat = append(flat, ss...)
		moved := false
		for i := 1; i < len(ss); i++ {
			if ss[i].replica != ss[0].replica {
				moved = true
			}
		}
		if moved {
			res.moved++
		}
	}
	res.requests = len(convs) * c.turns
	var ttfts, hot, other []time.Duration
	var firstSent, lastEnd time.Time
	for _, smp := range flat {
		if !smp.ok {
			continue
		}
		res.ok++
		ttfts = append(ttfts, smp.ttft)
		if smp.hot {
			hot = append(hot, smp.ttft)
		} else {
			other = append(other, smp.ttft)
		}
		if firstSent.IsZero() || smp.sent.Before(firstSent) {
			firstSent = smp.sent
		}
		if smp.end.After(lastEnd) {
			lastEnd = smp.end
		}
		if smp.cacheKnown {
			res.prompt += smp.prompt
			res.cached += smp.cached
		} else {
			res.unknown++
		}
		switch smp.route {
		case gateway.RouteSpill:
			res.spills++
		case gateway.RoutePrefix:
			res.prefixRoutes++
		}
	}
	res.p50, res.p90, res.p99 = benchstat.Quantile(ttfts, 0.5), benchstat.Quantile(ttfts, 0.9), benchstat.Quantile(ttfts, 0.99)
	res.hotP99, res.otherP99 = benchstat.Quantile(hot, 0.99), benchstat.Quantile(other, 0.99)
	if d := lastEnd.Sub(firstSent); d > 0 {
		res.rps = float64(res.ok) / d.Seconds()
	}
	res.loadAfter = benchstat.LoadAvg()
	ideal, err := idealHit(ctx, "http://"+all[len(all)-1].addr, flat)
	if err != nil {
		return res, fmt.Errorf("%s: the ideal hit ratio: %w", name, err)
	}
	res.ideal = ideal
	res.losses = losses(flat)
	if c.dump != "" {
		if err := dump(c.dump, fmt.Sprintf("round %d, %s", round+1, name), flat); err != nil {
			return res, err
		}
	}
	if len(errs) > 0 {
		fmt.Fprintf(os.Stderr, "%s: %d errors, first: %s\n", name, len(errs), errs[0])
	}
	return res, nil
}

// openingWaits sums the gateways' first turns that waited for their
// replica, by outcome (llmgw_gateway_prefix_opening_waits_total).
func openingWaits(regs []*prometheus.Registry) map[string]float64 {
	sum := map[string]float64{}
	for _, reg := range regs {
		fams, err := reg.Gather()
		if err != nil {
			continue
		}
		for _, f := range fams {
			if f.GetName() != "llmgw_gateway_prefix_opening_waits_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" {
						sum[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return sum
}

func printResult(r result) {
	fmt.Fprintf(os.Stderr, "  %s at %s: %d/%d ok in %s, TTFT p50/p90/p99 %s/%s/%s, %.2f/s, hit %d/%d, ideal %.3f, moved %d/%d, spills %d, unknown %d, first turns waited %v, two gateways agree %s (snapshot), %s (live); load average %s → %s\n",
		r.kind.name(), r.kind.setting(), r.ok, r.requests, r.wall.Round(time.Millisecond), benchstat.MS(r.p50), benchstat.MS(r.p90), benchstat.MS(r.p99), r.rps, r.cached, r.prompt, r.ideal, r.moved, r.convs, r.spills, r.unknown, r.waits,
		share(r.same, r.sameN), share(r.live, r.liveN), r.loadBefore, r.loadAfter)
	fmt.Fprintf(os.Stderr, "    %s\n", r.losses)
}

// tokenized holds the tokens of the prompts idealHit has seen, by their
// messages' JSON.
var tokenized = map[string][]int{}

// idealHit is the share of the prompt tokens of the requests sent that an
// unbounded cache with perfect affinity would hold: each request's longest
// token prefix in common with a request sent before it, over all its
// tokens. The prompts are rendered and tokenized by the engine at url. It
// sets each sample's idealTokens and tokens.
//
// Every run's engine is the same build and model, so a prompt's tokens are
// kept (tokenized) for the runs after.
func idealHit(ctx context.Context, url string, samples []sample) (float64, error) {
	order := make([]int, len(samples))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return samples[a].sent.Compare(samples[b].sent) })
	var toks [][]int
	var hit, total int
	for _, i := range order {
		smp := &samples[i]
		var tk struct {
			Tokens []int `json:"tokens"`
		}
		mk, _ := json.Marshal(smp.messages)
		if t, ok := tokenized[string(mk)]; ok {
			tk.Tokens = t
		} else {
			var tp struct {
				Prompt string `json:"prompt"`
			}
			if err := postJSON(ctx, url+"/apply-template", map[string]any{"messages": smp.messages}, &tp); err != nil {
				return 0, err
			}
			if err := postJSON(ctx, url+"/tokenize", map[string]any{"content": tp.Prompt, "add_special": true}, &tk); err != nil {
				return 0, err
			}
			tokenized[string(mk)] = tk.Tokens
		}
		best := 0
		for _, prev := range toks {
			n := 0
			for n < len(prev) && n < len(tk.Tokens) && prev[n] == tk.Tokens[n] {
				n++
			}
			best = max(best, n)
		}
		smp.idealTokens, smp.tokens = best, len(tk.Tokens)
		hit += best
		total += len(tk.Tokens)
		toks = append(toks, tk.Tokens)
	}
	if total == 0 {
		return 0, nil
	}
	return float64(hit) / float64(total), nil
}

// losses splits the tokens the ideal cache would have hit and the engines
// did not (ideal minus cached, per answer with its usage known) by where
// the request went: a conversation's first turn, a later turn on the
// replica of the turn before, and a later turn on another one. flat holds
// each conversation's samples in turn order.
func losses(flat []sample) string {
	var first, same, moved, n1, ns, nm, idealSum int64
	var promptMS, predictedMS float64
	byReplica := map[string][]time.Duration{}
	for i, smp := range flat {
		promptMS += smp.promptMS
		predictedMS += smp.predictedMS
		if smp.ok {
			byReplica[smp.replica] = append(byReplica[smp.replica], smp.ttft)
		}
		if !smp.ok || !smp.cacheKnown {
			continue
		}
		idealSum += int64(smp.idealTokens)
		loss := int64(smp.idealTokens) - smp.cached
		switch {
		case smp.turn == 0:
			first += loss
			n1++
		case i > 0 && flat[i-1].conv == smp.conv && flat[i-1].replica == smp.replica:
			same += loss
			ns++
		default:
			moved += loss
			nm++
		}
	}
	var per []string
	for _, name := range slices.Sorted(maps.Keys(byReplica)) {
		ds := byReplica[name]
		per = append(per, fmt.Sprintf("%s %d answers, TTFT p50/p90 %s/%s", name, len(ds), benchstat.MS(benchstat.Quantile(ds, 0.5)), benchstat.MS(benchstat.Quantile(ds, 0.9))))
	}
	return fmt.Sprintf("ideal hit %d tokens; lost: first turns %d (%d answers), same replica %d (%d), moved %d (%d); engines' prompt %.1f s, answer %.1f s; %s",
		idealSum, first, n1, same, ns, moved, nm, promptMS/1000, predictedMS/1000, strings.Join(per, "; "))
}

// dump appends run's samples to the file at path, a tab-separated line each.
func dump(path, run string, flat []sample) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for _, smp := range flat {
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\t%d\t%d\t%d\t%d\n", run, smp.conv, smp.turn, smp.replica, smp.route, smp.tokens, smp.idealTokens, smp.cached, smp.ttft.Milliseconds())
	}
	if err := w.Flush(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func postJSON(ctx context.Context, url string, in, out any) error {
	b, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %.200s", url, resp.Status, body)
	}
	return json.Unmarshal(body, out)
}
