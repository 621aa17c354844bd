package controller

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/controller/config"
	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/enginemetrics"
)

// The engines' signals: waiting summed and KV-cache use averaged over the
// serving replicas; one replica without a fresh reading makes the signal
// missing, naming it.
func TestEngineSignals(t *testing.T) {
	s := newScaleEnv(t, chatCatalog, `headroom = 0`)
	s.settleServing()
	jobs := map[string]string{} // replica -> job
	for _, r := range s.c.replicas(t) {
		jobs[r.ID] = r.JobID
	}
	read := func(waiting, kv float64) controllerapi.EngineMetrics {
		return controllerapi.EngineMetrics{Engine: "vllm", Reading: &enginemetrics.Reading{At: time.Now(),
			RequestsWaiting: enginemetrics.Known(waiting), KVCacheUsage: enginemetrics.Known(kv)}}
	}
	s.c.engines.set(map[string]controllerapi.EngineMetrics{jobs["chat-0"]: read(5, 0.5), jobs["chat-1"]: read(7, 0.7)})
	s.rounds(1)
	sig := s.c.Signals().Models["chat"]
	if sig.Serving != 2 || sig.Waiting.Value == nil || *sig.Waiting.Value != 12 || sig.KVCache.Value == nil || fmt.Sprintf("%.2f", *sig.KVCache.Value) != "0.60" ||
		sig.Waiting.Source != controllerapi.SourceEngines {
		t.Errorf("engine signals %+v %+v (serving %d)", sig.Waiting, sig.KVCache, sig.Serving)
	}

	stale := read(1, 0.1)
	stale.Reading.At = time.Now().Add(-2 * time.Minute)
	noKV := read(1, 0)
	noKV.Reading.KVCacheUsage = enginemetrics.Value{}
	noKV.Reading.Absent = []string{enginemetrics.FieldKVCacheUsage}
	for _, tc := range []struct {
		name    string
		obs     controllerapi.EngineMetrics
		waiting string // "" : a reading
		kv      string
	}{
		{"scrape failed", controllerapi.EngineMetrics{Engine: "vllm", Error: "connection refused"}, "replica chat-1: engine metrics: connection refused", "replica chat-1: engine metrics: connection refused"},
		{"stale", stale, "replica chat-1: engine reading is 2m0s old", "replica chat-1: engine reading is 2m0s old"},
		{"no kv", noKV, "", "replica chat-1: its engine (vllm) does not export KV-cache use"},
		{"never read", controllerapi.EngineMetrics{}, "replica chat-1: no engine reading yet", "replica chat-1: no engine reading yet"},
	} {
		obs := map[string]controllerapi.EngineMetrics{jobs["chat-0"]: read(5, 0.5), jobs["chat-1"]: tc.obs}
		if tc.name == "never read" {
			delete(obs, jobs["chat-1"])
		}
		s.c.engines.set(obs)
		s.rounds(1)
		sig := s.c.Signals().Models["chat"]
		for _, x := range []struct {
			what string
			v    controllerapi.SignalView
			want string
		}{{"waiting", sig.Waiting, tc.waiting}, {"kv", sig.KVCache, tc.kv}} {
			switch {
			case x.want == "" && x.v.Value == nil:
				t.Errorf("%s: %s missing (%s), want a reading", tc.name, x.what, x.v.Error)
			case x.want != "" && (x.v.Value != nil || !strings.Contains(x.v.Error, x.want)):
				t.Errorf("%s: %s = %+v, want missing with %q", tc.name, x.what, x.v, x.want)
			}
		}
	}
}

// fakePrometheus answers /api/v1/query with a vector per query, as the
// test sets them, in Prometheus's JSON.
type fakePrometheus struct {
	srv     *httptest.Server
	mu      sync.Mutex
	answers map[string]string // query -> data JSON
	queries []string
}

func newFakePrometheus(t *testing.T) *fakePrometheus {
	t.Helper()
	p := &fakePrometheus{answers: map[string]string{}}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/query" {
			http.NotFound(w, r)
			return
		}
		_ = r.ParseForm()
		q := r.Form.Get("query")
		p.mu.Lock()
		p.queries = append(p.queries, q)
		data, ok := p.answers[q]
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"status":"error","errorType":"bad_data","error":"1:1: parse error: unexpected identifier"}`)
			return
		}
		fmt.Fprintf(w, `{"status":"success","data":%s}`, data)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func vector(samples map[string]string) string {
	var parts []string
	for _, m := range sortedKeys(samples) {
		parts = append(parts, fmt.Sprintf(`{"metric":{"served":%q},"value":[%d,%q]}`, m, time.Now().Unix(), samples[m]))
	}
	return `{"resultType":"vector","result":[` + strings.Join(parts, ",") + `]}`
}

// A Prometheus query replaces the built-in source of its signal: the
// value per model by model_label; a failing query, an answer of another
// type, or a model the answer does not name is a missing signal.
func TestPrometheusSignals(t *testing.T) {
	prom := newFakePrometheus(t)
	const qOut, qWait = `sum by (served) (llmgw_gateway_outstanding_requests)`, `sum by (served) (vllm:num_requests_waiting)`
	prom.answers[qOut] = vector(map[string]string{"chat": "20", "other": "3"})
	prom.answers[qWait] = vector(map[string]string{"other": "1"})
	e := newEnv(t, sixNodes, chatCatalog, `headroom = 0`)
	e.Config.Autoscale = &config.Autoscale{Interval: time.Hour, Timeout: 5 * time.Second, Prometheus: &config.Prometheus{
		Address: prom.srv.URL, ModelLabel: "served", Queries: map[string]string{controllerapi.SignalOutstanding: qOut, controllerapi.SignalWaiting: qWait},
	}}
	gw := newFakeGateway(t)
	gw.set("chat", 1)
	e.HoldLock()
	c := e.start("ctl", func(o *Options) {
		o.Gateways = func(context.Context) ([]string, error) { return []string{gw.srv.URL}, nil }
	})
	s := &scaleEnv{env: e, gw: gw, c: c, st: c.newSignalState()}
	s.settleServing()
	s.rounds(1)
	sig := c.Signals().Models["chat"]
	if sig.Outstanding.Value == nil || *sig.Outstanding.Value != 20 || sig.Outstanding.Source != controllerapi.SourcePrometheus {
		t.Errorf("outstanding %+v, want 20 from prometheus", sig.Outstanding)
	}
	if sig.Queued.Value == nil || *sig.Queued.Value != 0 || sig.Queued.Source != controllerapi.SourceGateways {
		t.Errorf("queued %+v, want 0 from the gateways (no query for it)", sig.Queued)
	}
	if sig.Waiting.Value != nil || !strings.Contains(sig.Waiting.Error, "has no series for model chat") {
		t.Errorf("waiting %+v, want missing: the answer names no chat", sig.Waiting)
	}

	prom.mu.Lock()
	prom.answers[qOut] = `{"resultType":"scalar","result":[1700000000,"4"]}`
	delete(prom.answers, qWait)
	prom.mu.Unlock()
	s.rounds(1)
	sig = c.Signals().Models["chat"]
	if sig.Outstanding.Value != nil || !strings.Contains(sig.Outstanding.Error, "answered a scalar, want an instant vector") {
		t.Errorf("outstanding on a scalar answer: %+v", sig.Outstanding)
	}
	if sig.Waiting.Value != nil || !strings.Contains(sig.Waiting.Error, "parse error") {
		t.Errorf("waiting on a failing query: %+v", sig.Waiting)
	}
	failing := 0
	for _, src := range c.Signals().Sources {
		if src.Source == controllerapi.SourcePrometheus && !src.OK {
			failing++
		}
	}
	if failing != 2 {
		t.Errorf("GET /v1/signals reports %d failing prometheus queries, want 2: %+v", failing, c.Signals().Sources)
	}
	s.Pass(c)
	if mv := s.model("chat"); mv.Decision == nil || mv.Decision.Rule != "stale" || !strings.Contains(mv.Decision.Reason, "answered a scalar") {
		t.Errorf("decision on a missing prometheus signal: %+v", mv.Decision)
	}
}
