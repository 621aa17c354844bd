package driver_test

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/testing/fakeengine"
	"github.com/llmgw/llmgw/internal/testing/realengine"
	"github.com/llmgw/llmgw/internal/testing/tinymodel"
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
	url := "http://127.0.0.1:" + strconv.Itoa(tk.port)
	code, list := realengine.Get(t, url+"/lora-adapters")
	var loaded []struct {
		ID   int    `json:"id"`
		Path string `json:"path"`
	}
	if err := json.Unmarshal([]byte(list), &loaded); code != 200 || err != nil || len(loaded) != 1 || loaded[0].ID != 0 || loaded[0].Path != good {
		t.Errorf("GET /lora-adapters: %d %s (%v): want id 0 at %s", code, list, err, good)
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
