package driver_test

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/testing/fakeengine"
	"github.com/llmgw/llmgw/internal/testing/hubserver"
	"github.com/llmgw/llmgw/internal/testing/realengine"
	"github.com/llmgw/llmgw/internal/testing/tinymodel"
	"github.com/llmgw/llmgw/weights"
)

// One of two llama.cpp adapters is for another base model: the driver
// leaves it out of llama-server's command line with a task event naming it
// and the cause, and the server starts (with both it would exit before it
// listens, base model included: realengine's TestLoraBadAdapters),
// serving the base and the good adapter, numbered 0.
func TestRealLlamaCppLeavesOutABadAdapter(t *testing.T) {
	model := realengine.TinyModel(t)
	wide := tinymodel.Defaults
	wide.Embed = 128
	other := realengine.Adapter(t, wide, "Goodbye moon.", 1)
	good := realengine.Adapter(t, tinymodel.Defaults, "Ahoy matey.", 0)
	p := startPlugin(t, pluginBody)
	body := llamaTask(model, "") + `
adapter {
  name = "other"
  path = "` + other + `"
}
adapter {
  name = "pirate"
  path = "` + good + `"
}
`
	tk := newTask(t, taskOpts{noGPU: true, body: body})
	p.start(t, tk)
	id := tk.cfg.GetId()
	p.events.wait(t, id, `LoRA adapter "other" not loaded: `+other+`: tensor "blk.0.attn_output.weight" does not fit the model's shape`, time.Minute)
	p.events.wait(t, id, "LoRA adapters loaded: pirate (id 0)", time.Minute)
	p.events.wait(t, id, "Ready after", time.Minute)
	command := ""
	for _, ev := range p.events.all() {
		if ev.GetTaskId() == id && strings.HasPrefix(ev.GetMessage(), "Started llamacpp") {
			command = ev.GetAnnotations()["command"]
		}
		if ev.GetTaskId() == id && strings.HasPrefix(ev.GetMessage(), `LoRA adapter "other"`) {
			if a := ev.GetAnnotations(); a["adapter"] != "other" || a["path"] != other || !strings.Contains(a["cause"], "does not fit") {
				t.Errorf("annotations %v", a)
			}
		}
	}
	if !strings.Contains(command, "--lora "+good+" --lora-init-without-apply --cache-ram 0") || strings.Contains(command, other) {
		t.Errorf("command %q: want the good adapter alone", command)
	}
	checkPirateAt(t, "http://127.0.0.1:"+strconv.Itoa(tk.port), good)
}

// Adapters the node's store fetches, as it fetches a model's weights: the
// good one from a (local) hub repository, the other from a URL whose
// sha256 the bytes do not have. The store refuses the second after its
// tries, and the driver leaves it out with a task event naming it and the
// cause; llama.cpp's real server starts with the good one, linked in the
// task's directory and listed by that path at GET /lora-adapters as id 0,
// and answers with it and without it; the task leases the adapter in the
// store.
func TestRealLlamaCppAdaptersFromTheStore(t *testing.T) {
	model := realengine.TinyModel(t)
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	pirate := read(realengine.Adapter(t, tinymodel.Defaults, "Ahoy matey.", 0))
	moon := read(realengine.Adapter(t, tinymodel.Defaults, "Goodbye moon.", 1))
	hub := hubserver.Start(t, hubserver.Options{})
	hub.Add("llmgw/pirate-lora", "main", map[string][]byte{"pirate.gguf": pirate})
	moonCommit := hub.Add("llmgw/moon-lora", "main", map[string][]byte{"moon.gguf": moon})
	moonURL := hub.URL() + "/llmgw/moon-lora/resolve/" + moonCommit + "/moon.gguf"
	wrong := fmt.Sprintf("%x", sha256.Sum256(pirate))
	store := t.TempDir()
	p := startPlugin(t, pluginBody+fmt.Sprintf("model_cache = %q\nhub_url = %q\n", store, hub.URL()))
	body := llamaTask(model, "") + `
adapter {
  name = "moon"
  weights {
    urls   = ["` + moonURL + `"]
    sha256 = { "moon.gguf" = "` + wrong + `" }
  }
}
adapter {
  name   = "pirate"
  source = "llmgw/pirate-lora"
  weights {
    revision = "main"
    files    = ["pirate.gguf"]
  }
}
`
	tk := newTask(t, taskOpts{noGPU: true, body: body})
	p.start(t, tk)
	id := tk.cfg.GetId()
	p.events.wait(t, id, `LoRA adapter "moon" not loaded: weights `+moonURL+`: moon.gguf: moon.gguf: sha256 `, time.Minute)
	p.events.wait(t, id, "LoRA adapters loaded: pirate (id 0)", time.Minute)
	p.events.wait(t, id, "Ready after", time.Minute)
	msgs := eventMessages(p, id)
	if i, j := indexOf(msgs, `LoRA adapter "pirate": Fetch finished: llmgw/pirate-lora@main`), indexOf(msgs, "Started llamacpp"); i < 0 || j < i {
		t.Errorf("events %q: want pirate's fetch, then the engine", msgs)
	}
	for _, ev := range p.events.all() {
		if ev.GetTaskId() == id && strings.HasPrefix(ev.GetMessage(), `LoRA adapter "moon" not loaded`) {
			if a := ev.GetAnnotations(); a["adapter"] != "moon" || a["source"] != moonURL || !strings.Contains(a["cause"], "want "+wrong) || a["path"] != "" {
				t.Errorf("moon's annotations %v", a)
			}
		}
	}
	link := filepath.Join(tk.cfg.GetAllocDir(), tk.cfg.GetName(), "llmgw-adapters", "pirate")
	checkPirateAt(t, "http://127.0.0.1:"+strconv.Itoa(tk.port), link)
	s, err := weights.Open(weights.Config{Dir: store})
	if err != nil {
		t.Fatal(err)
	}
	key := weights.Source{Hub: &weights.Hub{Repo: "llmgw/pirate-lora", Revision: "main", Files: []string{"pirate.gguf"}}}.Key()
	if !s.InUse(key) {
		t.Error("the store does not count the task's lease of the adapter")
	}
	if st := hub.Stats("llmgw/moon-lora", "moon.gguf"); st.Gets != 4 {
		t.Errorf("moon.gguf: %d GETs, want the store's 4 tries", st.Gets)
	}
}

// A vLLM adapter that is no PEFT directory is left out (vLLM would not
// start with it: fake-engine refuses it as vLLM does), with its event;
// the engine starts with the other, which GET /v1/models lists.
func TestVLLMLeavesOutAMissingAdapter(t *testing.T) {
	good := t.TempDir()
	if err := fakeengine.WritePEFTAdapter(good, 8); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "sql")
	p := startPlugin(t, pluginBody)
	tk := newTask(t, taskOpts{body: vllmTask(`served_model_name = "base"
adapter {
  name = "sql"
  path = "` + missing + `"
}
adapter {
  name = "chat"
  path = "` + good + `"
}
`)})
	p.start(t, tk)
	id := tk.cfg.GetId()
	p.events.wait(t, id, `LoRA adapter "sql" not loaded: stat `+missing+`: no such file or directory`, 10*time.Second)
	p.events.wait(t, id, "LoRA adapters loaded: chat", 10*time.Second)
	p.events.wait(t, id, "Ready after", 30*time.Second)
	code, body := realengine.Get(t, "http://127.0.0.1:"+strconv.Itoa(tk.port)+"/v1/models")
	var list struct {
		Data []struct {
			ID     string  `json:"id"`
			Root   string  `json:"root"`
			Parent *string `json:"parent"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil || code != 200 || len(list.Data) != 2 ||
		list.Data[1].ID != "chat" || list.Data[1].Root != good || list.Data[1].Parent == nil || *list.Data[1].Parent != "base" {
		t.Errorf("GET /v1/models: %d %s (%v): want base, then chat from %s", code, body, err, good)
	}
}

// checkPirateAt checks the llama.cpp server at url: it lists one adapter,
// id 0 at path, which answers as the pirate adapter at scale 1 and as the
// base model at scale 0.
func checkPirateAt(t *testing.T, url, path string) {
	t.Helper()
	code, list := realengine.Get(t, url+"/lora-adapters")
	var loaded []struct {
		ID   int    `json:"id"`
		Path string `json:"path"`
	}
	if err := json.Unmarshal([]byte(list), &loaded); code != 200 || err != nil || len(loaded) != 1 || loaded[0].ID != 0 || loaded[0].Path != path {
		t.Errorf("GET /lora-adapters: %d %s (%v): want id 0 at %s", code, list, err, path)
	}
	for _, c := range []struct{ lora, want string }{
		{`[{"id":0,"scale":1}]`, "Ahoy matey."},
		{`[{"id":0,"scale":0}]`, "Hello world!"},
	} {
		code, b := realengine.Post(t, url+"/v1/completions", `{"prompt":"Hi","max_tokens":16,"lora":`+c.lora+`}`)
		var a struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(b, &a); err != nil || code != 200 || len(a.Choices) != 1 || a.Choices[0].Text != c.want {
			t.Errorf("lora %s: %d %s, want %q", c.lora, code, b, c.want)
		}
	}
}
