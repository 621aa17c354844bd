package driver_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/internal/testing/hubserver"
	"github.com/llmgw/llmgw/internal/testing/wait"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
	"github.com/llmgw/llmgw/weights"
)

// A fetch task (engine "fetch") runs the driver's own fetch under a
// supervisor: its steps are task events, it exits 0 with the model whole
// in the node's store, and the fingerprint then says the node holds it; a
// fetch stopped halfway keeps its bytes and the next fetch resumes from
// them; a fetch the hub refuses exits 1 saying why; a fetch task that
// names a command is refused.
func TestFetchTask(t *testing.T) {
	data := make([]byte, 6<<20)
	for i := range data {
		data[i] = byte(i * 31)
	}
	hub := hubserver.Start(t, hubserver.Options{})
	hub.Add("llmgw/spare", "main", map[string][]byte{"m.gguf": data})
	store := t.TempDir()
	p := startPlugin(t, pluginBody+fmt.Sprintf("model_cache = %q\nhub_url = %q\n", store, hub.URL()))
	fp, err := p.Driver.Fingerprint(ctxT(t, 2*time.Minute), &driverpb.FingerprintRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fp.Recv(); err != nil {
		t.Fatal(err)
	}
	body := `
engine = "fetch"
model  = "llmgw/spare"
model_file = "m.gguf"
weights {}
`
	src := weights.Source{Hub: &weights.Hub{Repo: "llmgw/spare", Files: []string{"m.gguf"}}}

	// Stopped halfway: the hub holds the GET after 2 MiB.
	release := hub.Stall("llmgw/spare", "m.gguf", 2<<20, 0, 1)
	tk := newTask(t, taskOpts{noGPU: true, body: body})
	p.start(t, tk)
	id := tk.cfg.GetId()
	p.events.wait(t, id, "Fetch started: llmgw/spare@main", time.Minute)
	wait.For(t, "2 MiB sent", func() (bool, string) {
		st := hub.Stats("llmgw/spare", "m.gguf")
		return st.BodyBytes >= 2<<20, fmt.Sprintf("%+v", st)
	})
	if _, err := p.Driver.StopTask(ctxT(t, time.Minute), &driverpb.StopTaskRequest{TaskId: id, Signal: "SIGTERM"}); err != nil {
		t.Fatal(err)
	}
	release()
	w, err := p.Driver.WaitTask(ctxT(t, time.Minute), &driverpb.WaitTaskRequest{TaskId: id})
	if err != nil {
		t.Fatal(err)
	}
	if w.GetResult().GetExitCode() == 0 {
		t.Errorf("a fetch stopped halfway exited 0")
	}
	s, err := weights.Open(weights.Config{Dir: store})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Lookup(src.Key()); ok {
		t.Fatal("the store holds a model whose fetch was stopped halfway")
	}

	// Again: resumes, exits 0, and the node says it holds the model.
	tk2 := newTask(t, taskOpts{noGPU: true, body: body})
	p.start(t, tk2)
	w, err = p.Driver.WaitTask(ctxT(t, time.Minute), &driverpb.WaitTaskRequest{TaskId: tk2.cfg.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if code := w.GetResult().GetExitCode(); code != 0 {
		t.Fatalf("fetch exited %d: %q", code, eventMessages(p, tk2.cfg.GetId()))
	}
	ev := p.events.wait(t, tk2.cfg.GetId(), "Fetch finished: llmgw/spare@main", 10*time.Second)
	if !strings.Contains(ev.GetMessage(), "kept from an unfinished fetch") {
		t.Errorf("the second fetch did not resume: %q", ev.GetMessage())
	}
	st := hub.Stats("llmgw/spare", "m.gguf")
	if last := st.RangeStarts[len(st.RangeStarts)-1]; last < 2<<20 {
		t.Errorf("range starts %v: the second fetch started at %d, want at least 2 MiB", st.RangeStarts, last)
	}
	m, ok, err := s.Lookup(src.Key())
	if !ok || err != nil {
		t.Fatalf("the store does not hold the model: %v", err)
	}
	if got, _ := os.ReadFile(m.Dir + "/m.gguf"); len(got) != len(data) {
		t.Errorf("the model is %d bytes, want %d", len(got), len(data))
	}
	attr := "driver.llmgw.weights." + src.Key()
	wait.For(t, "the weights attribute", func() (bool, string) {
		got, err := fp.Recv()
		if err != nil {
			return false, err.Error()
		}
		v := got.GetAttributes()[attr].GetStringVal()
		return v == fmt.Sprint(len(data)), fmt.Sprintf("%s = %q", attr, v)
	})

	// Refused by the hub: exit 1, named.
	tk3 := newTask(t, taskOpts{noGPU: true, body: strings.Replace(body, "llmgw/spare", "llmgw/gone", 1)})
	p.start(t, tk3)
	w, err = p.Driver.WaitTask(ctxT(t, time.Minute), &driverpb.WaitTaskRequest{TaskId: tk3.cfg.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if w.GetResult().GetExitCode() != 1 {
		t.Errorf("a refused fetch exited %d, want 1", w.GetResult().GetExitCode())
	}
	p.events.wait(t, tk3.cfg.GetId(), "Weights not fetched: weights llmgw/gone@main", 10*time.Second)

	// A fetch task runs nothing of the job's.
	tk4 := newTask(t, taskOpts{noGPU: true, body: body + "command = \"/bin/sh\"\n"})
	if _, err := p.Driver.StartTask(ctxT(t, time.Minute), &driverpb.StartTaskRequest{Task: tk4.cfg}); err == nil ||
		!strings.Contains(err.Error(), `engine "fetch" runs the driver's own fetch`) {
		t.Errorf("a fetch with a command: %v", err)
	}
}

// A gated repository: without a token the fetch fails saying it needs
// one; with HF_TOKEN in the task's environment (what the controller's
// env_from_variable template sets from Nomad Variables) it fetches, and
// the token is in no event.
func TestFetchTaskGatedRepository(t *testing.T) {
	hub := hubserver.Start(t, hubserver.Options{})
	hub.Add("llmgw/gated", "main", map[string][]byte{"m.gguf": []byte("weights of a gated model")})
	hub.Gate("llmgw/gated", "hf_secret_token")
	store := t.TempDir()
	p := startPlugin(t, pluginBody+fmt.Sprintf("model_cache = %q\nhub_url = %q\n", store, hub.URL()))
	body := "engine = \"fetch\"\nmodel = \"llmgw/gated\"\nmodel_file = \"m.gguf\"\nweights {}\n"
	exit := func(tk *task) int32 {
		t.Helper()
		p.start(t, tk)
		w, err := p.Driver.WaitTask(ctxT(t, time.Minute), &driverpb.WaitTaskRequest{TaskId: tk.cfg.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		return w.GetResult().GetExitCode()
	}
	without := newTask(t, taskOpts{noGPU: true, body: body})
	if code := exit(without); code != 1 {
		t.Errorf("without a token: exit %d, want 1", code)
	}
	p.events.wait(t, without.cfg.GetId(), "needs a token", 10*time.Second)
	with := newTask(t, taskOpts{noGPU: true, body: body})
	if with.cfg.Env == nil {
		with.cfg.Env = map[string]string{}
	}
	with.cfg.Env["HF_TOKEN"] = "hf_secret_token"
	if code := exit(with); code != 0 {
		t.Fatalf("with the token: exit %d: %q", code, eventMessages(p, with.cfg.GetId()))
	}
	for _, ev := range p.events.all() {
		if strings.Contains(ev.GetMessage(), "hf_secret_token") || strings.Contains(fmt.Sprint(ev.GetAnnotations()), "hf_secret_token") {
			t.Errorf("an event carries the token: %q", ev.GetMessage())
		}
	}
}
