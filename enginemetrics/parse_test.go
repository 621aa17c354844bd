package enginemetrics_test

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/enginemetrics"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func names(t *testing.T, e string) engine.Metrics {
	t.Helper()
	m, ok := engine.MetricsOf(e)
	if !ok || !m.Known() {
		t.Fatalf("no metrics for %s", e)
	}
	return m
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parseFile(t *testing.T, e, file string, at time.Time) enginemetrics.Sample {
	t.Helper()
	s, err := enginemetrics.Parse(bytes.NewReader(readFile(t, file)), names(t, e), at)
	if err != nil {
		t.Fatalf("parse %s: %v", file, err)
	}
	return s
}

var k = enginemetrics.Known

// TestParseEachEngine reads each engine's exposition, written with the
// names, labels and number formatting of its pinned version (each file's
// first line says which; docs/engines/ has the citations), with that
// engine's names.
func TestParseEachEngine(t *testing.T) {
	t.Parallel()
	type want struct {
		waiting, running, kv, tokens enginemetrics.Value
		ttftCount, ttftSum           float64
		ttft                         bool
		absent                       []string
	}
	cases := []struct {
		engine, file string
		want         want
	}{
		{engine.VLLM, "vllm.txt", want{waiting: k(2), running: k(3), kv: k(0.4375), tokens: k(12000), ttft: true, ttftCount: 40, ttftSum: 9.5}},
		// Two data-parallel engines: counts and tokens add up, KV use is
		// the mean, the histograms merge.
		{engine.VLLM, "vllm_dp2.txt", want{waiting: k(3), running: k(8), kv: k(0.5), tokens: k(20000), ttft: true, ttftCount: 50, ttftSum: 11.1}},
		// Two pipeline stages report the same scheduler: the first counts.
		// The tokenizer's counters split by is_streaming add up.
		{engine.SGLang, "sglang.txt", want{waiting: k(3), running: k(6), kv: k(0.62), tokens: k(32500), ttft: true, ttftCount: 70, ttftSum: 13.5}},
		// KV use is the batch's reserved tokens over the budget; tokens the
		// per-request histogram's sum; no time to first token.
		{engine.TGI, "tgi.txt", want{waiting: k(4), running: k(5), kv: k(0.25), tokens: k(14336), absent: []string{"ttft"}}},
		// Captured from the real llama-server 0.4.0 with 2 slots and 4
		// streams: no KV-cache gauge (absent, not 0), and generated tokens
		// counted only when a request finishes (none had).
		{engine.LlamaCpp, "llamacpp.txt", want{waiting: k(2), running: k(2), tokens: k(0), absent: []string{"kv_cache_usage", "ttft"}}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			s := parseFile(t, c.engine, c.file, t0)
			got := want{waiting: s.Waiting, running: s.Running, kv: s.KVCache, tokens: s.Tokens, absent: s.Absent, ttft: s.TTFT != nil}
			if s.TTFT != nil {
				got.ttftCount, got.ttftSum = s.TTFT.Count, s.TTFT.Sum
				if n := len(s.TTFT.Buckets); n == 0 || !math.IsInf(s.TTFT.Buckets[n-1].UpperBound, 1) || s.TTFT.Buckets[n-1].Count != s.TTFT.Count {
					t.Errorf("buckets %v do not end in +Inf holding the count", s.TTFT.Buckets)
				}
			}
			if diff := cmp.Diff(c.want, got, cmp.AllowUnexported(want{}), cmpopts.EquateApprox(0, 1e-9), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if len(s.Missing) != 0 {
				t.Errorf("missing %v", s.Missing)
			}
			if !s.At.Equal(t0) {
				t.Errorf("at %v", s.At)
			}
		})
	}
}

// TestParseMissing: a family the engine should export but the scrape
// lacks is missing, not zero; a quantity the engine never exports is
// absent; neither is an error.
func TestParseMissing(t *testing.T) {
	t.Parallel()
	var kept []string
	for _, line := range strings.Split(string(readFile(t, "vllm.txt")), "\n") {
		if !strings.Contains(line, "vllm:kv_cache_usage_perc") && !strings.Contains(line, "vllm:time_to_first_token_seconds") {
			kept = append(kept, line)
		}
	}
	s, err := enginemetrics.Parse(strings.NewReader(strings.Join(kept, "\n")), names(t, engine.VLLM), t0)
	if err != nil {
		t.Fatal(err)
	}
	if s.KVCache.Known || s.TTFT != nil {
		t.Errorf("kv %v ttft %v, want unknown", s.KVCache, s.TTFT)
	}
	if diff := cmp.Diff([]string{"kv_cache_usage", "ttft"}, s.Missing); diff != "" {
		t.Errorf("missing (-want +got):\n%s", diff)
	}
	if !s.Waiting.Known || s.Waiting.V != 2 {
		t.Errorf("waiting %v", s.Waiting)
	}

	// Another engine's exposition read with vLLM's names: all missing.
	s = parseFile(t, engine.VLLM, "tgi.txt", t0)
	if diff := cmp.Diff(enginemetrics.Quantities(), s.Missing); diff != "" {
		t.Errorf("tgi text with vLLM's names: missing (-want +got):\n%s", diff)
	}
	// An empty body likewise.
	s, err = enginemetrics.Parse(strings.NewReader(""), names(t, engine.LlamaCpp), t0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"kv_cache_usage", "ttft"}, s.Absent); diff != "" {
		t.Errorf("absent (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"requests_waiting", "requests_running", "tokens_per_second"}, s.Missing); diff != "" {
		t.Errorf("missing (-want +got):\n%s", diff)
	}
	// NaN is not a value: llama.cpp's throughput gauges read inf after a
	// quick request, and a ratio over an empty pool would be NaN.
	s, err = enginemetrics.Parse(strings.NewReader("# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc NaN\n"), names(t, engine.VLLM), t0)
	if err != nil || s.KVCache.Known {
		t.Errorf("NaN ratio: %v, %v", s.KVCache, err)
	}
}

func TestParseError(t *testing.T) {
	t.Parallel()
	in := "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine=\"0\"} 1\nvllm:num_requests_waiting{engine=\"1\" 2\n"
	_, err := enginemetrics.Parse(strings.NewReader(in), names(t, engine.VLLM), t0)
	if err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("got %v, want a parse error naming line 3", err)
	}
}

// TestBetween: vLLM ten seconds apart. 1500 tokens: 150/s. Ten requests got
// their first token: 4 in (0.1s, 0.25s], 5 in (0.25s, 0.5s], 1 in
// (0.5s, 0.75s], summing to 3.2s.
func TestBetween(t *testing.T) {
	t.Parallel()
	prev := parseFile(t, engine.VLLM, "vllm.txt", t0)
	cur := parseFile(t, engine.VLLM, "vllm_later.txt", t0.Add(10*time.Second))
	r := enginemetrics.Between(prev, cur)
	want := enginemetrics.Reading{
		At: cur.At, Since: prev.At,
		RequestsWaiting: k(0), RequestsRunning: k(4), KVCacheUsage: k(0.5),
		TokensPerSecond: k(150),
		TTFT: enginemetrics.TTFT{
			Count: k(10), Mean: k(0.32),
			// rank 5 of 10: 4 at most 0.25, 9 at most 0.5 → 0.25 + 0.25×1/5
			P50: k(0.3),
			// rank 9: the top of the (0.25, 0.5] bucket
			P90: k(0.5),
		},
	}
	if diff := cmp.Diff(want, r, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	// Nothing happened in the next ten seconds: no first token (count 0,
	// no time known), 0 tokens per second, both known.
	again := cur
	again.At = cur.At.Add(10 * time.Second)
	r = enginemetrics.Between(cur, again)
	if r.TTFT.Count != k(0) || r.TTFT.Mean.Known || r.TTFT.P90.Known || r.TokensPerSecond != k(0) {
		t.Errorf("quiet interval: %+v", r)
	}
}

// TestCounterReset: the engine restarted between the scrapes; its totals
// start again from zero. The rates count what the new process has done.
func TestCounterReset(t *testing.T) {
	t.Parallel()
	prev := parseFile(t, engine.VLLM, "vllm_later.txt", t0)
	cur := parseFile(t, engine.VLLM, "vllm_restarted.txt", t0.Add(20*time.Second))
	r := enginemetrics.Between(prev, cur)
	if !r.Reset {
		t.Error("no reset reported")
	}
	if r.TokensPerSecond != k(15) { // 300 tokens over 20s
		t.Errorf("tokens/s %v, want 15", r.TokensPerSecond)
	}
	if r.TTFT.Count != k(2) || math.Abs(r.TTFT.Mean.V-0.2) > 1e-9 {
		t.Errorf("ttft %+v, want 2 requests, mean 0.2s", r.TTFT)
	}
	// A histogram whose count holds but one bucket went down is a reset
	// too (a restart that happened to see as many requests).
	odd := cur
	h := *prev.TTFT
	h.Buckets = append([]enginemetrics.Bucket(nil), prev.TTFT.Buckets...)
	h.Buckets[7].Count-- // one fewer at most 0.1s, one more above
	h.Buckets[8].Count++
	odd.TTFT = &h
	odd.Tokens = prev.Tokens
	r = enginemetrics.Between(prev, odd)
	if !r.Reset {
		t.Error("a bucket that went down is not a reset")
	}
}

func TestTrackerFirstScrapeHasNoRates(t *testing.T) {
	t.Parallel()
	var tr enginemetrics.Tracker
	r := tr.Observe(parseFile(t, engine.SGLang, "sglang.txt", t0))
	if !r.Since.IsZero() || r.TokensPerSecond.Known || r.TTFT.Count.Known {
		t.Errorf("first reading has rates: %+v", r)
	}
	if r.RequestsWaiting != k(3) {
		t.Errorf("waiting %v", r.RequestsWaiting)
	}
	// A sample not after the previous one (a clock step) gives no rates.
	r = tr.Observe(parseFile(t, engine.SGLang, "sglang.txt", t0))
	if r.TokensPerSecond.Known {
		t.Errorf("zero interval has a rate: %v", r.TokensPerSecond)
	}
	r = tr.Observe(parseFile(t, engine.SGLang, "sglang.txt", t0.Add(5*time.Second)))
	if r.TokensPerSecond != k(0) || !r.Since.Equal(t0) {
		t.Errorf("second reading: %+v", r)
	}
}

// TestAbsentStaysAbsent: TGI has no time to first token, so a reading
// over any interval leaves it unknown and says why.
func TestAbsentStaysAbsent(t *testing.T) {
	t.Parallel()
	prev := parseFile(t, engine.TGI, "tgi.txt", t0)
	cur := parseFile(t, engine.TGI, "tgi.txt", t0.Add(time.Second))
	r := enginemetrics.Between(prev, cur)
	if r.TTFT.Count.Known || r.TTFT.Mean.Known {
		t.Errorf("tgi ttft %+v", r.TTFT)
	}
	if diff := cmp.Diff([]string{"ttft"}, r.Absent); diff != "" {
		t.Errorf("absent (-want +got):\n%s", diff)
	}
}

func TestQuantileInTheInfBucket(t *testing.T) {
	t.Parallel()
	prev := enginemetrics.Sample{At: t0, TTFT: &enginemetrics.Histogram{Buckets: []enginemetrics.Bucket{{UpperBound: 1}, {UpperBound: 2}, {UpperBound: math.Inf(1)}}}}
	cur := enginemetrics.Sample{At: t0.Add(time.Second), TTFT: &enginemetrics.Histogram{Count: 10, Sum: 50,
		Buckets: []enginemetrics.Bucket{{UpperBound: 1, Count: 5}, {UpperBound: 2, Count: 5}, {UpperBound: math.Inf(1), Count: 10}}}}
	r := enginemetrics.Between(prev, cur)
	// rank 9 lies above every finite bound: the histogram says "over 2s".
	if r.TTFT.P90 != k(2) || r.TTFT.P50 != k(1) || r.TTFT.Mean != k(5) {
		t.Errorf("ttft %+v", r.TTFT)
	}
}

func TestReadingJSON(t *testing.T) {
	t.Parallel()
	prev := parseFile(t, engine.TGI, "tgi.txt", t0)
	r := enginemetrics.Between(prev, parseFile(t, engine.TGI, "tgi.txt", t0.Add(2*time.Second)))
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"requests_waiting":4`, `"tokens_per_second":0`, `"ttft":{"count":null,"mean_seconds":null`, `"absent":["ttft"]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	var back enginemetrics.Reading
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

// FuzzParse: any input parses or fails with an error; never a panic, and
// a known value is a finite number.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"vllm.txt", "sglang.txt", "tgi.txt", "llamacpp.txt"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("# TYPE x histogram\nx_bucket{le=\"1\"} 2\nx_bucket{le=\"+Inf\"} 1\nx_count 1\nx_sum NaN\n"))
	all := []engine.Metrics{}
	for _, e := range engine.Engines() {
		if m, _ := engine.MetricsOf(e); m.Known() {
			all = append(all, m)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range all {
			s, err := enginemetrics.Parse(bytes.NewReader(b), m, t0)
			if err != nil {
				continue
			}
			for _, v := range []enginemetrics.Value{s.Waiting, s.Running, s.KVCache, s.Tokens} {
				if v.Known && (math.IsNaN(v.V) || math.IsInf(v.V, 0)) {
					t.Fatalf("known value %v", v.V)
				}
			}
			r := enginemetrics.Between(s, s)
			_ = enginemetrics.Between(enginemetrics.Sample{At: t0.Add(-time.Second)}, s)
			if _, err := json.Marshal(r); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestParseAny finds each engine from its exposition alone.
func TestParseAny(t *testing.T) {
	t.Parallel()
	for file, want := range map[string]string{
		"vllm.txt": engine.VLLM, "vllm_dp2.txt": engine.VLLM, "sglang.txt": engine.SGLang,
		"tgi.txt": engine.TGI, "llamacpp.txt": engine.LlamaCpp,
	} {
		e, s, err := enginemetrics.ParseAny(bytes.NewReader(readFile(t, file)), t0)
		if err != nil {
			t.Fatal(err)
		}
		if e != want || !s.Running.Known || len(s.Missing) > 0 {
			t.Errorf("%s: engine %q running %v missing %v; want %s", file, e, s.Running, s.Missing, want)
		}
	}
	e, s, err := enginemetrics.ParseAny(strings.NewReader("# TYPE up gauge\nup 1\n"), t0)
	if err != nil || e != "" || len(s.Missing) != len(enginemetrics.Quantities()) || s.Running.Known {
		t.Errorf("no engine's names: %q %+v %v", e, s, err)
	}
	if _, _, err := enginemetrics.ParseAny(strings.NewReader("{"), t0); err == nil {
		t.Error("garbage parsed")
	}
}

// vLLM's vllm:lora_requests_info as prometheus_client writes it (labels in
// the order loggers.py names them, the value set_to_current_time's float):
// the series with the greatest value is the engine's state now; the
// adapters come split at ','; no series, no Adapters.
func TestParseAdapterRequests(t *testing.T) {
	t.Parallel()
	text := `# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="4",waiting_lora_adapters="",running_lora_adapters=""} 1.7645904e+09
vllm:lora_requests_info{max_lora="4",waiting_lora_adapters="sql,chat",running_lora_adapters="sql,chat"} 1.7645904125e+09
vllm:lora_requests_info{max_lora="4",waiting_lora_adapters="sql",running_lora_adapters="sql"} 1.7645903e+09
`
	s, err := enginemetrics.Parse(strings.NewReader(text), names(t, engine.VLLM), t0)
	if err != nil {
		t.Fatal(err)
	}
	want := &enginemetrics.AdapterRequests{Running: []string{"sql", "chat"}, Waiting: []string{"sql", "chat"}, Slots: 4,
		Set: time.Unix(1764590412, 500000000)}
	if diff := cmp.Diff(want, s.Adapters); diff != "" {
		t.Errorf("adapters (-want +got):\n%s", diff)
	}
	r := enginemetrics.Between(enginemetrics.Sample{}, s)
	if b, _ := json.Marshal(r); !bytes.Contains(b, []byte(`"adapter_requests":{"running":["sql","chat"],"waiting":["sql","chat"],"slots":4,"set":"`)) {
		t.Errorf("reading's JSON %s", b)
	}
	s, err = enginemetrics.Parse(strings.NewReader("# TYPE vllm:lora_requests_info gauge\n"), names(t, engine.VLLM), t0)
	if err != nil || s.Adapters != nil {
		t.Errorf("no series: %+v (%v)", s.Adapters, err)
	}
	// Engines without the gauge.
	if s := parseFile(t, engine.LlamaCpp, "llamacpp.txt", t0); s.Adapters != nil {
		t.Errorf("llama.cpp: %+v", s.Adapters)
	}
}
