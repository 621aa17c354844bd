// Command prefixload measures the gateway's routing policies on real
// llama.cpp servers (llama-server, one thread each) serving a tiny model
// large enough that prefill dominates: a seeded trace of tenants with long
// shared system prompts, users with multi-turn conversations and one hot
// tenant, conversations arriving open loop (Poisson), each turn sent when
// the previous one is answered plus a think time. Each run starts fresh
// replicas (cold caches) and sends the whole trace through one or two
// in-process gateways (least-outstanding or prefix; with two, every request
// goes to one of them at random), or straight to a random replica
// (random). -churn adds a run per gateway policy where a replica joins at
// a third of the conversations and one leaves at two thirds.
//
// Per run it prints TTFT p50/p90/p99 (to the first content token of a
// stream), completed requests per second, the hit ratio the engines
// reported (cached over prompt tokens, from each answer's usage) against
// the ideal (the share of prompt tokens an unbounded cache with perfect
// affinity would hit: each request's longest token prefix shared with an
// earlier request of the trace, tokenized by the engine), and the share of
// conversations whose turns did not all go to one replica. On standard
// error, per run: where the hits the ideal counts were lost (a
// conversation's first turn, a later turn on the replica of the turn
// before, a later turn elsewhere), the engines' own prompt and answer
// time, and each replica's answers and TTFT. -dump writes every answer,
// -server-logs each replica's log (with -server-args "-lv 4", llama.cpp's
// slot and prompt-cache decisions). Bounded: the trace's requests once per
// run, each run within -run-timeout.
//
//	go run ./bench/prefixload -replicas 3 -tenants 4 -users 4 -turns 4 -rate 0.5
//
// Results are in docs/perf.md ("Gateway: prefix routing on real engines").
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

	"github.com/llmgw/llmgw/gateway"
	"github.com/llmgw/llmgw/internal/testing/llamabuild"
	"github.com/llmgw/llmgw/internal/testing/tinymodel"
)

type config struct {
	replicas, tenants, users, turns, systemWords, maxTokens, layers, embed, slots, ctx int
	portBase                                                                           int
	hot, rate, loadFactor, historyFactor                                               float64
	think, runTimeout, engineEvery, openingWait                                        time.Duration
	openingLimit                                                                       int
	seed                                                                               uint64
	slotSimilarity, cacheRAM, dump, serverArgs, serverLogs                             string
	policies                                                                           []string
	gateways                                                                           []int
	churn                                                                              bool
}

func main() {
	var c config
	var policies, gateways string
	flag.IntVar(&c.replicas, "replicas", 3, "llama-server replicas (one thread each)")
	flag.IntVar(&c.tenants, "tenants", 4, "tenants, each with its own system prompt")
	flag.IntVar(&c.users, "users", 4, "conversations per ordinary tenant")
	flag.IntVar(&c.turns, "turns", 4, "turns per conversation")
	flag.Float64Var(&c.hot, "hot", 0.5, "the hot tenant's share of all conversations (0: none hot)")
	flag.IntVar(&c.systemWords, "system-words", 700, "words of each system prompt")
	flag.IntVar(&c.maxTokens, "max-tokens", 8, "max_tokens of each request")
	flag.Float64Var(&c.rate, "rate", 0.5, "conversations starting per second (Poisson)")
	flag.Float64Var(&c.loadFactor, "load-factor", gateway.DefaultPrefixLoadFactor, "the prefix policy's load factor (gateway.Options.PrefixLoadFactor)")
	flag.DurationVar(&c.engineEvery, "engine-metrics-interval", gateway.DefaultEngineMetricsInterval, "how often each gateway reads the replicas' engine metrics (gateway.Options.EngineMetricsInterval)")
	flag.Float64Var(&c.historyFactor, "history-load-factor", gateway.DefaultPrefixHistoryLoadFactor, "the prefix policy's load factor for a turn that continues a conversation (gateway.Options.PrefixHistoryLoadFactor)")
	flag.IntVar(&c.openingLimit, "opening-limit", 0, "requests a replica may hold before a conversation's first turn waits for it (gateway.Options.PrefixOpeningLimit; 0: one more than its slots, learned)")
	flag.DurationVar(&c.openingWait, "opening-wait", gateway.DefaultPrefixOpeningWait, "the longest a first turn waits for its replica (gateway.Options.PrefixOpeningWait; 0: none waits)")
	flag.DurationVar(&c.think, "think", time.Second, "mean pause between a turn's answer and the next turn (exponential)")
	flag.Uint64Var(&c.seed, "seed", 1, "seed of the trace and of the random choices")
	flag.StringVar(&policies, "policies", "least-outstanding,random,prefix", "policies to run, in order")
	flag.StringVar(&gateways, "gateways", "1,2", "gateway counts to run each gateway policy with")
	flag.BoolVar(&c.churn, "churn", true, "also run each gateway policy with a replica joining and one leaving")
	flag.IntVar(&c.layers, "layers", 8, "the tiny model's layers")
	flag.IntVar(&c.embed, "embed", 512, "the tiny model's width")
	flag.IntVar(&c.slots, "slots", 2, "llama-server's --parallel slots per replica")
	flag.IntVar(&c.ctx, "ctx", 8192, "llama-server's -c (shared by its slots)")
	flag.StringVar(&c.slotSimilarity, "slot-similarity", "", "llama-server's --slot-prompt-similarity (empty: its default, 0.10)")
	flag.StringVar(&c.cacheRAM, "cache-ram", "", "llama-server's --cache-ram in MiB, its host-memory prompt cache (empty: its default, 8192; 0: off)")
	flag.StringVar(&c.dump, "dump", "", "append every answer of every run to this file, a line each (tab-separated: run, conversation, turn, replica, route, prompt tokens, ideal, cached, TTFT ms)")
	flag.StringVar(&c.serverArgs, "server-args", "", "more llama-server arguments, split at spaces (after the ones above: a later one wins)")
	flag.StringVar(&c.serverLogs, "server-logs", "", "a directory to write each replica's output to, a file per run and replica (empty: discarded)")
	flag.IntVar(&c.portBase, "port-base", 0, "replica i listens on 127.0.0.1:port-base+i in every run, so the prefix policy's locality (it hashes the address) draws the same in every run (0: ports the kernel picks, a new draw each run)")
	flag.DurationVar(&c.runTimeout, "run-timeout", 4*time.Minute, "the longest one run may take")
	flag.Parse()
	c.policies = strings.Split(policies, ",")
	for _, p := range c.policies {
		if p != "random" && p != gateway.RouteLeastOutstanding && p != gateway.RoutePrefix {
			fail(fmt.Errorf("-policies: %q is not least-outstanding, random or prefix", p))
		}
	}
	for _, s := range strings.Split(gateways, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 8 {
			fail(fmt.Errorf("-gateways: %q: want counts from 1 to 8", s))
		}
		c.gateways = append(c.gateways, n)
	}
	if c.replicas < 1 || c.tenants < 1 || c.users < 1 || c.turns < 1 || c.rate <= 0 || c.hot < 0 || c.hot >= 1 {
		fail(errors.New("-replicas, -tenants, -users, -turns at least 1, -rate above 0, -hot in [0, 1)"))
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

// trace builds the conversations: tenant 0 is the hot one (a -hot share
// of all conversations), the others have -users each.
func trace(c config) (systems []string, convs []*conversation) {
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
	return systems, convs
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
	var insts []gateway.Instance
	for _, r := range rs {
		insts = append(insts, r.instance())
	}
	for _, g := range s.gws {
		g.Update(gateway.Snapshot{Instances: insts})
	}
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

// send sends one turn and reads its stream.
func send(ctx context.Context, hc *http.Client, url string, msgs []map[string]string, maxTokens int) (s sample, answer string, err error) {
	body, _ := json.Marshal(map[string]any{"model": "tiny", "messages": msgs, "max_tokens": maxTokens, "stream": true,
		"stream_options": map[string]any{"include_usage": true}})
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

// result is one run's numbers.
type result struct {
	name                 string
	requests, ok         int
	p50, p90, p99        time.Duration
	hotP99, otherP99     time.Duration
	rps                  float64
	prompt, cached       int64
	unknown              int
	ideal                float64
	moved, convs         int
	spills, prefixRoutes int
	waits                map[string]float64 // first turns that waited, by outcome
	wall                 time.Duration
	errs                 []string
	losses               string
}

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
	systems, convs := trace(c)
	nreq := len(convs) * c.turns
	fmt.Printf("trace: %d tenants (%d-word system prompts), %d conversations (hot tenant: %d), %d turns each, %d requests; %.2f conversations/s; think %s; seed %d\n",
		c.tenants, c.systemWords, len(convs), countHot(convs), c.turns, nreq, c.rate, c.think, c.seed)
	fmt.Printf("replicas: %d llama-server (%s), -t 1, -np %d, -c %d, --slot-prompt-similarity %s, --cache-ram %s; model %d layers x %d wide\n",
		c.replicas, llamabuild.Binary(), c.slots, c.ctx, cmp.Or(c.slotSimilarity, "default"), cmp.Or(c.cacheRAM, "default"), c.layers, c.embed)
	fmt.Printf("prefix load factor %g, for a conversation's later turns %g; opening limit %d (0: slots+1), opening wait %s (0: none); engine reads every %s\n",
		c.loadFactor, c.historyFactor, c.openingLimit, c.openingWait, c.engineEvery)
	fmt.Printf("uptime before: %s\n", uptime())
	var results []result
	for _, p := range c.policies {
		counts := c.gateways
		if p == "random" {
			counts = []int{0}
		}
		for _, n := range counts {
			r, err := runOnce(c, model, systems, convs, p, n, false)
			if err != nil {
				return err
			}
			results = append(results, r)
			printResult(r)
		}
		if c.churn && p != "random" {
			r, err := runOnce(c, model, systems, convs, p, 1, true)
			if err != nil {
				return err
			}
			results = append(results, r)
			printResult(r)
		}
	}
	fmt.Printf("uptime after: %s\n\n", uptime())
	fmt.Println("| run | ok/requests | TTFT p50 | p90 | p99 | hot p99 | others p99 | completed/s | hit | ideal | hit/ideal | conversations moved | spills | first turns waited (expired) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		hit := float64(r.cached) / float64(max(r.prompt, 1))
		fmt.Printf("| %s | %d/%d | %s | %s | %s | %s | %s | %.2f | %.1f %% | %.1f %% | %.0f %% | %d/%d | %d | %.0f (%.0f) |\n",
			r.name, r.ok, r.requests, ms(r.p50), ms(r.p90), ms(r.p99), ms(r.hotP99), ms(r.otherP99), r.rps, 100*hit, 100*r.ideal, 100*hit/max(r.ideal, 1e-9),
			r.moved, r.convs, r.spills, r.waits["sent"]+r.waits["expired"]+r.waits["cancelled"], r.waits["expired"])
	}
	return nil
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

func uptime() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return "load average " + strings.Join(f[:3], ", ")
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + " ms" }

func runOnce(c config, model string, systems []string, convs []*conversation, policy string, ngw int, churn bool) (result, error) {
	name := policy
	switch {
	case policy == "random":
		name = "random (direct)"
	case churn:
		name += ", 1 gateway, churn"
	default:
		name += fmt.Sprintf(", %d gateway", ngw)
		if ngw > 1 {
			name += "s"
		}
	}
	fmt.Fprintf(os.Stderr, "run: %s\n", name)
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
	if churn {
		r, err := startReplica(ctx, c, model, c.replicas)
		if err != nil {
			return result{}, err
		}
		all = append(all, r)
		spare = r
	}
	s := &setup{policy: policy}
	var srvs []*http.Server
	var regs []*prometheus.Registry
	gctx, gcancel := context.WithCancel(ctx)
	var gwg sync.WaitGroup
	defer func() {
		gcancel()
		for _, srv := range srvs {
			_ = srv.Close()
		}
		gwg.Wait()
	}()
	for range ngw {
		reg := prometheus.NewRegistry()
		regs = append(regs, reg)
		g := gateway.New(gateway.Options{Routing: map[string]string{"tiny": policy}, EngineMetricsInterval: c.engineEvery,
			PrefixLoadFactor: c.loadFactor, PrefixHistoryLoadFactor: c.historyFactor,
			PrefixOpeningLimit: c.openingLimit, PrefixOpeningWait: cmp.Or(c.openingWait, -1), Registerer: reg})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return result{}, err
		}
		srv := gateway.NewServer(g.Handler(), nil)
		srvs = append(srvs, srv)
		gwg.Go(func() { _ = srv.Serve(ln) })
		gwg.Go(func() { _ = g.Run(gctx) })
		s.gws = append(s.gws, g)
		s.gwURLs = append(s.gwURLs, "http://"+ln.Addr().String())
	}
	s.publish(all[:c.replicas])

	samples := make([][]sample, len(convs))
	var errMu sync.Mutex
	var errs []string
	start := time.Now()
	var wg sync.WaitGroup
	for _, cv := range convs {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(c.seed, uint64(cv.id)+1))
			select {
			case <-time.After(time.Until(start.Add(cv.start))):
			case <-ctx.Done():
				return
			}
			msgs := []map[string]string{{"role": "system", "content": systems[cv.tenant]}}
			for k, u := range cv.users {
				msgs = append(msgs, map[string]string{"role": "user", "content": u})
				var url, direct string
				hc := client
				if policy == "random" {
					v := s.view()
					r := v[rng.IntN(len(v))]
					url, direct, hc = "http://"+r.addr, r.name, directClient
				} else {
					url = s.gwURLs[rng.IntN(len(s.gwURLs))]
				}
				smp, answer, err := send(ctx, hc, url, msgs, c.maxTokens)
				smp.conv, smp.turn, smp.hot = cv.id, k, cv.hot
				smp.messages = slices.Clone(msgs)
				if direct != "" {
					smp.replica, smp.route = direct, "random"
				}
				if err != nil {
					errMu.Lock()
					errs = append(errs, err.Error())
					errMu.Unlock()
					samples[cv.id] = append(samples[cv.id], smp)
					return
				}
				samples[cv.id] = append(samples[cv.id], smp)
				msgs = append(msgs, map[string]string{"role": "assistant", "content": answer})
				select {
				case <-time.After(cv.thinks[k]):
				case <-ctx.Done():
					return
				}
			}
		})
	}
	if churn {
		// A replica joins when a third of the conversations have started,
		// the first leaves at two thirds.
		first, last := convs[len(convs)/3].start, convs[2*len(convs)/3].start
		for _, cv := range convs {
			first, last = min(first, cv.start), max(last, cv.start)
		}
		join := convs[0].start + (last-convs[0].start)/3
		leave := convs[0].start + 2*(last-convs[0].start)/3
		wg.Go(func() {
			select {
			case <-time.After(time.Until(start.Add(join))):
			case <-ctx.Done():
				return
			}
			s.publish(append(slices.Clone(all[:c.replicas]), spare))
			select {
			case <-time.After(time.Until(start.Add(leave))):
			case <-ctx.Done():
				return
			}
			s.publish(append(slices.Clone(all[1:c.replicas]), spare))
		})
	}
	wg.Wait()
	wall := time.Since(start)
	res := result{name: name, convs: len(convs), wall: wall, errs: errs, waits: openingWaits(regs)}
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
	res.p50, res.p90, res.p99 = quantile(ttfts, 0.5), quantile(ttfts, 0.9), quantile(ttfts, 0.99)
	res.hotP99, res.otherP99 = quantile(hot, 0.99), quantile(other, 0.99)
	if d := lastEnd.Sub(firstSent); d > 0 {
		res.rps = float64(res.ok) / d.Seconds()
	}
	ideal, err := idealHit(ctx, "http://"+all[len(all)-1].addr, flat)
	if err != nil {
		return res, fmt.Errorf("%s: the ideal hit ratio: %w", name, err)
	}
	res.ideal = ideal
	res.losses = losses(flat)
	if c.dump != "" {
		if err := dump(c.dump, name, flat); err != nil {
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
	fmt.Fprintf(os.Stderr, "  %s: %d/%d ok in %s, TTFT p50/p90/p99 %s/%s/%s, %.2f/s, hit %d/%d, ideal %.3f, moved %d/%d, spills %d, unknown %d, first turns waited %v\n",
		r.name, r.ok, r.requests, r.wall.Round(time.Millisecond), ms(r.p50), ms(r.p90), ms(r.p99), r.rps, r.cached, r.prompt, r.ideal, r.moved, r.convs, r.spills, r.unknown, r.waits)
	fmt.Fprintf(os.Stderr, "    %s\n", r.losses)
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(i, 0)]
}

// idealHit is the share of the prompt tokens of the requests sent that an
// unbounded cache with perfect affinity would hold: each request's longest
// token prefix in common with a request sent before it, over all its
// tokens. The prompts are rendered and tokenized by the engine at url. It
// sets each sample's idealTokens and tokens.
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
		var tp struct {
			Prompt string `json:"prompt"`
		}
		if err := postJSON(ctx, url+"/apply-template", map[string]any{"messages": smp.messages}, &tp); err != nil {
			return 0, err
		}
		var tk struct {
			Tokens []int `json:"tokens"`
		}
		if err := postJSON(ctx, url+"/tokenize", map[string]any{"content": tp.Prompt, "add_special": true}, &tk); err != nil {
			return 0, err
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
		per = append(per, fmt.Sprintf("%s %d answers, TTFT p50/p90 %s/%s", name, len(ds), ms(quantile(ds, 0.5)), ms(quantile(ds, 0.9))))
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
