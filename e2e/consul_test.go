package e2e

import (
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/internal/testing/localnomad"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// TestGatewayOverRealConsul is TestGatewayOverRealNomad with Consul in the
// middle: a Consul dev server from CONSUL_BIN and a client agent for each
// Nomad client, which registers its replicas' services there, the
// controller rendering with service_provider = "consul", and the `llmgw gateway --consul` binary discovering from
// Consul's catalog and health API and registering itself there. What
// Consul holds is read from Consul's own HTTP API; what the gateway does,
// from the gateway's.
func TestGatewayOverRealConsul(t *testing.T) {
	// A Consul client agent for each Nomad client and one for the gateway,
	// as on real nodes; the test reads the catalog from the server.
	cc := nomadtest.StartConsul(t, append(slices.Sorted(maps.Keys(nodeRack)), "gateway")...) // skips without CONSUL_BIN
	cons, gwAgent := cc.Server, cc.Clients["gateway"]
	c, engine := rackClientsOn(t, cc.ClientAddrs())
	bin := plugintest.Build(t, llmgwPkg)
	cfg := controllerFiles(t, c.Server.Addr(), engine, alphaBeta(2, 1, gatewayLoad), `headroom = 0`,
		fmt.Sprintf("service_provider = %q\nconsul { address = %q }\n", render.ProviderConsul, cons.HostPort()))
	if cfg.ServiceProvider != render.ProviderConsul {
		t.Fatalf("controller config: service provider %q, want %q", cfg.ServiceProvider, render.ProviderConsul)
	}
	ctl, base, _ := runController(t, cfg, "ctl-1")

	gp := startGatewayBinary(t, bin, "--consul", gwAgent.HostPort())
	gw, listen := gp.url, gp.listen

	// While the engines load, Consul holds their registrations with a
	// check that does not pass. The gateway lists no more replicas of a
	// model than Consul reports passing right after it answered, nor than
	// could have loaded by then; a request it routes goes to a replica
	// Consul reports passing right after the answer; a model Consul has
	// registered but none of whose checks pass is 503.
	want := map[string]int{"alpha": 2, "beta": 1}
	loading503 := map[string]bool{}
	sawNotPassing := map[string]bool{} // replica ids Consul held with a check not passing
	start := time.Now()
	nomadtest.Eventually(t, 4*time.Minute, func() (bool, string) {
		got := gwModels(t, gw)
		at := time.Now()
		for m, n := range got {
			if p := consulReplicas(t, cons, m, true); n > len(p) {
				t.Fatalf("at %s the gateway listed %d replicas of %s, but Consul had only %v passing afterwards", at.Format(time.StampMilli), n, m, p)
			}
		}
		could := couldHaveLoaded(t, c.API, at, gatewayLoad*time.Second)
		for m, n := range got {
			if n > could[m] {
				t.Fatalf("at %s the gateway listed %d replicas of %s, but only %d of its allocations were %ds old: it lists replicas still loading",
					at.Format(time.StampMilli), n, m, could[m], gatewayLoad)
			}
		}
		for _, m := range slices.Sorted(maps.Keys(want)) {
			r := gwPost(t, gw, chatBody(m, false))
			switch {
			case r.status == http.StatusOK:
				if id, p := r.header.Get(replicaHeader), consulReplicas(t, cons, m, true); !slices.Contains(p, id) {
					t.Fatalf("the gateway sent a request for %s to replica %q, but Consul had only %v passing afterwards", m, id, p)
				}
			case r.status == http.StatusNotFound && r.errCode() == "model_not_found" && got[m] == 0: // not registered yet
			case r.status == http.StatusServiceUnavailable && r.errCode() == "no_healthy_replica" && r.header.Get("Retry-After") != "":
				loading503[m] = true
			default:
				t.Fatalf("model %s (listed with %d replicas): %d %s (Retry-After %q), want 200, 404 model_not_found while unlisted, or 503 no_healthy_replica with Retry-After",
					m, got[m], r.status, r.body, r.header.Get("Retry-After"))
			}
			for _, e := range consulHealth(t, cons, render.ServiceName(m), false) {
				if e.checkStatus() != "passing" {
					sawNotPassing[e.tag("replica=")] = true
				}
			}
		}
		return maps.Equal(got, want), fmt.Sprintf("the gateway lists %v, want %v", got, want)
	})
	t.Logf("the gateway listed %v %s after it started; Consul held %v with a check not passing on the way", want,
		time.Since(start).Round(time.Second), slices.Sorted(maps.Keys(sawNotPassing)))
	if len(sawNotPassing) == 0 {
		t.Errorf("Consul never held a replica registration whose check was not passing while the engines loaded (%ds)", gatewayLoad)
	}
	if len(loading503) == 0 {
		t.Errorf("the gateway never answered 503 no_healthy_replica for a model Consul had registered while its replicas loaded (%ds)", gatewayLoad)
	}

	// What Consul holds: each replica once, with the tags the controller
	// rendered, on loopback, with the HTTP check named ready passing; and
	// nothing in Nomad's own service catalog.
	replicasOf := map[string][]string{}
	profileOf := map[string]string{}
	nodeOf := map[string]string{} // replica → the Nomad node it runs on
	for _, r := range getReplicas(t, base) {
		replicasOf[r.Model] = append(replicasOf[r.Model], r.ID)
		profileOf[r.Model] = r.Profile
		if len(r.Nodes) == 1 {
			nodeOf[r.ID] = r.Nodes[0]
		}
	}
	for _, ids := range replicasOf {
		sort.Strings(ids)
	}
	if want := map[string][]string{"alpha": {"alpha-0", "alpha-1"}, "beta": {"beta-0"}}; fmt.Sprint(replicasOf) != fmt.Sprint(want) {
		t.Fatalf("controller's replicas %v, want %v", replicasOf, want)
	}
	for m, ids := range replicasOf {
		var seen []string
		for _, e := range consulHealth(t, cons, render.ServiceName(m), true) {
			id := e.tag("replica=")
			seen = append(seen, id)
			wantTags := []string{"llmgw", "model=" + m, "profile=" + profileOf[m], "replica=" + id, "weight=1", "engine=vllm"} // controllerFiles runs every profile as vLLM
			sort.Strings(wantTags)
			if got := slices.Sorted(slices.Values(e.Service.Tags)); !slices.Equal(got, wantTags) {
				t.Errorf("Consul's %s instance %s: tags %q, want %q", e.Service.Service, e.Service.ID, got, wantTags)
			}
			if want := "consul-" + nodeOf[id]; e.Node.Node != want {
				t.Errorf("Consul's %s instance %s is on Consul node %q, want %q: the agent of the Nomad client running %s", e.Service.Service, e.Service.ID, e.Node.Node, want, id)
			}
			if e.Service.Address != "127.0.0.1" || e.Service.Port <= 0 {
				t.Errorf("Consul's %s instance %s is at %q port %d, want 127.0.0.1 and the allocation's port", e.Service.Service, e.Service.ID, e.Service.Address, e.Service.Port)
			}
			if ck := e.serviceChecks(); len(ck) != 1 || ck[0].Name != "ready" || ck[0].Type != "http" || ck[0].Status != "passing" {
				t.Errorf("Consul's %s instance %s has checks %+v, want one HTTP check named ready, passing", e.Service.Service, e.Service.ID, ck)
			}
		}
		sort.Strings(seen)
		if !slices.Equal(seen, ids) {
			t.Errorf("Consul's passing instances of %s are replicas %v, want %v", render.ServiceName(m), seen, ids)
		}
	}
	if svcs, _, err := c.API.Services().List(nil); err != nil {
		t.Fatal(err)
	} else {
		for _, ns := range svcs {
			for _, s := range ns.Services {
				if strings.HasPrefix(s.ServiceName, "llmgw-") {
					t.Errorf("Nomad's own service catalog holds %s (namespace %s): the replicas' provider is consul", s.ServiceName, ns.Namespace)
				}
			}
		}
	}

	// Routing: every replica of a model takes requests, only replicas of
	// that model do; a stream ends in [DONE]; an unknown model is 404.
	for m, ids := range replicasOf {
		if got := chatReplicas(t, gw, m, 2*len(ids)+2); !slices.Equal(got, ids) {
			t.Errorf("requests for %s went to %v, want every one of %v", m, got, ids)
		}
	}
	r := gwPost(t, gw, chatBody("beta", true))
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") || r.header.Get(replicaHeader) != "beta-0" {
		t.Fatalf("streamed request: %d, Content-Type %q, replica %q: %s", r.status, r.header.Get("Content-Type"), r.header.Get(replicaHeader), r.body)
	}
	if events := sseData(r.body); len(events) < 3 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("streamed events %q, want chunks ending in [DONE]", events)
	}
	if r := gwPost(t, gw, chatBody("no-such-model", false)); r.status != http.StatusNotFound || r.errCode() != "model_not_found" {
		t.Errorf("unknown model: %d %s, want 404 model_not_found", r.status, r.body)
	}

	// The gateway registered itself as llmgw-gateway, and Consul's HTTP
	// check of its /healthz passes.
	host, _ := os.Hostname()
	_, portStr, _ := net.SplitHostPort(listen)
	gwID := "llmgw-gateway-" + host + "-" + portStr
	var gwEntry consulEntry
	nomadtest.Eventually(t, 45*time.Second, func() (bool, string) {
		es := consulHealth(t, cons, "llmgw-gateway", false)
		if len(es) != 1 {
			return false, fmt.Sprintf("Consul holds %d instances of llmgw-gateway, want 1", len(es))
		}
		gwEntry = es[0]
		return es[0].checkStatus() == "passing", fmt.Sprintf("llmgw-gateway's checks: %+v", es[0].serviceChecks())
	})
	if s := gwEntry.Service; s.ID != gwID || s.Address != "127.0.0.1" || fmt.Sprint(s.Port) != portStr || !slices.Contains(s.Tags, "llmgw-gateway") || gwEntry.Node.Node != gwAgent.Name {
		t.Errorf("Consul's llmgw-gateway instance: ID %q at %s:%d on node %q, tags %q; want ID %q at %s on node %q, tagged llmgw-gateway",
			s.ID, s.Address, s.Port, gwEntry.Node.Node, s.Tags, gwID, listen, gwAgent.Name)
	}
	if ck := gwEntry.serviceChecks(); len(ck) != 1 || ck[0].Type != "http" || ck[0].Interval != "10s" || ck[0].Timeout != "2s" ||
		!strings.Contains(ck[0].Output, "HTTP GET "+gw+"/healthz: 200 OK") {
		t.Errorf("llmgw-gateway's checks %+v, want one HTTP check every 10s (timeout 2s) whose output is HTTP GET %s/healthz: 200 OK", ck, gw)
	}
	if got := gwModels(t, gw); !maps.Equal(got, want) {
		t.Errorf("with the gateway registered, it lists %v, want %v (its own service is not a model)", got, want)
	}

	// While the replicas serve, their registrations stay as they are and
	// the gateway keeps listing all of them: watched for longer than a
	// Nomad client's 30s sync with its agent (which removes services it
	// does not own), and until the controller has everything serving
	// (every replica's check passing), before the catalog changes.
	first := consulRegistrations(t, cons)
	watched, dips, polls := time.Now(), 0, 0
	nomadtest.Eventually(t, 3*time.Minute, func() (bool, string) {
		polls++
		if got := gwModels(t, gw); !maps.Equal(got, want) {
			dips++
			t.Logf("the gateway lists %v while every replica serves, want %v", got, want)
		}
		if now := consulRegistrations(t, cons); !maps.Equal(now, first) {
			t.Fatalf("Consul's registrations of the replicas changed while they served: %v, then %v", first, now)
		}
		var states []string
		serving := true
		for _, r := range getReplicas(t, base) {
			states = append(states, r.ID+"="+r.State)
			serving = serving && r.State == "serving"
		}
		return serving && time.Since(watched) > 35*time.Second, fmt.Sprintf("watched for %s; replicas %s", time.Since(watched).Round(time.Second), strings.Join(states, " "))
	})
	if dips > 0 {
		t.Errorf("the gateway listed less than %v in %d of %d looks while every replica served", want, dips, polls)
	}

	// alpha drops to one replica: its registration leaves Consul and the
	// gateway stops listing and routing to it.
	if err := os.WriteFile(cfg.Catalog, []byte(alphaBeta(1, 1, gatewayLoad)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ctl.Reload(); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		got := gwModels(t, gw)
		return maps.Equal(got, map[string]int{"alpha": 1, "beta": 1}), fmt.Sprintf("the gateway lists %v, want alpha: 1, beta: 1", got)
	})
	t.Logf("alpha-1 left the gateway's list %s after the catalog changed", time.Since(changed).Round(100*time.Millisecond))
	if got := chatReplicas(t, gw, "alpha", 4); !slices.Equal(got, []string{"alpha-0"}) {
		t.Errorf("requests for alpha after alpha-1 left went to %v, want alpha-0 only", got)
	}
	nomadtest.Eventually(t, time.Minute, func() (bool, string) {
		got := consulReplicas(t, cons, "alpha", false)
		return slices.Equal(got, []string{"alpha-0"}), fmt.Sprintf("Consul holds alpha replicas %v, want alpha-0 only", got)
	})

	// SIGTERM: the gateway exits 0, and its registration has left Consul.
	gp.stop(t)
	resp, err := http.Get(gwAgent.Addr() + "/v1/agent/service/" + url.PathEscape(gwID))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("after the gateway stopped, its Consul agent answers %s for service %s, want 404 Not Found", resp.Status, gwID)
	}
	nomadtest.Eventually(t, 10*time.Second, func() (bool, string) {
		es := consulHealth(t, cons, "llmgw-gateway", false)
		return len(es) == 0, fmt.Sprintf("Consul's catalog holds %d instances of llmgw-gateway after the gateway stopped", len(es))
	})
}

// consulEntry is one element of Consul's /v1/health/service/<name>.
type consulEntry struct {
	Node struct {
		Node, Address string
	}
	Service struct {
		ID, Service, Address string
		Port                 int
		Tags                 []string
		CreateIndex          uint64
	}
	Checks []consulCheck
}

type consulCheck struct {
	CheckID, Name, Status, ServiceID, Type, Interval, Timeout, Output string
}

// serviceChecks are the entry's checks of its service (not the node's).
func (e consulEntry) serviceChecks() []consulCheck {
	var out []consulCheck
	for _, c := range e.Checks {
		if c.ServiceID == e.Service.ID {
			out = append(out, c)
		}
	}
	return out
}

// checkStatus is "passing" when the entry has service checks and all of
// them pass, else the status of the first that does not.
func (e consulEntry) checkStatus() string {
	cks := e.serviceChecks()
	if len(cks) == 0 {
		return "no checks"
	}
	for _, c := range cks {
		if c.Status != "passing" {
			return c.Status
		}
	}
	return "passing"
}

// tag returns the value of the entry's first tag with prefix.
func (e consulEntry) tag(prefix string) string {
	for _, t := range e.Service.Tags {
		if v, ok := strings.CutPrefix(t, prefix); ok {
			return v
		}
	}
	return ""
}

// consulHealth reads Consul's /v1/health/service/<name>, only instances
// whose checks all pass when passing is set.
func consulHealth(t *testing.T, cons *localnomad.ConsulAgent, name string, passing bool) []consulEntry {
	t.Helper()
	u := cons.Addr() + "/v1/health/service/" + url.PathEscape(name)
	if passing {
		u += "?passing"
	}
	var out []consulEntry
	getJSON(t, u, &out)
	return out
}

// consulReplicas returns the replica= tags of Consul's instances of
// model's service (passing ones only when passing is set), sorted.
func consulReplicas(t *testing.T, cons *localnomad.ConsulAgent, model string, passing bool) []string {
	t.Helper()
	var out []string
	for _, e := range consulHealth(t, cons, render.ServiceName(model), passing) {
		out = append(out, e.tag("replica="))
	}
	sort.Strings(out)
	return out
}

// consulRegistrations maps each replica of alpha and beta registered in
// Consul, passing or not, to its service ID and the Raft index that
// created the registration: a service deregistered and registered again
// has a new one.
func consulRegistrations(t *testing.T, cons *localnomad.ConsulAgent) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range []string{"alpha", "beta"} {
		for _, e := range consulHealth(t, cons, render.ServiceName(m), false) {
			out[e.tag("replica=")] = fmt.Sprintf("%s@%d", e.Service.ID, e.Service.CreateIndex)
		}
	}
	return out
}
