package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmgw/llmgw/e2e/nomadtest"
)

// realScaleCatalog: a model on llama.cpp's real server with one slot per
// replica (-np 1), scaled on the engine's own queue: requests_deferred,
// one waiting request per replica.
const realScaleCatalog = `
model "chat" {
  source   = %q
  priority = 60
  autoscale {
    min         = 1
    max         = 2
    target { waiting_per_replica = 1 }
    up_window   = "5s"
    down_window = "1m"
    max_step    = 1
  }
  profile "x1" {
    engine = "llamacpp"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 250
    args   = ["-np", "1", "-c", "2048", "--context-shift"]
  }
}
`

// The autoscaler moves on the real engine's signals: requests queued in
// llama-server's only slot (llamacpp:requests_deferred, read by the
// controller from the serving replica) scale the model up, and with the
// load gone it scales back down after its down window. The load is sent
// to the first replica directly, so that the gateway plays no part.
func TestAutoscaleOnRealLlamaCppSignals(t *testing.T) {
	in := installRealEngine(t, "Hello world!")
	c, engine := sameRackClients(t, 2, in.Binary)
	cfg := controllerFilesEngines(t, c.Server.Addr(), fmt.Sprintf("{ vllm = %q, llamacpp = %q }", engine, in.Binary),
		fmt.Sprintf(realScaleCatalog, in.Model), "headroom = 0\n", "autoscale {\n  interval = \"1s\"\n  timeout  = \"2s\"\n}\n")
	_, base, _ := runController(t, cfg, "ctl")
	waitServing(t, base, 3*time.Minute, "chat-0")
	first := onlyServing(t, c, "chat-0")
	a, _, err := c.API.Allocations().Info(first.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + allocAddr(t, a)

	// Three long streams on one slot: one processing, two deferred.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	loadStart := time.Now()
	for range 3 {
		wg.Go(func() {
			for ctx.Err() == nil { // bounded by ctx: each request is one long stream
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(
					`{"stream":true,"max_tokens":200000,"ignore_eos":true,"messages":[{"role":"user","content":"Go on."}]}`))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
	}
	var upDetail string
	var waiting float64
	nomadtest.Eventually(t, 3*time.Minute, func() (bool, string) {
		m := getModel(t, base, "chat")
		if m.Signals != nil && m.Signals.Waiting.Value != nil {
			waiting = *m.Signals.Waiting.Value
		}
		// up (over the up window) or panic (over the panic window), as
		// the queue builds.
		if m.LastChange != nil && (m.LastChange.Reason == "up" || m.LastChange.Reason == "panic") && m.LastChange.To == 2 {
			upDetail = m.LastChange.Detail
			return true, ""
		}
		return false, fmt.Sprintf("chat: wanted %d, has %d, decision %+v, signals %+v", m.Wanted, m.Has, m.Decision, m.Signals)
	})
	if waiting < 1 {
		t.Errorf("the engine's waiting signal read %v at the scale up, want the deferred requests", waiting)
	}
	t.Logf("scale up 1→2 on the real engine's queue %s after the load began: %s", time.Since(loadStart).Round(time.Second), upDetail)
	waitServing(t, base, 3*time.Minute, "chat-0", "chat-1")

	cancel()
	wg.Wait()
	loadEnd := time.Now()
	nomadtest.Eventually(t, 4*time.Minute, func() (bool, string) {
		m := getModel(t, base, "chat")
		if m.LastChange != nil && m.LastChange.Reason == "down" && m.LastChange.To == 1 {
			return true, ""
		}
		return false, fmt.Sprintf("chat: wanted %d, has %d, decision %+v, signals %+v", m.Wanted, m.Has, m.Decision, m.Signals)
	})
	t.Logf("scale down 2→1 %s after the load ended (down_window 1m)", time.Since(loadEnd).Round(time.Second))
}
