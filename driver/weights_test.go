package driver_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/testing/hubserver"
	"github.com/llmgw/llmgw/internal/testing/llamabuild"
	"github.com/llmgw/llmgw/internal/testing/realengine"
	"github.com/llmgw/llmgw/internal/testing/wait"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
	"github.com/llmgw/llmgw/weights"
)

// A task whose weights block names a hub repository: the driver's store
// fetches the GGUF from the (local) hub before llama.cpp's real server
// starts on it, says so in the task's events and, at once, in the node's
// fingerprint; a second task on the node fetches nothing and leases the
// same files; a repository the hub does not have is a recoverable failure
// naming it; sha256 beside a hub repository is refused as bad config.
func TestRealLlamaCppWeightsFromTheStore(t *testing.T) {
	modelFile := realengine.TinyModel(t)
	data, err := os.ReadFile(modelFile)
	if err != nil {
		t.Fatal(err)
	}
	hub := hubserver.Start(t, hubserver.Options{})
	hub.Add("llmgw/tiny-gguf", "main", map[string][]byte{"tiny.gguf": data})
	store := t.TempDir()
	if err := os.Chmod(store, 0o755); err != nil {
		t.Fatal(err)
	}
	p := startPlugin(t, pluginBody+fmt.Sprintf("model_cache = %q\nhub_url = %q\n", store, hub.URL()))
	fp, err := p.Driver.Fingerprint(ctxT(t, 2*time.Minute), &driverpb.FingerprintRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fp.Recv(); err != nil {
		t.Fatal(err)
	}
	body := `
engine  = "llamacpp"
model   = "llmgw/tiny-gguf"
model_file = "tiny.gguf"
command = "` + llamabuild.Binary() + `"
port    = "%PORT%"
served_model_name = "tiny"
args    = ["-np", "1", "-c", "1024"]
weights {
  revision = "main"
}
`
	src := weights.Source{Hub: &weights.Hub{Repo: "llmgw/tiny-gguf", Revision: "main", Files: []string{"tiny.gguf"}}}
	attr := "driver.llmgw.weights." + src.Key()

	tk := newTask(t, taskOpts{noGPU: true, body: body})
	p.start(t, tk)
	id := tk.cfg.GetId()
	p.events.wait(t, id, "Ready after", time.Minute)
	msgs := eventMessages(p, id)
	fetched, started := indexOf(msgs, "Fetch finished: llmgw/tiny-gguf@main"), indexOf(msgs, "Started llamacpp")
	if indexOf(msgs, "Fetch started") < 0 || fetched < 0 || started < fetched {
		t.Errorf("events %q: want the fetch, then the engine", msgs)
	}
	code, answer := realengine.Post(t, "http://127.0.0.1:"+strconv.Itoa(tk.port)+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
	if code != 200 || !strings.Contains(string(answer), "Hello world!") {
		t.Errorf("answer %d %s", code, answer)
	}
	// The fingerprint says it without waiting for its 30 s tick.
	wait.For(t, "the weights attribute", func() (bool, string) {
		got, err := fp.Recv()
		if err != nil {
			return false, err.Error()
		}
		v := got.GetAttributes()[attr].GetStringVal()
		return v == strconv.Itoa(len(data)), fmt.Sprintf("%s = %q", attr, v)
	})

	tk2 := newTask(t, taskOpts{noGPU: true, body: body})
	p.start(t, tk2)
	p.events.wait(t, tk2.cfg.GetId(), "Ready after", time.Minute)
	if msgs := eventMessages(p, tk2.cfg.GetId()); indexOf(msgs, "nothing fetched") < 0 || indexOf(msgs, "Fetch started") >= 0 {
		t.Errorf("second task's events %q: want nothing fetched", msgs)
	}
	if st := hub.Stats("llmgw/tiny-gguf", "tiny.gguf"); st.Gets != 1 {
		t.Errorf("the model was fetched %d times onto the node, want once", st.Gets)
	}
	s, err := weights.Open(weights.Config{Dir: store})
	if err != nil {
		t.Fatal(err)
	}
	if !s.InUse(src.Key()) {
		t.Error("the store does not count the running tasks' lease")
	}

	// A repository the hub does not have: recoverable, named.
	missing := strings.Replace(body, "llmgw/tiny-gguf", "llmgw/gone", 1)
	tk3 := newTask(t, taskOpts{noGPU: true, body: missing})
	_, err = p.Driver.StartTask(ctxT(t, time.Minute), &driverpb.StartTaskRequest{Task: tk3.cfg})
	if err == nil || !strings.Contains(err.Error(), "RepoNotFound") {
		t.Errorf("a missing repository: %v", err)
	}
	p.events.wait(t, tk3.cfg.GetId(), "Weights not fetched: weights llmgw/gone@main", time.Minute)

	bad := strings.Replace(body, `revision = "main"`, `sha256 = { "tiny.gguf" = "00" }`, 1)
	tk4 := newTask(t, taskOpts{noGPU: true, body: bad})
	_, err = p.Driver.StartTask(ctxT(t, time.Minute), &driverpb.StartTaskRequest{Task: tk4.cfg})
	if err == nil || !strings.Contains(err.Error(), "weights.sha256: only for urls") {
		t.Errorf("sha256 with a hub repository: %v", err)
	}
}
