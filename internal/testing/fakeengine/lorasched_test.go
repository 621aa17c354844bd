package fakeengine

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// loraServer is a vLLM fake-engine with --enable-lora and the adapters
// named, each at a valid PEFT directory, parsed from args.
func loraServer(t *testing.T, adapters []string, args ...string) testServer {
	t.Helper()
	dir := peftDir(t)
	all := []string{"serve", "org/m", "--served-model-name", "base", "--enable-lora", "--lora-modules"}
	for _, a := range adapters {
		all = append(all, a+"="+dir)
	}
	cfg, err := Parse(append(all, args...), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := LoadAdapters(cfg); err != nil {
		t.Fatal(err)
	}
	return newTestServer(t, func(c *Config) { *c = cfg })
}

// send posts a completion for model in the background; the channel
// closes when it has been answered.
func (ts testServer) send(ctx context.Context, model string, maxTokens int) <-chan *httptest.ResponseRecorder {
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		w := httptest.NewRecorder()
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/completions",
			strings.NewReader(`{"model":"`+model+`","prompt":"hi","max_tokens":`+strconv.Itoa(maxTokens)+`}`))
		ts.Handler().ServeHTTP(w, r)
		done <- w
	}()
	return done
}

// waitingNow and runningNow are the scheduler's queue and its running
// requests by adapter.
func (ts testServer) waitingNow() []string {
	ts.sched.mu.Lock()
	defer ts.sched.mu.Unlock()
	var out []string
	for _, p := range ts.sched.waiting {
		out = append(out, p.adapter)
	}
	return out
}

func (ts testServer) runningNow() map[string]int {
	ts.sched.mu.Lock()
	defer ts.sched.mu.Unlock()
	out := map[string]int{}
	for k, v := range ts.sched.runningBy {
		out[k] = v
	}
	out["all"] = ts.sched.running
	return out
}

// A batch holds at most --max-loras adapters: with a and b running and
// --max-loras 2, a request for c waits, and the requests behind it that
// keep to the bound (one more of a, one of the base model) run
// (vllm/v1/core/sched/scheduler.py:789-802 skips, it does not block). c
// runs once an adapter's requests have all ended. vllm:lora_requests_info
// lists c while it waits, in both labels.
func TestLoRASchedMaxLoras(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := loraServer(t, []string{"a", "b", "c"}, "--max-loras", "2", "--max-cpu-loras", "3", "--tokens-per-second", "10")
		ctx := t.Context()
		a := ts.send(ctx, "a", 10) // 1 s
		synctest.Wait()
		b := ts.send(ctx, "b", 20) // 2 s
		synctest.Wait()
		c := ts.send(ctx, "c", 1)
		synctest.Wait()
		a2 := ts.send(ctx, "a", 5)
		synctest.Wait()
		base := ts.send(ctx, "base", 5)
		synctest.Wait()
		if got := ts.waitingNow(); !slices.Equal(got, []string{"c"}) {
			t.Errorf("waiting %v, want [c]", got)
		}
		if got := ts.runningNow(); got["a"] != 2 || got["b"] != 1 || got["c"] != 0 || got["all"] != 4 {
			t.Errorf("running %v, want a 2, b 1, c none, 4 in all (the base model's too)", got)
		}
		page := ts.do(http.MethodGet, "/metrics", "").Body.String()
		for _, want := range []string{`running_lora_adapters="a,b,c"`, `waiting_lora_adapters="a,b,c"`, "vllm:num_requests_waiting{engine=\"0\",model_name=\"base\"} 1"} {
			if !strings.Contains(page, want) {
				t.Errorf("metrics lack %s:\n%s", want, page)
			}
		}
		for name, ch := range map[string]<-chan *httptest.ResponseRecorder{"a (second)": a2, "base": base} {
			if w := <-ch; w.Code != http.StatusOK {
				t.Errorf("%s: %d %s", name, w.Code, w.Body)
			}
		}
		select {
		case <-c:
			t.Fatal("c answered while a and b held both slots")
		default:
		}
		// a's requests end at 1 s: c runs beside b.
		<-a
		w := <-c
		if w.Code != http.StatusOK {
			t.Errorf("c: %d %s", w.Code, w.Body)
		}
		select {
		case <-b:
			t.Error("b ended before c ran: c waited for more than a's end")
		default:
		}
		<-b
	})
}

// The GPU slots are a least-recently-used cache of max_loras adapters,
// the CPU cache one of max_cpu_loras (vllm/lora/model_manager.py:
// 1207-1219, vllm/lora/worker_manager.py:288-325), filled at start by
// --lora-modules in order; an adapter with a request running keeps its
// slot.
func TestLoRASchedSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// At start: CPU cache b, c, d; slots c, d.
		ts := loraServer(t, []string{"a", "b", "c", "d"}, "--max-loras", "2", "--max-cpu-loras", "3", "--tokens-per-second", "10")
		ctx := t.Context()
		counts := func() (slot, path float64) {
			return testutil.ToFloat64(ts.sched.slotLoads), testutil.ToFloat64(ts.sched.diskLoads)
		}
		step := func(model string, wantSlot, wantPath float64) {
			t.Helper()
			<-ts.send(ctx, model, 1)
			if s, p := counts(); s != wantSlot || p != wantPath {
				t.Errorf("after %s: %v slot loads, %v loads from the path; want %v and %v", model, s, p, wantSlot, wantPath)
			}
		}
		step("c", 0, 0) // in a slot: slots d, c
		step("a", 1, 1) // from the path, evicting b from the CPU and d from the slots: slots c, a
		step("d", 2, 1) // in the CPU cache; evicts c: slots a, d
		step("a", 2, 1) // still in a slot: the least recently used went
		step("b", 3, 2) // from the path again

		// A running adapter keeps its slot though it is the least recently
		// used. At start: slots y, z. x runs (into y's slot, the least
		// recently used: slots z, x), then y runs and ends
		// (evicting z: slots x, y), then z comes while x runs: y goes, not
		// x, and x's next request finds it in its slot.
		ts = loraServer(t, []string{"x", "y", "z"}, "--max-loras", "2", "--max-cpu-loras", "3", "--tokens-per-second", "10")
		x := ts.send(ctx, "x", 30)
		synctest.Wait()
		<-ts.send(ctx, "y", 1)
		<-ts.send(ctx, "z", 1)
		<-ts.send(ctx, "x", 1)
		if s, _ := counts(); s != 3 {
			t.Errorf("%v slot loads, want 3 (x, y, z; x never left its slot)", s)
		}
		<-x
	})
}

// The GPU work: a slot load costs --fake-lora-swap, a load from the path
// --fake-lora-load, a prefill its uncached tokens at
// --prefill-tokens-per-second, each in turn; a token due while work is
// under way waits for its end. The prefix cache is per adapter
// (vllm/v1/core/kv_cache_utils.py:498-510).
func TestLoRASchedGPUWork(t *testing.T) {
	cfg := Defaults()
	cfg.Model, cfg.EnableLoRA, cfg.MaxLoRAs, cfg.MaxCPULoRAs = "m", true, 1, 2
	cfg.LoRAModules = []Adapter{{Name: "a"}, {Name: "b"}}
	cfg.LoRASwap, cfg.LoRALoad, cfg.PrefillTokensPerSecond = 200*time.Millisecond, time.Second, 1000
	s := newLoraSched(cfg, &load{}, prometheus.NewRegistry())
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	check := func(what string, got time.Time, wantMS int) {
		t.Helper()
		if want := at(wantMS); !got.Equal(want) {
			t.Errorf("%s: %v after t0, want %v", what, got.Sub(t0), want.Sub(t0))
		}
	}
	// b is in the slot: 100 tokens, 80 of them a system prompt not cached.
	check("b's prefill", s.prefill(t0, "b", "system: hello", 80, 100), 100)
	// a: into the slot (in the CPU cache), then its prefill, after b's.
	check("a's swap and prefill", s.prefill(t0, "a", "system: hello", 80, 100), 100+200+100)
	// c: from the path, into the slot, and prefilled.
	check("c's load, swap and prefill", s.prefill(at(50), "c", "", 0, 10), 400+1000+200+10)
	check("a token due in b's prefill", s.busyUntil(at(50)), 100)
	check("a token due in a's", s.busyUntil(at(250)), 400)
	check("a token due in c's", s.busyUntil(at(400)), 1610)
	check("a token due after all", s.busyUntil(at(1700)), 1700)
	// a's system prompt again: 20 tokens to prefill (a into the slot).
	check("a, cached", s.prefill(at(2000), "a", "system: hello", 80, 100), 2000+200+20)
	// The same system prompt under b is b's own entry: cached as well.
	check("b, cached", s.prefill(at(3000), "b", "system: hello", 80, 100), 3000+200+1000+20)
	// Another prompt under b is not.
	check("b, another", s.prefill(at(5000), "b", "system: bye", 80, 100), 5000+100)
	if q, h := testutil.ToFloat64(s.cacheQueries), testutil.ToFloat64(s.cacheHits); q != 510 || h != 160 {
		t.Errorf("prefix cache: %v queried, %v hits; want 510 and 160", q, h)
	}
}

// An answer of an adapter is drawn from the adapter's name and names it
// as its model, as vLLM's does; the base model's answer differs.
func TestLoRAAnswerNamesAdapter(t *testing.T) {
	ts := loraServer(t, []string{"sql", "chat"}, "--max-loras", "2", "--tokens-per-second", "0")
	msgs := []ChatMessage{{"system", "You help."}, {"user", "Count the rows."}}
	prompt, _ := ChatPrompt(msgs)
	answers := map[string]string{}
	for _, model := range []string{"sql", "chat", "base"} {
		w := ts.do(http.MethodPost, "/v1/chat/completions",
			`{"model":"`+model+`","max_tokens":6,"messages":[{"role":"system","content":"You help."},{"role":"user","content":"Count the rows."}]}`)
		got := decodeJSON[chatResponse](t, w.Body.Bytes())
		if got.Model != model {
			t.Errorf("%s's answer names model %q", model, got.Model)
		}
		text := got.Choices[0].Message.Content
		if want := strings.Join(Tokens(model, prompt, 6), ""); text != want {
			t.Errorf("%s answered %q, want %q", model, text, want)
		}
		answers[model] = text
	}
	if answers["sql"] == answers["chat"] || answers["sql"] == answers["base"] {
		t.Errorf("answers not told apart: %v", answers)
	}
}

// --max-cpu-loras below --max-loras is refused, as vLLM's LoRAConfig does.
func TestMaxCPULoRAsBound(t *testing.T) {
	_, err := Parse([]string{"serve", "m", "--enable-lora", "--max-loras", "4", "--max-cpu-loras", "2"}, func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), "max_cpu_loras (2) must be >= max_loras (4)") {
		t.Errorf("got %v", err)
	}
}

// A running request's next token waits for the GPU work under way when it
// is due: another request's adapter load stalls it, as a step holds the
// batch's decode with the loads.
func TestLoRASwapStallsDecode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// At start: slots b, c.
		ts := loraServer(t, []string{"a", "b", "c"}, "--max-loras", "2", "--max-cpu-loras", "3", "--tokens-per-second", "10", "--fake-lora-swap", "1s")
		ctx := t.Context()
		r1 := ts.send(ctx, "b", 20)
		time.Sleep(50 * time.Millisecond)
		r2 := ts.send(ctx, "a", 1) // into c's slot: the GPU from 0.05 s to 1.05 s
		time.Sleep(450 * time.Millisecond)
		synctest.Wait()
		if gen := testutil.ToFloat64(ts.m.genTokens); gen != 1 {
			t.Errorf("at 0.5 s: %v tokens generated, want 1 (b's first; its second, due at 0.1 s, waits for a's load)", gen)
		}
		<-r2
		<-r1
	})
}
