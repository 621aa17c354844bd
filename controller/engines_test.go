package controller

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/controllerapi"
	"github.com/llmgw/llmgw/internal/testing/ctlharness"
	"github.com/llmgw/llmgw/internal/testing/fakeengine"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

const engineCatalog = `
model "alpha" {
  source   = "org/alpha"
  replicas = 1
  profile "h1" {
    engine = "vllm"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 500
  }
}
model "custom" {
  source   = "org/custom"
  replicas = 1
  profile "c1" {
    engine = "command"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 500
  }
}
`

// TestEngineMetricsPerReplica: the controller reads the engine of each
// serving replica whose engine has known metrics (alpha's vLLM: a
// fake-engine, which every allocation address is dialled to) and shows the
// reading in GET /v1/replicas and in its llmgw_engine_* metrics; the
// command engine's replica has none. A failing engine's error shows, and
// the last good reading stays beside it.
func TestEngineMetricsPerReplica(t *testing.T) {
	cfg := fakeengine.Defaults()
	cfg.Model, cfg.MaxRunning, cfg.TokensPerSecond = "org/alpha", 1, 20
	srv := fakeengine.NewServer(cfg, io.Discard, io.Discard)
	srv.Load(t.Context())
	var mu sync.Mutex
	failing := false
	engineSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		f := failing
		mu.Unlock()
		if f && r.URL.Path == "/metrics" {
			http.Error(w, "engine core died", http.StatusInternalServerError)
			return
		}
		srv.Handler().ServeHTTP(w, r)
	}))
	defer engineSrv.Close()
	var dialled sync.Map
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialled.Store(addr, true)
		var d net.Dialer
		return d.DialContext(ctx, network, engineSrv.Listener.Addr().String())
	}}}

	e := newEnv(t, sixNodes, engineCatalog, `headroom = 0`)
	e.HoldLock()
	c := e.start("ctl", func(o *Options) { o.EngineMetricsInterval, o.EngineClient = 100*time.Millisecond, client })
	e.Pass(c)
	e.ServeAll()
	e.Pass(c)

	byID := func() map[string]controllerapi.ReplicaView {
		out := map[string]controllerapi.ReplicaView{}
		for _, r := range c.replicas(t) {
			out[r.ID] = r
		}
		return out
	}
	wait.For(t, "alpha-0's engine read", func() (bool, string) {
		r := byID()["alpha-0"]
		if r.Engine == nil || r.Engine.Reading == nil {
			return false, fmt.Sprintf("alpha-0: %+v", r)
		}
		return r.Engine.Reading.TokensPerSecond.Known, fmt.Sprintf("reading %+v", *r.Engine.Reading)
	})
	reps := byID()
	a := reps["alpha-0"]
	if a.Engine.Engine != "vllm" || !strings.HasSuffix(a.Engine.URL, "/metrics") || a.Engine.Error != "" {
		t.Errorf("alpha-0 engine %+v", a.Engine)
	}
	if _, ok := dialled.Load(strings.TrimSuffix(strings.TrimPrefix(a.Engine.URL, "http://"), "/metrics")); !ok {
		t.Errorf("the allocation's address %s was not what was dialled", a.Engine.URL)
	}
	if reps["custom-0"].State != "serving" || reps["custom-0"].Engine != nil {
		t.Errorf("custom-0 (command engine): %+v", reps["custom-0"])
	}

	// Load: one running, two waiting, in the API and the metrics.
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range 3 {
		wg.Go(func() {
			resp, err := http.Post(engineSrv.URL+"/v1/completions", "application/json",
				strings.NewReader(fmt.Sprintf(`{"prompt":"p %d","max_tokens":40}`, i)))
			if err == nil {
				_ = resp.Body.Close()
			}
		})
	}
	wait.For(t, "one running, two waiting", func() (bool, string) {
		r := byID()["alpha-0"].Engine.Reading
		return r.RequestsRunning.String() == "1" && r.RequestsWaiting.String() == "2", fmt.Sprintf("%+v", *r)
	})
	wait.For(t, "the gauges", func() (bool, string) {
		_, page := ctlharness.Call(t, http.MethodGet, c.URL+"/metrics", "", nil, nil)
		return strings.Contains(page, `llmgw_engine_requests_waiting{model="alpha",replica="alpha-0"} 2`), page
	})

	// The engine's endpoint fails: the error shows beside the last reading.
	mu.Lock()
	failing = true
	mu.Unlock()
	wait.For(t, "the error", func() (bool, string) {
		m := byID()["alpha-0"].Engine
		return strings.Contains(m.Error, "500") && m.Reading != nil && !m.ErrorAt.IsZero(), fmt.Sprintf("%+v", m)
	})
	wait.For(t, "the error count and no stale gauge", func() (bool, string) {
		_, page := ctlharness.Call(t, http.MethodGet, c.URL+"/metrics", "", nil, nil)
		return strings.Contains(page, `llmgw_engine_scrape_errors_total{model="alpha"}`) &&
			!strings.Contains(page, `llmgw_engine_requests_waiting{`), page
	})
	if got := c.EngineMetrics(); len(got) != 1 {
		t.Errorf("EngineMetrics() = %v, want alpha-0's job only", got)
	}
}
