package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	consulapi "github.com/hashicorp/consul/api"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/testing/consulfake"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// runGateway runs g's discovery until the test ends.
func runGateway(t *testing.T, g *Gateway) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(waitFor):
			t.Error("Run did not return after its context ended")
		}
	})
}

// served is what /v1/models says: model → replicas.
func (tg *testGateway) served(t *testing.T) map[string]int {
	t.Helper()
	resp, err := tg.client.Get(tg.srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID       string
			Replicas int
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, d := range list.Data {
		out[d.ID] = d.Replicas
	}
	return out
}

func (tg *testGateway) waitServed(t *testing.T, want map[string]int) {
	t.Helper()
	wait.For(t, "/v1/models to list what is served", func() (bool, string) {
		got := tg.served(t)
		return cmp.Equal(want, got), "(-want +got):\n" + cmp.Diff(want, got)
	})
}

// consulReplica registers r in the fake as the controller's render names
// it.
func consulReplica(c *consulfake.Server, r *replica) {
	port, _ := strconv.Atoi(r.addr()[len("127.0.0.1:"):])
	c.Register(consulfake.Service{
		ID: "_nomad-task-" + r.id, Name: render.ServiceName(r.model), Address: "127.0.0.1", Port: port,
		Tags: []string{"llmgw", "model=" + r.model, "profile=p", "replica=" + r.id},
	})
}

func TestConsulDiscoveryFollowsRegistrations(t *testing.T) {
	const model = "llama-3.1-8b" // a dot: the service is llmgw-llama-3-1-8b
	c := consulfake.New()
	t.Cleanup(c.Close)
	r0 := startReplica(t, model, "r0", nil)
	r1 := startReplica(t, model, "r1", nil)
	// Unrelated services are not watched: no llmgw tag, the dist service,
	// the gateway itself.
	c.Register(consulfake.Service{ID: "web", Name: "web", Tags: []string{"model=" + model}, Address: "127.0.0.1", Port: 1})
	c.Register(consulfake.Service{ID: "dist", Name: "llmgw-r0-dist", Tags: []string{"llmgw-dist", "replica=r0"}, Address: "127.0.0.1", Port: 2})
	c.Register(consulfake.Service{ID: "gw", Name: gatewayapi.GatewayServiceName, Tags: []string{gatewayapi.GatewayServiceName}, Address: "127.0.0.1", Port: 3})
	consulReplica(c, r0)
	c.FailNext("/v1/catalog/services", 1) // the first list fails; discovery retries

	tg := startGateway(t, Options{Source: &ConsulSource{Client: c.Client(t), Wait: 10 * time.Second}})
	runGateway(t, tg.Gateway)
	tg.waitServed(t, map[string]int{model: 1})
	if got := tg.post(t, "/v1/chat/completions", chat(model)); got.status != 200 || got.header.Get(ReplicaHeader) != "r0" {
		t.Fatalf("via r0: %d %q %s", got.status, got.header.Get(ReplicaHeader), got.body)
	}

	consulReplica(c, r1)
	tg.waitServed(t, map[string]int{model: 2})

	// A failing check takes r0 out; traffic goes to r1 only.
	c.SetStatus("_nomad-task-r0", consulfake.Critical)
	tg.waitServed(t, map[string]int{model: 1})
	hits := r0.hits.Load()
	for range 4 {
		if got := tg.post(t, "/v1/chat/completions", chat(model)); got.status != 200 || got.header.Get(ReplicaHeader) != "r1" {
			t.Fatalf("r0 critical: %d from %q", got.status, got.header.Get(ReplicaHeader))
		}
	}
	if r0.hits.Load() != hits {
		t.Error("r0 got requests while its check was critical")
	}

	// Nothing passing: the model is still in the catalog, so 503.
	c.SetStatus("_nomad-task-r1", consulfake.Warning)
	tg.waitServed(t, map[string]int{})
	if got := tg.post(t, "/v1/chat/completions", chat(model)); got.status != http.StatusServiceUnavailable || got.header.Get("Retry-After") == "" {
		t.Errorf("no passing replica: %d, Retry-After %q; want 503 with one", got.status, got.header.Get("Retry-After"))
	}
	c.SetStatus("_nomad-task-r0", consulfake.Passing)
	tg.waitServed(t, map[string]int{model: 1})

	// Deregistered: the model leaves the catalog, so 404.
	c.Deregister("_nomad-task-r0")
	c.Deregister("_nomad-task-r1")
	wait.Until(t, "the model to be unknown", func() bool {
		return tg.post(t, "/v1/chat/completions", chat(model)).status == http.StatusNotFound
	})

	// Blocking queries: a handful of requests per change, no polling.
	if n := c.Requests("/v1/health/service/" + render.ServiceName(model)); n > 40 {
		t.Errorf("%d health queries for a few changes; blocking queries should need about one each", n)
	}
	if n := c.Requests("/v1/health/service/web"); n != 0 {
		t.Errorf("watched a service without the llmgw tag (%d queries)", n)
	}
}

func TestConsulRegistration(t *testing.T) {
	c := consulfake.New()
	t.Cleanup(c.Close)
	client := c.Client(t)
	c.FailNext("/v1/agent/service/register", 1) // registration retries
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	reg := ConsulRegistration{ID: "llmgw-gateway-h1-8080", Address: "10.0.0.5", Port: 8080, CheckURL: "http://10.0.0.5:8080/healthz"}
	go func() { done <- reg.Register(ctx, client, nil) }()
	var got consulfake.Service
	wait.Until(t, "the gateway registered", func() bool {
		var ok bool
		got, ok = c.Service(reg.ID)
		return ok
	})
	want := consulfake.Service{
		ID: reg.ID, Name: "llmgw-gateway", Tags: []string{"llmgw-gateway"}, Address: "10.0.0.5", Port: 8080,
		Status: consulfake.Critical, // until the agent's first check passes
		Check: &consulapi.AgentServiceCheck{
			Name: "llmgw gateway health", HTTP: "http://10.0.0.5:8080/healthz", Method: "GET",
			Interval: "10s", Timeout: "2s", DeregisterCriticalServiceAfter: "1m0s",
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("registration (-want +got):\n%s", diff)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Register: %v", err)
	}
	if _, ok := c.Service(reg.ID); ok {
		t.Error("still registered after the gateway stopped")
	}
}

// A gateway stopped while its registration is on its way (the agent has
// applied it; its answer has not arrived) still deregisters.
func TestConsulRegistrationCutOffStillDeregisters(t *testing.T) {
	c := consulfake.New()
	t.Cleanup(c.Close)
	release := c.HoldAnswers("/v1/agent/service/register")
	defer release()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	reg := ConsulRegistration{ID: "llmgw-gateway-h1-8080", Address: "10.0.0.5", Port: 8080, CheckURL: "http://10.0.0.5:8080/healthz"}
	go func() { done <- reg.Register(ctx, c.Client(t), nil) }()
	wait.Until(t, "the registration to reach the agent", func() bool {
		_, ok := c.Service(reg.ID)
		return ok
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Register: %v", err)
	}
	if _, ok := c.Service(reg.ID); ok {
		t.Error("still registered after the gateway stopped")
	}
}
