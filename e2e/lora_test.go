package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/e2e/nomadtest"
	"github.com/llmgw/llmgw/internal/testing/llamabuild"
	"github.com/llmgw/llmgw/internal/testing/tinymodel"
	"github.com/llmgw/llmgw/nomadplugin/plugintest"
)

// loraCatalog: a model on llama.cpp's real server with LoRA adapters;
// %d replicas, then the adapter blocks.
const loraCatalog = `
model "chat" {
  source   = %q
  replicas = %d
  profile "x1" {
    engine = "llamacpp"
    gpu    = "NVIDIA H200"
    gpus   = 1
    watts  = 250
    args   = ["-np", "2", "-c", "4096"]
  }
%s}
`

// loraNouns name the e2e's adapters: adapter i answers "The <noun>.".
var loraNouns = strings.Fields("apple anchor arrow badge basket bell bridge candle castle cloud comet compass crown desert dragon eagle falcon feather")

// TestLoraAdaptersOverRealNomad runs two `llmgw gateway` binaries over a
// real Nomad, with the controller placing three real llama.cpp replicas of
// a model with 18 tiny LoRA adapters (each changes the tiny model's
// answer, so an answer shows which adapter gave it), and checks from the
// outside: every adapter's requests, sent one at a time through either
// gateway in turn, get that adapter's answer and stay on one replica
// (its home set at low load: X-Llmgw-Replica), the same through both
// gateways; the base model still gets its own answer; and when a replica
// leaves the catalog (its allocation stopped, as Nomad's API shows) only
// the adapters it held move, and they still get their answers. 18
// adapters so that the leave checks something: chat-2 is the first home of
// none of them with probability (2/3)^18, under 1e-3.
func TestLoraAdaptersOverRealNomad(t *testing.T) {
	const base = "Hello world!"
	in := installRealEngine(t, base)
	// The adapters beside the model, in its world-readable folder: the
	// engine runs as nobody.
	o := tinymodel.Defaults
	o.Answer, o.Vocab = base, llamabuild.Vocab()
	var blocks strings.Builder
	answers := map[string]string{}
	var names []string
	for i, noun := range loraNouns {
		name := fmt.Sprintf("lora-%s", noun)
		path := filepath.Join(filepath.Dir(in.Model), name+".gguf")
		answer := "The " + noun + "."
		if err := tinymodel.WriteAdapter(path, tinymodel.AdapterOptions{Base: o, Name: name, Answer: answer, Signature: i}); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&blocks, "  adapter %q {\n    path = %q\n  }\n", name, path)
		answers[name] = answer
		names = append(names, name)
	}
	catalog := func(n int) string { return fmt.Sprintf(loraCatalog, in.Model, n, blocks.String()) }

	c, engine := sameRackClients(t, 2, in.Binary)
	cfg := controllerFilesEngines(t, c.Server.Addr(), fmt.Sprintf("{ vllm = %q, llamacpp = %q }", engine, in.Binary), catalog(3), "headroom = 0\n")
	ctl, ctlURL, _ := runController(t, cfg, "ctl")
	all := []string{"chat-0", "chat-1", "chat-2"}
	waitServing(t, ctlURL, 4*time.Minute, all...)

	bin := plugintest.Build(t, llmgwPkg)
	gws := []string{
		startGatewayBinary(t, bin, "--nomad", c.Server.Addr(), "--check-interval", "1s").url,
		startGatewayBinary(t, bin, "--nomad", c.Server.Addr(), "--check-interval", "1s").url,
	}
	waitReplicas := func(want int) {
		t.Helper()
		for _, gw := range gws {
			nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
				var models struct {
					Data []struct {
						ID     string `json:"id"`
						Parent string `json:"parent"`
					} `json:"data"`
				}
				getJSON(t, gw+"/v1/models", &models)
				listed := 0
				for _, m := range models.Data {
					if answers[m.ID] != "" && m.Parent == "chat" {
						listed++
					}
				}
				m := gwDemand(t, gw, "chat")
				return listed == len(answers) && m.Replicas == want,
					fmt.Sprintf("%s: %d of %d adapters listed with parent chat, %d replicas, want %d", gw, listed, len(answers), m.Replicas, want)
			})
		}
	}
	waitReplicas(3)

	// ask sends one request for model through gw and returns its answer
	// and replica.
	ask := func(gw, model string, n int) (answer, replica string) {
		t.Helper()
		body, err := json.Marshal(map[string]any{"model": model, "max_tokens": 16,
			"messages": []map[string]string{{"role": "user", "content": fmt.Sprintf("Question %d for %s: what is new?", n, model)}}})
		if err != nil {
			t.Fatal(err)
		}
		r := gwPost(t, gw, string(body))
		// Not r.completion: llama.cpp names its --alias (the base model)
		// as the answer's model, not the adapter the client asked for.
		var out struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(r.body, &out); r.status != http.StatusOK || err != nil || len(out.Choices) != 1 {
			t.Fatalf("%s through %s: %d %s, want 200 with one choice", model, gw, r.status, r.body)
		}
		answer = out.Choices[0].Message.Content
		if route := r.header.Get("X-Llmgw-Route"); model != "chat" && route != "adapter" {
			t.Errorf("%s through %s: X-Llmgw-Route %q, want adapter", model, gw, route)
		}
		return answer, r.header.Get(replicaHeader)
	}
	// round asks every adapter once through gw and the base model twice,
	// checking every answer, and returns each adapter's replica.
	round := func(n int, gw string) map[string]string {
		t.Helper()
		got := map[string]string{}
		for _, name := range names {
			answer, replica := ask(gw, name, n)
			if answer != answers[name] {
				t.Errorf("%s on %s through %s: %q, want its adapter's %q", name, replica, gw, answer, answers[name])
			}
			got[name] = replica
		}
		for range 2 {
			if answer, replica := ask(gw, "chat", n); answer != base {
				t.Errorf("the base model on %s through %s: %q, want %q", replica, gw, answer, base)
			}
		}
		return got
	}

	// Three rounds, through the two gateways in turn: each adapter stays on
	// one replica.
	home := round(0, gws[0])
	for n := 1; n < 3; n++ {
		for name, replica := range round(n, gws[n%2]) {
			if replica != home[name] {
				t.Errorf("%s went to %s through %s, its earlier requests to %s: one replica at low load, the same at every gateway", name, replica, gws[n%2], home[name])
			}
		}
	}
	byReplica := map[string][]string{}
	for _, name := range names {
		byReplica[home[name]] = append(byReplica[home[name]], name)
	}
	t.Logf("adapters by home replica: %v", byReplica)
	if len(byReplica) < 2 {
		t.Errorf("every adapter's home is %v: the rendezvous spreads nothing", byReplica)
	}

	// chat-2 leaves: its allocation stops in Nomad and the gateways drop
	// it; only the adapters it held move, and every adapter still gets its
	// own answer.
	if err := os.WriteFile(cfg.Catalog, []byte(catalog(2)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ctl.Reload(); err != nil {
		t.Fatal(err)
	}
	nomadtest.Eventually(t, 2*time.Minute, func() (bool, string) {
		regs := serviceReplicas(t, c.API, "chat")
		return slices.Equal(regs, all[:2]), fmt.Sprintf("Nomad's registrations of chat name %v, want %v", regs, all[:2])
	})
	waitReplicas(2)
	moved := 0
	var first map[string]string
	for n, gw := range gws {
		after := round(3+n, gw)
		for _, name := range names {
			switch {
			case home[name] == "chat-2":
				if n == 0 {
					moved++
				}
				if !slices.Contains(all[:2], after[name]) {
					t.Errorf("%s, held by chat-2 when it left, went to %s through %s", name, after[name], gw)
				}
				if first != nil && after[name] != first[name] {
					t.Errorf("%s, held by chat-2 when it left, went to %s through %s and to %s through %s: the gateways disagree", name, first[name], gws[0], after[name], gw)
				}
			case after[name] != home[name]:
				t.Errorf("%s moved from %s to %s through %s when chat-2 left: only chat-2's adapters may move", name, home[name], after[name], gw)
			}
		}
		first = after
	}
	t.Logf("chat-2 left: %d of %d adapters moved, all of them chat-2's", moved, len(names))
	if moved == 0 {
		t.Errorf("no adapter was on chat-2 when it left (%v): the leave checked nothing", byReplica)
	}
}
