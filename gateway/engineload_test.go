package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/llmgw/internal/testing/fakeengine"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// completions is how many completions a replica's fake-engine answered.
func (r *replica) completions(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(r.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, `fake_engine_requests_total{code="200",model_name="m",route="/v1/chat/completions"} `) {
			return strings.Fields(line)[1]
		}
	}
	return "0"
}

// TestEngineLoadSteersAwayFromBusyReplica: another client keeps one of
// two replicas busy (one request running, two waiting, none of them sent
// through this gateway). Once the gateway has read that replica's engine
// metrics, its requests go to the idle one.
func TestEngineLoadSteersAwayFromBusyReplica(t *testing.T) {
	busy := startReplica(t, "m", "busy", func(c *fakeengine.Config) { c.MaxRunning, c.TokensPerSecond = 1, 5 })
	idle := startReplica(t, "m", "idle", nil)
	tg := startGateway(t, Options{
		Source:                StaticSource{Instances: []Instance{busy.instance(), idle.instance()}},
		EngineMetricsInterval: 200 * time.Millisecond, // also the read's timeout: a failed read counts no one
	})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { _ = tg.Run(ctx) })
	for range 3 {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, busy.srv.URL+"/v1/chat/completions",
				strings.NewReader(`{"messages":[{"role":"user","content":"elsewhere"}],"max_tokens":1000}`))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_ = resp.Body.Close()
			}
		})
	}
	wait.Until(t, "the busy replica's engine read", func() bool {
		ep := tg.tbl.Load().byID["busy"]
		return ep != nil && ep.Others.Load() == 3
	})
	if got := testutil.ToFloat64(tg.m.engineLoad.WithLabelValues("m", "busy", busy.addr())); got != 3 {
		t.Errorf("llmgw_gateway_engine_requests for busy = %v, want 3", got)
	}
	// A request sent to the busy replica would wait there behind the
	// three: bound it, so that such a test fails rather than hangs.
	tg.client.Timeout = waitFor
	for range 10 {
		if a := tg.post(t, "/v1/chat/completions", chat("m")); a.status != http.StatusOK {
			t.Fatalf("status %d: %s", a.status, a.body)
		}
	}
	if got := idle.completions(t); got != "10" {
		t.Errorf("the idle replica answered %s of 10", got)
	}
}

// TestEngineLoadOff: with the reads off, a replica's others' share stays
// zero and nothing scrapes it.
func TestEngineLoadOff(t *testing.T) {
	r := startReplica(t, "m", "r", nil)
	tg := startGateway(t, Options{Source: StaticSource{Instances: []Instance{r.instance()}}, EngineMetricsInterval: -1})
	if tg.engineEvery != 0 {
		t.Fatalf("engine reads every %s, want off", tg.engineEvery)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = tg.Run(ctx) }()
	wait.Until(t, "discovery", tg.Synced)
	cancel()
	<-done
	if n := r.hits.Load(); n != 0 {
		t.Errorf("replica got %d requests with the reads off", n)
	}
}
