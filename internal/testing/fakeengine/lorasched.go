package fakeengine

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// vLLM's scheduling of LoRA requests, as fake-engine models it when it
// impersonates vLLM with --enable-lora. The rules, read at vLLM v0.28.0's
// merge-base 53e211d:
//
//   - A batch holds requests of at most --max-loras distinct adapters. The
//     scheduler first keeps every running request (their adapters are
//     scheduled_loras, asserted to be at most max_loras), then takes
//     waiting requests first come first served, skipping one whose adapter
//     would be one more than max_loras (it stays waiting, ahead of later
//     ones, and the requests behind it may go):
//     vllm/v1/core/sched/scheduler.py:737-745, 789-802, 1127-1128; the
//     skipped are tried first the next step (:1161-1162, 2152-2154). Also
//     at most --max-num-seqs running (:110, 756-758). A base-model request
//     counts no adapter (:742-743).
//   - The GPU holds max_loras adapters in slots; the CPU cache
//     max_cpu_loras (default max_loras: vllm/config/lora.py:118-123).
//     Every step the worker adds each adapter of the batch
//     (LRUCacheWorkerLoRAManager._apply_adapters, add_adapter:
//     vllm/lora/worker_manager.py:273-325): one not in the CPU cache is
//     loaded from its path, evicting the CPU cache's least recently used
//     (:306-315); then activate_adapter moves it into a GPU slot, evicting
//     the least recently used slot when all are taken
//     (vllm/lora/model_manager.py:1207-1219, 315-354), and touches it.
//   - --lora-modules are loaded at start through the same add
//     (init_static_loras, vllm/entrypoints/openai/models/serving.py:
//     124-139), so the last max_loras of them start in the GPU slots and
//     the last max_cpu_loras in the CPU cache.
//   - The prefix cache's block hashes carry the request's adapter
//     (vllm/v1/core/kv_cache_utils.py:498-510, 559-568): a prompt cached
//     under one adapter is no hit for another.
//
// What is assumed, not measured (flags): the time a slot load takes
// (--fake-lora-swap), a load from the adapter's path into the CPU cache
// (--fake-lora-load), and the prefill pace (--prefill-tokens-per-second).
// Slot loads, loads from the path and prefills take the GPU one at a time,
// in the order they were admitted; a running request's next token waits
// for the GPU work under way when it is due (as a step holds the batch's
// decode and its prefill and adapter loads), and is otherwise paced by
// --tokens-per-second. Decoding itself takes no GPU time here.
//
// Not modelled: steps as such (admission happens when a request arrives
// or one ends, not at step boundaries), the token budget of a step
// (max_num_batched_tokens) and chunked prefill, KV-cache pressure and
// preemption, the prefix cache at block granularity (it caches a prompt's
// messages before the last, whole, per adapter), and the order in which
// _apply_adapters walks the batch's adapters (a Python set, by the hash of
// the adapter's name): there, an adapter of the batch not yet touched this
// step can be the least recently used and evicted by a new one, and then
// loaded again; here an adapter with a request running is never evicted.
// A runtime load (POST /v1/load_lora_adapter) puts the adapter in the CPU
// cache without time or a slot (vLLM's add_lora also activates it).

// loraSched is one fake vLLM's scheduler and adapter caches.
type loraSched struct {
	maxLoras, maxCPU, maxRunning int
	swap, diskLoad               time.Duration
	prefillRate                  float64
	cacheTokens                  int
	load                         *load
	slotLoads, diskLoads         prometheus.Counter
	cacheQueries, cacheHits      prometheus.Counter

	mu sync.Mutex
	// waiting are the requests not yet admitted, first come first.
	waiting []*pendingReq
	// running counts the admitted requests; runningBy by adapter.
	running   int
	runningBy map[string]int
	// slots and cpu are the adapters on the GPU and in the CPU cache,
	// least recently used first.
	slots, cpu []string
	// gpu is the GPU work taken in turn (slot loads, loads, prefills),
	// each an interval, in order; work that has ended is dropped.
	gpu []interval
	// prefix is the prefix cache: cached prompts by adapter and text,
	// least recently used first, and the tokens they hold in all.
	prefix       []cachedPrefix
	prefixTokens int
}

type pendingReq struct {
	adapter string
	ready   chan struct{}
}

type interval struct{ start, end time.Time }

type cachedPrefix struct {
	key    string
	tokens int
}

// newLoraSched returns the scheduler of a vLLM with --enable-lora, its
// counters registered on reg; nil for any other engine or without
// --enable-lora.
func newLoraSched(c Config, l *load, reg *prometheus.Registry) *loraSched {
	if c.Engine != EngineVLLM || !c.EnableLoRA {
		return nil
	}
	maxCPU := c.MaxCPULoRAs
	if maxCPU == 0 {
		maxCPU = c.MaxLoRAs
	}
	labels := prometheus.Labels{"model_name": c.ModelID()}
	vl := prometheus.Labels{"model_name": c.ModelID(), "engine": "0"}
	s := &loraSched{
		maxLoras: c.MaxLoRAs, maxCPU: maxCPU, maxRunning: c.MaxRunning,
		swap: c.LoRASwap, diskLoad: c.LoRALoad, prefillRate: c.PrefillTokensPerSecond, cacheTokens: c.KVCacheTokens,
		load: l, runningBy: map[string]int{},
		slotLoads: prometheus.NewCounter(prometheus.CounterOpts{Name: "fake_engine_lora_slot_loads_total", ConstLabels: labels,
			Help: "Adapters moved into a GPU slot they were not in (each after the first max_loras evicts one)."}),
		diskLoads: prometheus.NewCounter(prometheus.CounterOpts{Name: "fake_engine_lora_path_loads_total", ConstLabels: labels,
			Help: "Adapters loaded from their path into the CPU cache while serving (not counting those at start)."}),
		cacheQueries: prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:prefix_cache_queries_total", ConstLabels: vl,
			Help: "Prefix cache queries, in terms of number of queried tokens."}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:prefix_cache_hits_total", ConstLabels: vl,
			Help: "Prefix cache hits, in terms of number of cached tokens."}),
	}
	reg.MustRegister(s.slotLoads, s.diskLoads, s.cacheQueries, s.cacheHits)
	for _, a := range c.LoRAModules {
		s.cpu = touch(s.cpu, a.Name, maxCPU)
		s.slots = touch(s.slots, a.Name, c.MaxLoRAs)
	}
	return s
}

// touch moves name to the end of lru (most recently used), adding it
// there and dropping the first (least recently used) when lru would pass
// most.
func touch(lru []string, name string, most int) []string {
	lru = slices.DeleteFunc(lru, func(n string) bool { return n == name })
	if len(lru) >= most {
		lru = lru[len(lru)-most+1:]
	}
	return append(lru, name)
}

// admit waits until the scheduler takes the request of adapter ("" for
// the base model), counted as waiting meanwhile, then counts it running
// until release. ok is false when ctx ended first.
func (s *loraSched) admit(ctx context.Context, adapter string) (release func(), ok bool) {
	p := &pendingReq{adapter: adapter, ready: make(chan struct{})}
	s.mu.Lock()
	s.waiting = append(s.waiting, p)
	s.load.waiting.Add(1)
	s.scheduleLocked()
	s.mu.Unlock()
	release = func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.running--
		s.load.running.Add(-1)
		if adapter != "" {
			if s.runningBy[adapter]--; s.runningBy[adapter] == 0 {
				delete(s.runningBy, adapter)
			}
			// Its last step used it.
			if slices.Contains(s.slots, adapter) {
				s.slots = touch(s.slots, adapter, s.maxLoras)
			}
		}
		s.scheduleLocked()
	}
	select {
	case <-p.ready:
		return release, true
	case <-ctx.Done():
	}
	s.mu.Lock()
	if i := slices.Index(s.waiting, p); i >= 0 {
		s.waiting = slices.Delete(s.waiting, i, i+1)
		s.load.waiting.Add(-1)
		s.mu.Unlock()
		return nil, false
	}
	s.mu.Unlock()
	// Admitted as ctx ended.
	release()
	return nil, false
}

// scheduleLocked admits what the rules let run: first come first served,
// at most maxRunning running, and a request whose adapter is not running
// skipped while maxLoras adapters are.
func (s *loraSched) scheduleLocked() {
	kept := s.waiting[:0]
	for i, p := range s.waiting {
		if s.maxRunning > 0 && s.running >= s.maxRunning {
			kept = append(kept, s.waiting[i:]...)
			break
		}
		if p.adapter != "" && s.runningBy[p.adapter] == 0 && len(s.runningBy) >= s.maxLoras {
			kept = append(kept, p)
			continue
		}
		s.running++
		s.load.running.Add(1)
		s.load.waiting.Add(-1)
		if p.adapter != "" {
			s.runningBy[p.adapter]++
		}
		close(p.ready)
	}
	clear(s.waiting[len(kept):])
	s.waiting = kept
}

// prefill puts an admitted request's GPU work in turn: its adapter into a
// GPU slot (and first into the CPU cache) unless it is there, and the
// prefill of its prompt's tokens the prefix cache does not hold (prefix:
// the text of the prompt before its last message, lead its tokens). It
// returns when that work ends: when the first token is due.
func (s *loraSched) prefill(now time.Time, adapter, prefix string, lead, prompt int) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var work time.Duration
	if adapter != "" {
		if !slices.Contains(s.cpu, adapter) {
			work += s.diskLoad
			s.diskLoads.Inc()
		}
		s.cpu = touch(s.cpu, adapter, s.maxCPU)
		if !slices.Contains(s.slots, adapter) {
			work += s.swap
			s.slotLoads.Inc()
			if len(s.slots) >= s.maxLoras {
				// The least recently used slot whose adapter has no
				// request running: one exists, since the running
				// adapters, this one among them, are at most maxLoras.
				if i := slices.IndexFunc(s.slots, func(n string) bool { return s.runningBy[n] == 0 }); i >= 0 {
					s.slots = slices.Delete(s.slots, i, i+1)
				}
			}
		}
		s.slots = touch(s.slots, adapter, s.maxLoras)
	}
	cached := 0
	if lead > 0 {
		key := adapter + "\x00" + prefix
		if i := slices.IndexFunc(s.prefix, func(c cachedPrefix) bool { return c.key == key }); i >= 0 {
			cached = s.prefix[i].tokens
			s.prefix = slices.Delete(s.prefix, i, i+1)
			s.prefixTokens -= cached
		}
		s.prefix = append(s.prefix, cachedPrefix{key: key, tokens: lead})
		s.prefixTokens += lead
		for s.prefixTokens > s.cacheTokens && len(s.prefix) > 0 {
			s.prefixTokens -= s.prefix[0].tokens
			s.prefix = s.prefix[1:]
		}
	}
	s.cacheQueries.Add(float64(prompt))
	s.cacheHits.Add(float64(cached))
	if s.prefillRate > 0 {
		work += time.Duration(float64(prompt-cached) / s.prefillRate * float64(time.Second))
	}
	start := now
	if n := len(s.gpu); n > 0 && s.gpu[n-1].end.After(start) {
		start = s.gpu[n-1].end
	}
	end := start.Add(work)
	s.gpu = slices.DeleteFunc(s.gpu, func(iv interval) bool { return !iv.end.After(now) })
	if work > 0 {
		s.gpu = append(s.gpu, interval{start, end})
	}
	return end
}

// busyUntil is when the GPU work under way at t ends: t itself when none
// is.
func (s *loraSched) busyUntil(t time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, iv := range s.gpu {
		if !t.Before(iv.start) && t.Before(iv.end) {
			return iv.end
		}
	}
	return t
}

// sleepUntil waits until t or ctx's end.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}
