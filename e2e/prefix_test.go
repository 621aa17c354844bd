package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/controller/render"
	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// prefixCatalog: a model on llama.cpp's real server whose catalog entry
// asks the gateways for prefix routing; %d replicas.
const prefixCatalog = `
model "chat" {
  source   = %q
  replicas = %d
  routing  = "prefix"
  profile "x1" {
    engine = "llamacpp"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 250
    args   = ["-np", "2", "-c", "4096"]
  }
}
`

// prefixConv is one conversation of the prefix test: a tenant's system
// prompt, a user's first turn, and the turns so far.
type prefixConv struct {
	name     string
	messages []map[string]string
	replica  string // where its turns went
}

// prefixSystem is tenant's system prompt: long enough that the engine's
// reuse of it shows in its cached tokens.
func prefixSystem(tenant int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "You are the assistant of tenant %d.", tenant)
	for i := range 40 {
		fmt.Fprintf(&b, " Rule %d of tenant %d: answer briefly and politely.", i, tenant)
	}
	return b.String()
}

// turn sends c's next user turn through the gateway gw, appends the
// answer to its history and returns the answer's replica and route.
func (c *prefixConv) turn(t *testing.T, gw string, n int) (replica, route string) {
	t.Helper()
	c.messages = append(c.messages, map[string]string{"role": "user", "content": fmt.Sprintf("%s, turn %d: tell me more.", c.name, n)})
	body, err := json.Marshal(map[string]any{"model": "chat", "messages": c.messages, "max_tokens": 4})
	if err != nil {
		t.Fatal(err)
	}
	r := gwPost(t, gw, string(body))
	answer := r.completion(t, "chat")
	c.messages = append(c.messages, map[string]string{"role": "assistant", "content": answer})
	return r.header.Get(replicaHeader), r.header.Get("X-Llmgw-Route")
}

// gwDemand is a gateway's /llmgw/v1/demand entry for model.
func gwDemand(t *testing.T, gw, model string) gatewayapi.ModelDemand {
	t.Helper()
	var d gatewayapi.Demand
	getJSON(t, gw+"/llmgw/v1/demand", &d)
	for _, m := range d.Models {
		if m.Model == model {
			return m
		}
	}
	return gatewayapi.ModelDemand{}
}

// TestPrefixRoutingOverRealNomad runs two `llmgw gateway` binaries over a
// real Nomad, with the controller placing three real llama.cpp replicas of
// a model whose catalog entry says routing = "prefix", and checks what the
// policy promises from the outside: the model list carries the policy to
// both gateways; every turn of a conversation, sent through either
// gateway in turn, reaches the same replica with X-Llmgw-Route: prefix;
// the engines report the history they reused and the gateways count it;
// and when a replica leaves the catalog (its allocation stopped, as
// Nomad's API shows) only its conversations move, and when one joins only
// conversations moving to it move; each of the two must move at least one
// conversation, or it checked nothing.
func TestPrefixRoutingOverRealNomad(t *testing.T) {
	in := installRealEngine(t, "Hello world!")
	c, engine := sameRackClients(t, 2, in.Binary)
	cfg := controllerFilesEngines(t, c.Server.Addr(), fmt.Sprintf("{ vllm = %q, llamacpp = %q }", engine, in.Binary),
		fmt.Sprintf(prefixCatalog, in.Model, 3), "headroom = 0\n")
	ctl, base, _ := runController(t, cfg, "ctl")
	waitServing(t, base, 4*time.Minute, "chat-0", "chat-1", "chat-2")
	// The controller gave each replica llama.cpp's slot threshold for a
	// prefix-routed model (engine.Descriptor.PrefixCache), and the real
	// server started with it.
	jobs, _, err := c.API.Jobs().List(&api.QueryOptions{Prefix: render.JobIDPrefix + "chat-"})
	if err != nil || len(jobs) == 0 {
		t.Fatalf("chat's jobs: %d, %v", len(jobs), err)
	}
	for _, j := range jobs {
		job, _, err := c.API.Jobs().Info(j.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		args := fmt.Sprint(job.TaskGroups[0].Tasks[0].Config["args"])
		if !strings.Contains(args, "--slot-prompt-similarity 0.85") {
			t.Errorf("job %s: args %s: want --slot-prompt-similarity 0.85 (a prefix-routed llama.cpp model)", j.ID, args)
		}
	}

	bin := plugintest.Build(t, llmgwPkg)
	gws := []string{
		startGatewayBinary(t, bin, "--nomad", c.Server.Addr(), "--check-interval", "1s").url,
		startGatewayBinary(t, bin, "--nomad", c.Server.Addr(), "--check-interval", "1s").url,
	}
	all := []string{"chat-0", "chat-1", "chat-2"}
	waitPrefix := func(want int) {
		t.Helper()
		for _, gw := range gws {
			nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
				m := gwDemand(t, gw, "chat")
				return m.Routing == gatewayapi.RoutingPrefix && m.Replicas == want,
					fmt.Sprintf("%s: chat routed by %q over %d replicas, want prefix over %d", gw, m.Routing, m.Replicas, want)
			})
		}
	}
	waitPrefix(3)

	// 36 conversations: 18 tenants, 2 users each, 3 turns, the turns of
	// each alternating between the two gateways. 18 tenants so that the
	// leave and join checks below check something: with a tenant's
	// conversations meeting on one replica, chat-2 holds none of them, or
	// a new chat-2 draws none, with probability (2/3)^18, under 1e-3.
	const tenants, users = 18, 2
	var convs []*prefixConv
	for tenant := range tenants {
		for user := range users {
			convs = append(convs, &prefixConv{
				name:     fmt.Sprintf("tenant %d user %d", tenant, user),
				messages: []map[string]string{{"role": "system", "content": prefixSystem(tenant)}},
			})
		}
	}
	used := map[string]int{}
	for i, cv := range convs {
		for n := range 3 {
			gw := gws[(i+n)%2]
			replica, route := cv.turn(t, gw, n)
			if route != "prefix" {
				t.Errorf("%s turn %d through %s: X-Llmgw-Route %q, want prefix (requests sent one at a time are never over the bound)", cv.name, n, gw, route)
			}
			if n == 0 {
				cv.replica = replica
				used[replica]++
			} else if replica != cv.replica {
				t.Errorf("%s turn %d through %s went to %s, its earlier turns to %s: the gateways disagree or the key does not follow the conversation",
					cv.name, n, gw, replica, cv.replica)
			}
		}
	}
	t.Logf("%d conversations by replica: %v", len(convs), used)
	if len(used) < 2 {
		t.Errorf("every conversation went to %v: the key spreads nothing", used)
	}

	// The engines said what they reused, and the gateways counted it.
	var prompt, cached int64
	for _, gw := range gws {
		for _, rc := range gwDemand(t, gw, "chat").Cache {
			prompt += rc.PromptTokens
			cached += rc.CachedTokens
			if rc.UnknownAnswers != 0 {
				t.Errorf("%s: %d answers of %s without cached tokens; llama.cpp reports them", gw, rc.UnknownAnswers, rc.Replica)
			}
		}
	}
	t.Logf("the gateways counted %d prompt tokens, %d of them cached (%.0f %%)", prompt, cached, 100*float64(cached)/float64(max(prompt, 1)))
	// Of 108 answers, 72 are later turns whose history (at least their
	// system prompt) is on their replica: more than half the prompt is a
	// conservative floor for conversations that stayed.
	if prompt == 0 || 2*cached < prompt {
		t.Errorf("cached %d of %d prompt tokens: want more than half, the histories and system prompts reused", cached, prompt)
	}

	setCatalog := func(n int) {
		t.Helper()
		if err := os.WriteFile(cfg.Catalog, fmt.Appendf(nil, prefixCatalog, in.Model, n), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := ctl.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	nextTurns := func(turn int) map[string]string {
		t.Helper()
		got := map[string]string{}
		for i, cv := range convs {
			replica, _ := cv.turn(t, gws[(i+turn)%2], turn)
			got[cv.name] = replica
		}
		return got
	}

	// chat-2 leaves: its allocation stops in Nomad and the gateways drop
	// it; only the conversations it held move.
	setCatalog(2)
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		regs := serviceReplicas(t, c.API, "chat")
		return slices.Equal(regs, all[:2]), fmt.Sprintf("Nomad's registrations of chat name %v, want %v", regs, all[:2])
	})
	waitPrefix(2)
	after := nextTurns(3)
	moved := 0
	for _, cv := range convs {
		switch {
		case cv.replica == "chat-2":
			moved++
			if !slices.Contains(all[:2], after[cv.name]) {
				t.Errorf("%s, on chat-2 when it left, went to %s", cv.name, after[cv.name])
			}
		case after[cv.name] != cv.replica:
			t.Errorf("%s moved from %s to %s when chat-2 left: only chat-2's conversations may move", cv.name, cv.replica, after[cv.name])
		}
		cv.replica = after[cv.name]
	}
	t.Logf("chat-2 left: %d of %d conversations moved, all of them chat-2's", moved, len(convs))
	if moved == 0 {
		t.Errorf("no conversation was on chat-2 when it left (%v): the leave checked nothing", used)
	}

	// chat-2 joins again (a new allocation, a new address): a conversation
	// moves to it or stays where it was, never between the others.
	setCatalog(3)
	waitServing(t, base, 4*time.Minute, all...)
	waitPrefix(3)
	after = nextTurns(4)
	moved = 0
	for _, cv := range convs {
		if after[cv.name] != cv.replica {
			moved++
			if after[cv.name] != "chat-2" {
				t.Errorf("%s moved from %s to %s when chat-2 joined: a join moves conversations to the newcomer only", cv.name, cv.replica, after[cv.name])
			}
		}
	}
	got := map[string]int{}
	for _, r := range after {
		got[r]++
	}
	t.Logf("chat-2 joined: %d of %d conversations moved to it; conversations by replica: %v", moved, len(convs), got)
	if moved == 0 {
		t.Errorf("no conversation moved to chat-2 when it joined (%v): the join checked nothing", got)
	}
}
