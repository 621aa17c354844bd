package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/internal/testing/realengine"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// sleepCatalog: a model that sleeps when idle, on llama.cpp's real server;
// its profile sets the engine's own idle seconds short (2 s) so that the
// test need not wait idle_after's minute for each round.
const sleepCatalog = `
model "nap" {
  source   = %q
  priority = 60
  autoscale {
    min         = 0
    max         = 1
    target { outstanding_per_replica = 4 }
    up_window   = "5s"
    down_window = "1m"
    idle_after  = "1m"
    when_idle   = "sleep"
  }
  profile "x1" {
    engine = "llamacpp"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 250
    args   = ["-np", "1", "-c", "1024", "--sleep-idle-seconds", "2"]
  }
}
`

// firstToken sends a streamed chat to url and returns how long until its
// first content chunk, and the whole text.
func firstToken(t *testing.T, url, model string) (time.Duration, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(chatBody(model, true)))
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := realengine.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s", url, resp.Status)
	}
	var ttft time.Duration
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		if ttft == 0 && strings.Contains(data, `"content":"`) && !strings.Contains(data, `"content":""`) {
			ttft = time.Since(start)
		}
		if i := strings.Index(data, `"content":"`); i >= 0 {
			rest := data[i+len(`"content":"`):]
			if j := strings.Index(rest, `"`); j >= 0 {
				text.WriteString(rest[:j])
			}
		}
	}
	return ttft, text.String()
}

// Issue 35 (d) on a real Nomad with llama.cpp's real server and the 8×512
// model: a model with when_idle = "sleep" is woken from zero by a request
// the gateway (its Nomad job) holds; its engine then sleeps by itself,
// which the controller reads from the engine (the replica's engine.asleep)
// without waking it; a request through the gateway wakes it, and the time
// to its first token is logged beside the engine's own wake, measured in
// the same rounds on a plain llama-server with the same file.
func TestAsleepModelWakesOnFirstRequest(t *testing.T) {
	in := bigTinyModel(t)
	c, engine := sameRackClients(t, 1, in.Binary)
	bin := plugintest.Build(t, llmgwPkg)
	cfg := controllerFilesEngines(t, c.Server.Addr(), fmt.Sprintf("{ vllm = %q, llamacpp = %q }", engine, in.Binary),
		fmt.Sprintf(sleepCatalog, in.Model), "headroom = 0\n", "autoscale {\n  interval = \"1s\"\n  timeout  = \"2s\"\n}\n")
	_, base, _ := runController(t, cfg, "ctl")
	gw, _ := runGatewayJob(t, c.API, bin, nil)

	// Woken from zero by a held request.
	if d, text := firstToken(t, gw, "nap"); !strings.Contains(text, "Hello") {
		t.Fatalf("the first request for nap at zero said %q after %s", text, d)
	}
	waitServing(t, base, time.Minute, "nap-0")
	plain := realengine.Start(t, in.Model, "-np", "1", "-c", "1024", "--sleep-idle-seconds", "2")

	asleep := func(what string) {
		t.Helper()
		nomadtest.Eventually(t, time.Minute, func() (bool, string) {
			for _, r := range getReplicas(t, base) {
				if r.ID == "nap-0" {
					var view struct {
						Engine *struct {
							Asleep *bool `json:"asleep"`
						} `json:"engine"`
					}
					getJSON(t, base+"/v1/replicas/nap-0", &view)
					if view.Engine != nil && view.Engine.Asleep != nil && *view.Engine.Asleep {
						return true, ""
					}
					return false, fmt.Sprintf("%s: nap-0 %s, engine %+v", what, r.State, view.Engine)
				}
			}
			return false, "no nap-0"
		})
	}
	a, _, err := c.API.Allocations().Info(onlyServing(t, c, "nap-0").ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	napURL := "http://" + allocAddr(t, a)
	engineAsleep := func(url string) {
		t.Helper()
		nomadtest.Eventually(t, time.Minute, func() (bool, string) {
			code, props := realengine.Get(t, url+"/props")
			return code == 200 && strings.Contains(props, `"is_sleeping":true`), url + " awake"
		})
	}
	var viaGateway, engineOwn []time.Duration
	for round := range 5 {
		asleep(fmt.Sprintf("round %d", round+1))
		engineAsleep(napURL) // and asleep now, by its own word
		d, text := firstToken(t, gw, "nap")
		if !strings.Contains(text, "Hello") {
			t.Errorf("round %d: nap asleep said %q", round+1, text)
		}
		viaGateway = append(viaGateway, d)
		// The engine's own: the plain server, asleep after its 2 s.
		engineAsleep(plain.URL)
		d, _ = firstToken(t, plain.URL, "nap")
		engineOwn = append(engineOwn, d)
	}
	slices.Sort(viaGateway)
	slices.Sort(engineOwn)
	t.Logf("asleep to first token, 5 interleaved rounds: through the gateway to nap-0 %v (median %s); the engine's own wake on a plain llama-server, same file %v (median %s); goal: the gateway's within the engine's + 0.5 s",
		viaGateway, viaGateway[2].Round(time.Millisecond), engineOwn, engineOwn[2].Round(time.Millisecond))
	if m := getModel(t, base, "nap"); m.Has != 1 {
		t.Errorf("nap has %d replicas, want its one", m.Has)
	}
}
