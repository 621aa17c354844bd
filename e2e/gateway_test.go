package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/gatewayclient"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// gatewayLoad is how long, in seconds, each engine of the gateway test
// loads. Nomad registers a replica's service when its allocation starts,
// so for this long the registration exists while its check fails: the
// gateway must see it (503, not 404) and route nothing to it.
const gatewayLoad = 12

// TestGatewayOverRealNomad runs the `llmgw gateway` binary over the
// service registrations and check results of a real Nomad, with the
// controller placing the replicas, and looks at it through its HTTP API
// only: health, the model list while replicas load and once they serve,
// routing to every replica, streaming, the unknown-model error, and
// replicas and a model leaving the catalog.
func TestGatewayOverRealNomad(t *testing.T) {
	c, engine := rackClients(t)
	bin := plugintest.Build(t, llmgwPkg)
	cfg := controllerFiles(t, c.Server.Addr(), engine, alphaBeta(2, 1, gatewayLoad), `headroom = 0`)
	ctl, base, _ := runController(t, cfg, "ctl-1")

	gp := startGatewayBinary(t, bin, "--nomad", c.Server.Addr(), "--check-interval", "1s", "--hold-timeout", wakeHold.String())
	gw := gp.url

	// While the replicas load, the gateway lists no more replicas of a model
	// than could have loaded by then: an engine cannot be ready before its
	// allocation was created plus its load time. A model whose
	// registrations it has seen but whose checks fail is 503.
	want := map[string]int{"alpha": 2, "beta": 1}
	loading503 := map[string]bool{}
	start := time.Now()
	nomadtest.Eventually(t, 4*time.Minute, func() (bool, string) {
		got := gwModels(t, gw)
		at := time.Now()
		could := couldHaveLoaded(t, c.API, at, gatewayLoad*time.Second)
		for m, n := range got {
			if n > could[m] {
				t.Fatalf("at %s the gateway listed %d replicas of %s, but only %d of its allocations were %ds old: it lists replicas still loading",
					at.Format(time.StampMilli), n, m, could[m], gatewayLoad)
			}
		}
		for _, m := range slices.Sorted(maps.Keys(want)) {
			if got[m] > 0 {
				continue
			}
			r := gwPost(t, gw, chatBody(m, false))
			switch {
			case r.status == http.StatusNotFound && r.errCode() == "model_not_found": // not registered yet
			case r.status == http.StatusServiceUnavailable && r.errCode() == "no_healthy_replica" && r.header.Get("Retry-After") != "":
				loading503[m] = true
			case r.status == http.StatusOK: // became healthy since the listing
			default:
				t.Fatalf("model %s, not listed yet: %d %s (Retry-After %q), want 404 model_not_found or 503 no_healthy_replica with Retry-After",
					m, r.status, r.body, r.header.Get("Retry-After"))
			}
		}
		return maps.Equal(got, want), fmt.Sprintf("the gateway lists %v, want %v", got, want)
	})
	t.Logf("the gateway listed %v %s after it started", want, time.Since(start).Round(time.Second))
	if len(loading503) == 0 {
		t.Errorf("the gateway never answered 503 no_healthy_replica for a model whose replicas Nomad had registered while they loaded (%ds)", gatewayLoad)
	}

	// Every replica of a model takes requests (ties rotate), and only
	// replicas of that model do.
	replicasOf := map[string][]string{}
	for _, r := range getReplicas(t, base) {
		replicasOf[r.Model] = append(replicasOf[r.Model], r.ID)
	}
	for _, ids := range replicasOf {
		sort.Strings(ids)
	}
	if want := map[string][]string{"alpha": {"alpha-0", "alpha-1"}, "beta": {"beta-0"}}; fmt.Sprint(replicasOf) != fmt.Sprint(want) {
		t.Fatalf("controller's replicas %v, want %v", replicasOf, want)
	}
	for m, ids := range replicasOf {
		if got := chatReplicas(t, gw, m, 2*len(ids)+2); !slices.Equal(got, ids) {
			t.Errorf("requests for %s went to %v, want every one of %v", m, got, ids)
		}
	}

	// A stream passes through as server-sent events ending in [DONE].
	r := gwPost(t, gw, chatBody("beta", true))
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") || r.header.Get(replicaHeader) != "beta-0" {
		t.Fatalf("streamed request: %d, Content-Type %q, replica %q: %s", r.status, r.header.Get("Content-Type"), r.header.Get(replicaHeader), r.body)
	}
	events := sseData(r.body)
	if len(events) < 3 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("streamed events %q, want chunks ending in [DONE]", events)
	}
	for _, e := range events[:len(events)-1] {
		var chunk struct {
			Object string `json:"object"`
			Model  string `json:"model"`
		}
		if err := json.Unmarshal([]byte(e), &chunk); err != nil || chunk.Object != "chat.completion.chunk" || chunk.Model != "beta" {
			t.Errorf("stream event %q: want a chat.completion.chunk of beta (%v)", e, err)
		}
	}

	// A model no replica service names: 404 in OpenAI's error shape.
	r = gwPost(t, gw, chatBody("no-such-model", false))
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &e); r.status != http.StatusNotFound || err != nil || e.Error.Code != "model_not_found" ||
		e.Error.Type != "invalid_request_error" || e.Error.Message == "" || e.Error.Param == nil || *e.Error.Param != "model" {
		t.Errorf("unknown model: %d %s, want 404 {error: {message, type invalid_request_error, param model, code model_not_found}}", r.status, r.body)
	}

	// The controller gets everything serving (every replica's check
	// passing) before the catalog changes under it.
	waitServing(t, base, 2*time.Minute)

	// alpha drops to one replica: the controller stops alpha-1's job, and
	// the gateway stops listing and routing to it.
	setCatalog := func(body string) {
		t.Helper()
		if err := os.WriteFile(cfg.Catalog, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := ctl.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	setCatalog(alphaBeta(1, 1, gatewayLoad))
	changed := time.Now()
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		got := gwModels(t, gw)
		return maps.Equal(got, map[string]int{"alpha": 1, "beta": 1}), fmt.Sprintf("the gateway lists %v, want alpha: 1, beta: 1", got)
	})
	t.Logf("alpha-1 left the gateway's list %s after the catalog changed", time.Since(changed).Round(100*time.Millisecond))
	if got := chatReplicas(t, gw, "alpha", 4); !slices.Equal(got, []string{"alpha-0"}) {
		t.Errorf("requests for alpha after alpha-1 left went to %v, want alpha-0 only", got)
	}
	if regs := serviceReplicas(t, c.API, "alpha"); !slices.Equal(regs, []string{"alpha-0"}) {
		t.Errorf("Nomad's registrations of alpha name replicas %v, want alpha-0 only", regs)
	}

	// beta leaves the catalog: its job stops, its service leaves Nomad, and
	// the gateway answers 404 for it (503 on the way, while the
	// registration is there and its engine stopping).
	setCatalog(alphaBeta(1, 0, gatewayLoad))
	changed = time.Now()
	var codes []int
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		r := gwPost(t, gw, chatBody("beta", false))
		if len(codes) == 0 || codes[len(codes)-1] != r.status {
			codes = append(codes, r.status)
		}
		switch r.status {
		case http.StatusOK, http.StatusServiceUnavailable:
			return false, fmt.Sprintf("beta: %d", r.status)
		case http.StatusNotFound:
			return r.errCode() == "model_not_found", fmt.Sprintf("beta: 404 %s", r.body)
		}
		t.Fatalf("beta, leaving the catalog: %d %s, want 200, 503, then 404", r.status, r.body)
		return false, ""
	})
	t.Logf("beta was 404 %s after it left the catalog (answers on the way: %v)", time.Since(changed).Round(100*time.Millisecond), codes)
	if got := gwModels(t, gw); !maps.Equal(got, map[string]int{"alpha": 1}) {
		t.Errorf("the gateway lists %v, want alpha: 1", got)
	}
	if got := chatReplicas(t, gw, "alpha", 2); !slices.Equal(got, []string{"alpha-0"}) {
		t.Errorf("requests for alpha after beta left went to %v, want alpha-0", got)
	}

	scaleToZero(t, gw, setCatalog)
	gatewayAsNomadJob(t, c.API, bin)

	// SIGTERM stops it cleanly.
	gp.stop(t)
}

// wakeHold is how long the gateway under test holds a request for a model
// at zero: past a placement, the engine's load and a check interval.
const wakeHold = 3 * time.Minute

// scaleToZero: beta comes back at zero replicas (min 0). The controller's
// model list says so; the gateway lists beta as scaled to zero, holds a
// request for it (seen held in its demand), and answers it once the
// catalog asks for a replica of beta (as the autoscaler will) and that
// replica registers and its check passes.
func scaleToZero(t *testing.T, gw string, setCatalog func(string)) {
	t.Helper()
	setCatalog(strings.Replace(alphaBeta(1, 9, gatewayLoad), "replicas = 9", "replicas = 0", 1))
	changed := time.Now()
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		got := gwModelStates(t, gw)
		return got["beta"] == "scaled_to_zero" && got["alpha"] == "serving", fmt.Sprintf("/v1/models states %v, want alpha serving, beta scaled_to_zero", got)
	})
	t.Logf("beta was listed scaled_to_zero %s after the catalog put it at zero", time.Since(changed).Round(100*time.Millisecond))

	type held struct {
		r   gwResponse
		err error
		at  time.Time
	}
	answer := make(chan held, 1)
	sent := time.Now()
	go func() {
		client := http.Client{Timeout: wakeHold + time.Minute}
		resp, err := client.Post(gw+"/v1/chat/completions", "application/json", strings.NewReader(chatBody("beta", false)))
		if err != nil {
			answer <- held{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		answer <- held{r: gwResponse{resp.StatusCode, resp.Header, b}, err: err, at: time.Now()}
	}()
	var md gatewayapi.ModelDemand
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		d, err := gatewayclient.DemandClient{}.Read(t.Context(), gw)
		if err != nil {
			return false, err.Error()
		}
		for _, m := range d.Models {
			if m.Model == "beta" {
				md = m
			}
		}
		return md.Queued == 1, fmt.Sprintf("beta's demand %+v, want 1 queued", md)
	})
	if md.Outstanding != 1 || md.ArrivalsTotal < 1 || md.State != "scaled_to_zero" || md.Listed == nil || md.Listed.Min != 0 {
		t.Errorf("beta's demand while held: %+v", md)
	}
	select {
	case h := <-answer:
		t.Fatalf("the request for beta at zero was answered before beta had a replica: %d %s (%v)", h.r.status, h.r.body, h.err)
	default:
	}

	setCatalog(alphaBeta(1, 1, gatewayLoad))
	woken := time.Now()
	var h held
	select {
	case h = <-answer:
	case <-time.After(wakeHold + time.Minute):
		t.Fatalf("the held request for beta got no answer in %s", wakeHold+time.Minute)
	}
	if h.err != nil || h.r.status != http.StatusOK || h.r.header.Get(replicaHeader) != "beta-0" {
		t.Fatalf("the held request for beta: %d from %q: %s (%v); want 200 from beta-0", h.r.status, h.r.header.Get(replicaHeader), h.r.body, h.err)
	}
	t.Logf("the request held for beta was answered by beta-0 %s after the catalog woke it (held %s in all; the engine loads %ds)",
		h.at.Sub(woken).Round(100*time.Millisecond), h.at.Sub(sent).Round(100*time.Millisecond), gatewayLoad)
	if h.at.Sub(woken) < gatewayLoad*time.Second {
		t.Errorf("answered %s after the wake, sooner than beta's engine can load (%ds)", h.at.Sub(woken), gatewayLoad)
	}
	if got := gwModels(t, gw); !maps.Equal(got, map[string]int{"alpha": 1, "beta": 1}) {
		t.Errorf("the gateway lists %v, want alpha: 1, beta: 1", got)
	}
	metrics := gwGet(t, gw+"/metrics")
	if !strings.Contains(metrics, `llmgw_gateway_held_total{model="beta",outcome="released"} 1`) {
		t.Errorf("/metrics does not count beta's held request as released")
	}
}

// gatewayAsNomadJob runs jobs/llmgw-gateway.nomad.hcl in the Nomad (raw_exec,
// this build's llmgw binary), then finds it as the controller will, by
// its llmgw-gateway registration (gatewayclient.NomadGateways), and reads its
// demand (gatewayclient.DemandClient): it routes the same models.
func gatewayAsNomadJob(t *testing.T, client *api.Client, bin string) {
	t.Helper()
	registered := time.Now()
	url, d := runGatewayJob(t, client, bin, func(d gatewayapi.Demand) (bool, string) {
		states := map[string]string{}
		for _, m := range d.Models {
			states[m.Model] = m.State
		}
		return maps.Equal(states, map[string]string{"alpha": "serving", "beta": "serving"}), fmt.Sprintf("demand states %v", states)
	})
	t.Logf("the gateway job registered as %s at %s and served its demand %s after it was submitted", gatewayapi.GatewayServiceName, url,
		time.Since(registered).Round(100*time.Millisecond))
	if got := chatReplicas(t, url, "beta", 2); !slices.Equal(got, []string{"beta-0"}) {
		t.Errorf("requests for beta through the gateway job went to %v, want beta-0", got)
	}
	if d.WindowSeconds <= 0 || d.SampledAt.IsZero() {
		t.Errorf("demand %+v", d)
	}
}

// gwGet returns the body of a GET that must answer 200.
func gwGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b)
}

// gwModelStates returns the llmgw state of each model /v1/models lists.
func gwModelStates(t *testing.T, gw string) map[string]string {
	t.Helper()
	var list struct {
		Data []struct {
			ID    string `json:"id"`
			Llmgw struct {
				State string `json:"state"`
			} `json:"llmgw"`
		} `json:"data"`
	}
	getJSON(t, gw+"/v1/models", &list)
	out := map[string]string{}
	for _, m := range list.Data {
		out[m.ID] = m.Llmgw.State
	}
	return out
}

// gatewayProc is the llmgw gateway binary under test.
type gatewayProc struct {
	*ctlProc
	url, listen string
	stopping    bool // the test stops it: an exit is expected
}

// startGatewayBinary runs `llmgw gateway --listen <free loopback port>
// args...`, fails the test if it exits before the test stops it, and waits
// until its /healthz answers ok.
func startGatewayBinary(t *testing.T, bin string, args ...string) *gatewayProc {
	t.Helper()
	g := &gatewayProc{listen: freeAddr(t)}
	g.url = "http://" + g.listen
	g.ctlProc = startLLMGW(t, bin, "gateway", append([]string{"gateway", "--listen", g.listen}, args...)...)
	t.Cleanup(func() { // runs before startLLMGW's SIGTERM: registered later
		select {
		case <-g.exited:
			if !g.stopping {
				t.Errorf("the gateway exited before the test ended: %v", g.err)
			}
		default:
		}
	})
	nomadtest.Eventually(t, 30*time.Second, func() (bool, string) {
		select {
		case <-g.exited:
			t.Fatalf("the gateway exited: %v", g.err)
		default:
		}
		resp, err := http.Get(g.url + "/healthz")
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && strings.TrimSpace(string(b)) == "ok", fmt.Sprintf("/healthz: %s %q", resp.Status, b)
	})
	return g
}

// stop sends SIGTERM and expects a clean exit.
func (g *gatewayProc) stop(t *testing.T) {
	t.Helper()
	g.stopping = true
	g.signal(t, syscall.SIGTERM, 20*time.Second)
	if g.err != nil {
		t.Errorf("the gateway, stopped with SIGTERM: %v", g.err)
	}
}

// replicaHeader is gateway.ReplicaHeader, spelled out: the test sees the
// gateway as a client does.
const replicaHeader = "X-Llmgw-Replica"

type gwResponse struct {
	status int
	header http.Header
	body   []byte
}

// errCode is the code of an OpenAI-shaped error body, "" for any other.
func (r gwResponse) errCode() string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(r.body, &e)
	return e.Error.Code
}

func gwPost(t *testing.T, gw, body string) gwResponse {
	t.Helper()
	client := http.Client{Timeout: 30 * time.Second}
	resp, err := client.Post(gw+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST /v1/chat/completions: reading the answer: %v", err)
	}
	return gwResponse{resp.StatusCode, resp.Header, b}
}

func chatBody(model string, stream bool) string {
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hello from the e2e test"}],"max_tokens":4,"stream":%t}`, model, stream)
}

// gwModels returns the gateway's /v1/models: replicas by model, of the
// models served (those listed at zero or waking are left out).
func gwModels(t *testing.T, gw string) map[string]int {
	t.Helper()
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID       string `json:"id"`
			Object   string `json:"object"`
			OwnedBy  string `json:"owned_by"`
			Replicas int    `json:"replicas"`
			Llmgw    struct {
				State string `json:"state"`
			} `json:"llmgw"`
		} `json:"data"`
	}
	getJSON(t, gw+"/v1/models", &list)
	if list.Object != "list" {
		t.Fatalf("/v1/models: object %q, want list", list.Object)
	}
	out := map[string]int{}
	for _, m := range list.Data {
		serving := m.Llmgw.State == "serving"
		if m.Object != "model" || m.OwnedBy != "llmgw" || serving != (m.Replicas >= 1) ||
			(!serving && m.Llmgw.State != "scaled_to_zero" && m.Llmgw.State != "waking") {
			t.Fatalf("/v1/models: entry %+v, want object model, owned_by llmgw, serving with replicas >= 1 or scaled_to_zero or waking with none", m)
		}
		if serving {
			out[m.ID] = m.Replicas
		}
	}
	return out
}

// chatReplicas sends n chat completions for model, one after the other,
// checks each is a 200 completion of that model, and returns the replicas
// that answered, sorted.
func chatReplicas(t *testing.T, gw, model string, n int) []string {
	t.Helper()
	seen := map[string]bool{}
	for range n {
		r := gwPost(t, gw, chatBody(model, false))
		r.completion(t, model)
		seen[r.header.Get(replicaHeader)] = true
	}
	return slices.Sorted(maps.Keys(seen))
}

// completion checks that r is a 200 chat.completion of model with one
// non-empty choice, and returns that choice's content.
func (r gwResponse) completion(t *testing.T, model string) string {
	t.Helper()
	var out struct {
		Object  string `json:"object"`
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(r.body, &out); r.status != http.StatusOK || err != nil || out.Object != "chat.completion" ||
		out.Model != model || len(out.Choices) != 1 || out.Choices[0].Message.Content == "" {
		t.Fatalf("chat completion for %s: %d %s, want 200 with a chat.completion of %s", model, r.status, r.body, model)
	}
	return out.Choices[0].Message.Content
}

// sseData returns the data of each server-sent event in body.
func sseData(body []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// couldHaveLoaded counts, by model, the llmgw allocations Nomad created at
// least load before at: the most replicas of each that can have been ready
// at at, since an engine starts after its allocation is created. It is read
// after at, so it holds every allocation that existed then.
func couldHaveLoaded(t *testing.T, client *api.Client, at time.Time, load time.Duration) map[string]int {
	t.Helper()
	model := map[string]string{}
	for _, j := range llmgwJobs(t, client) {
		model[j.ID] = j.Meta[render.MetaModel]
	}
	allocs, _, err := client.Allocations().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, a := range allocs {
		if m, ok := model[a.JobID]; ok && !time.Unix(0, a.CreateTime).Add(load).After(at) {
			out[m]++
		}
	}
	return out
}

// serviceReplicas returns the replica= tags of Nomad's registrations of
// model's service, sorted.
func serviceReplicas(t *testing.T, client *api.Client, model string) []string {
	t.Helper()
	regs, _, err := client.Services().Get(render.ServiceName(model), nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range regs {
		for _, tag := range r.Tags {
			if id, ok := strings.CutPrefix(tag, "replica="); ok {
				out = append(out, id)
			}
		}
	}
	sort.Strings(out)
	return out
}
