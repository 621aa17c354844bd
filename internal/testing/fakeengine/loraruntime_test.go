package fakeengine

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/enginemetrics"
	"github.com/llmgw/llmgw/internal/testing/wait"
)

// runtimeServer is a vLLM fake-engine with runtime adapter loading on,
// parsed from args as the engine would be started.
func runtimeServer(t *testing.T, env string, args ...string) testServer {
	t.Helper()
	cfg, err := Parse(append([]string{"serve", "org/m", "--served-model-name", "base"}, args...), func(k string) string {
		if k == RuntimeLoRAEnv {
			return env
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := LoadAdapters(cfg); err != nil {
		t.Fatal(err)
	}
	return newTestServer(t, func(c *Config) { *c = cfg; c.TokensPerSecond = 0 })
}

func (ts testServer) post(path, contentType, body string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	ts.Handler().ServeHTTP(w, r)
	return w
}

// cards are the ids of GET /v1/models after the base model.
func (ts testServer) cards(t *testing.T) []string {
	t.Helper()
	w := ts.do(http.MethodGet, "/v1/models", "")
	list := decodeJSON[struct {
		Data []struct {
			ID   string `json:"id"`
			Root string `json:"root"`
		} `json:"data"`
	}](t, w.Body.Bytes())
	var out []string
	for _, c := range list.Data[1:] {
		out = append(out, c.ID+"="+c.Root)
	}
	return out
}

// The environment variable as vLLM reads it: "1" or "true" in any case,
// spaces around ignored; anything else leaves the API off.
func TestRuntimeLoRAEnv(t *testing.T) {
	for v, want := range map[string]bool{"True": true, " 1 ": true, "TRUE": true, "": false, "yes": false, "0": false, "on": false} {
		cfg, err := Parse([]string{"serve", "m"}, func(k string) string {
			if k == RuntimeLoRAEnv {
				return v
			}
			return ""
		})
		if err != nil || cfg.RuntimeLoRA != want {
			t.Errorf("%s=%q: RuntimeLoRA %v (%v), want %v", RuntimeLoRAEnv, v, cfg.RuntimeLoRA, err, want)
		}
	}
}

// A load makes the adapter a card of /v1/models and a model requests
// name; an unload takes it away again, a module given at start too.
func TestRuntimeLoRALoadAndUnload(t *testing.T) {
	sql, chat := peftDir(t), peftDir(t)
	ts := runtimeServer(t, "True", "--enable-lora", "--max-loras", "2", "--lora-modules", "sql="+sql)
	if got := ts.cards(t); !slices.Equal(got, []string{"sql=" + sql}) {
		t.Fatalf("cards at start %q", got)
	}
	w := ts.post("/v1/load_lora_adapter", "application/json", `{"lora_name":"chat","lora_path":"`+chat+`"}`)
	if w.Code != http.StatusOK || w.Body.String() != "Success: LoRA adapter 'chat' added successfully." || w.Header().Get("Content-Type") != "" {
		t.Fatalf("load: %d %q %q", w.Code, w.Header(), w.Body)
	}
	if got := ts.cards(t); !slices.Equal(got, []string{"sql=" + sql, "chat=" + chat}) {
		t.Fatalf("cards after the load %q", got)
	}
	if w := ts.do(http.MethodPost, "/v1/completions", `{"model":"chat","prompt":"hi","max_tokens":2}`); w.Code != http.StatusOK {
		t.Errorf("a request for the loaded adapter: %d %s", w.Code, w.Body)
	}
	// In place: the same name from another path.
	other := peftDir(t)
	if w := ts.post("/v1/load_lora_adapter", "application/json", `{"lora_name":"chat","lora_path":"`+other+`","load_inplace":true}`); w.Code != http.StatusOK {
		t.Fatalf("load in place: %d %s", w.Code, w.Body)
	}
	if got := ts.cards(t); !slices.Equal(got, []string{"sql=" + sql, "chat=" + other}) {
		t.Fatalf("cards after the load in place %q", got)
	}
	for _, name := range []string{"sql", "chat"} {
		w := ts.post("/v1/unload_lora_adapter", "application/json", `{"lora_name":"`+name+`"}`)
		if w.Code != http.StatusOK || w.Body.String() != "Success: LoRA adapter '"+name+"' removed successfully." {
			t.Fatalf("unload %s: %d %s", name, w.Code, w.Body)
		}
	}
	if got := ts.cards(t); len(got) != 0 {
		t.Errorf("cards after the unloads %q", got)
	}
	if w := ts.do(http.MethodPost, "/v1/completions", `{"model":"chat","prompt":"hi","max_tokens":2}`); w.Code != http.StatusNotFound {
		t.Errorf("a request for the unloaded adapter: %d %s", w.Code, w.Body)
	}
}

// What vLLM refuses of a load or an unload, fake-engine refuses with the
// same status, error type, param and message.
func TestRuntimeLoRARefusals(t *testing.T) {
	good := peftDir(t)
	rank32 := filepath.Join(t.TempDir(), "r32")
	noWeights := filepath.Join(t.TempDir(), "noweights")
	dora := filepath.Join(t.TempDir(), "dora")
	for _, d := range []string{rank32, noWeights, dora} {
		r := 8
		if d == rank32 {
			r = 32
		}
		if err := WritePEFTAdapter(d, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(noWeights, "adapter_model.safetensors")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dora, "adapter_config.json"), []byte(`{"r": 8, "lora_alpha": 8, "target_modules": "all", "use_dora": true, "bias": "all"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	noAlpha := filepath.Join(t.TempDir(), "noalpha")
	if err := WritePEFTAdapter(noAlpha, 8); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(noAlpha, "adapter_config.json"), []byte(`{"r": 8}`), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "gone")

	ts := runtimeServer(t, "1", "--enable-lora", "--lora-modules", "sql="+good)
	const load, unload, js = "/v1/load_lora_adapter", "/v1/unload_lora_adapter", "application/json"
	for _, c := range []struct {
		name, path, ctype, body string
		code                    int
		want                    string
	}{
		{"no JSON content type", load, "text/plain", `{"lora_name":"a","lora_path":"` + good + `"}`, 400,
			`{"error":{"message":"1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed","type":"Bad Request","param":null,"code":400}}`},
		{"no content type", load, "", `{"lora_name":"a","lora_path":"` + good + `"}`, 400,
			`{"error":{"message":"1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed","type":"Bad Request","param":null,"code":400}}`},
		{"no body", load, js, ``, 400,
			`{"error":{"message":"1 validation error:\n  {'type': 'missing', 'loc': ('body',), 'msg': 'Field required', 'input': None}","type":"Bad Request","param":"body","code":400}}`},
		{"no path", load, js, `{"lora_name":"a"}`, 400,
			`{"error":{"message":"1 validation error:\n  {'type': 'missing', 'loc': ('body', 'lora_path'), 'msg': 'Field required', 'input': {'lora_name': 'a'}}","type":"Bad Request","param":"body.lora_path","code":400}}`},
		{"neither", load, js, `{}`, 400,
			`{"error":{"message":"2 validation errors:\n  {'type': 'missing', 'loc': ('body', 'lora_name'), 'msg': 'Field required', 'input': {}}\n  {'type': 'missing', 'loc': ('body', 'lora_path'), 'msg': 'Field required', 'input': {}}","type":"Bad Request","param":"body.lora_name","code":400}}`},
		{"a number for a name", load, js, `{"lora_name":5,"lora_path":"/x"}`, 400,
			`{"error":{"message":"1 validation error:\n  {'type': 'string_type', 'loc': ('body', 'lora_name'), 'msg': 'Input should be a valid string', 'input': 5}","type":"Bad Request","param":"body.lora_name","code":400}}`},
		{"not an object", load, js, `["a"]`, 400,
			`{"error":{"message":"1 validation error:\n  {'type': 'model_attributes_type', 'loc': ('body',), 'msg': 'Input should be a valid dictionary or object to extract fields from', 'input': ['a']}","type":"Bad Request","param":"body","code":400}}`},
		{"empty name", load, js, `{"lora_name":"","lora_path":"/x"}`, 400,
			`{"error":{"message":"Both 'lora_name' and 'lora_path' must be provided.","type":"InvalidUserInput","param":null,"code":400}}`},
		{"empty path", load, js, `{"lora_name":"a","lora_path":""}`, 400,
			`{"error":{"message":"Both 'lora_name' and 'lora_path' must be provided.","type":"InvalidUserInput","param":null,"code":400}}`},
		{"loaded already", load, js, `{"lora_name":"sql","lora_path":"` + good + `"}`, 400,
			`{"error":{"message":"The lora adapter 'sql' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.","type":"InvalidUserInput","param":null,"code":400}}`},
		{"no adapter there", load, js, `{"lora_name":"a","lora_path":"` + missing + `"}`, 404,
			`{"error":{"message":"Loading lora a failed: No adapter found for ` + sanitizeMessage(missing) + `","type":"NotFoundError","param":null,"code":404}}`},
		{"rank above the bound", load, js, `{"lora_name":"a","lora_path":"` + rank32 + `"}`, 500,
			`{"error":{"message":"Call to add_lora method failed: LoRA rank 32 is greater than max_lora_rank 16.","type":"InternalServerError","param":null,"code":500}}`},
		{"DoRA and bias", load, js, `{"lora_name":"a","lora_path":"` + dora + `"}`, 500,
			`{"error":{"message":"Call to add_lora method failed: vLLM does not yet support DoRA. Adapter bias is not supported.","type":"InternalServerError","param":null,"code":500}}`},
		{"config fields missing", load, js, `{"lora_name":"a","lora_path":"` + noAlpha + `"}`, 500,
			`{"error":{"message":"Call to add_lora method failed: Missing required configuration fields: {'lora_alpha', 'target_modules'}","type":"InternalServerError","param":null,"code":500}}`},
		{"no weights", load, js, `{"lora_name":"a","lora_path":"` + noWeights + `"}`, 500,
			`{"error":{"message":"Call to add_lora method failed: ` + sanitizeMessage(noWeights) + ` doesn't contain tensors","type":"InternalServerError","param":null,"code":500}}`},
		{"unload: no name", unload, js, `{"lora_int_id":1}`, 400,
			`{"error":{"message":"1 validation error:\n  {'type': 'missing', 'loc': ('body', 'lora_name'), 'msg': 'Field required', 'input': {'lora_int_id': 1}}","type":"Bad Request","param":"body.lora_name","code":400}}`},
		{"unload: a bad id", unload, js, `{"lora_name":"sql","lora_int_id":"x"}`, 400,
			`{"error":{"message":"1 validation error:\n  {'type': 'int_parsing', 'loc': ('body', 'lora_int_id'), 'msg': 'Input should be a valid integer, unable to parse string as an integer', 'input': 'x'}","type":"Bad Request","param":"body.lora_int_id","code":400}}`},
		{"unload: empty name", unload, js, `{"lora_name":""}`, 400,
			`{"error":{"message":"'lora_name' needs to be provided to unload a LoRA adapter.","type":"InvalidUserInput","param":null,"code":400}}`},
		{"unload: not loaded", unload, js, `{"lora_name":"chat"}`, 404,
			`{"error":{"message":"The lora adapter 'chat' cannot be found.","type":"NotFoundError","param":null,"code":404}}`},
	} {
		w := ts.post(c.path, c.ctype, c.body)
		if got := strings.TrimSpace(w.Body.String()); w.Code != c.code || got != c.want {
			t.Errorf("%s: %d %s\nwant %d %s", c.name, w.Code, got, c.code, c.want)
		}
	}
	if got := ts.cards(t); !slices.Equal(got, []string{"sql=" + good}) {
		t.Errorf("cards after the refusals %q, want sql alone", got)
	}

	// Without the environment variable the routes are not there.
	off := runtimeServer(t, "", "--enable-lora")
	for _, p := range []string{load, unload} {
		w := off.post(p, js, `{"lora_name":"a","lora_path":"`+good+`"}`)
		if got := strings.TrimSpace(w.Body.String()); w.Code != http.StatusNotFound || got != `{"detail":"Not Found"}` {
			t.Errorf("%s without %s: %d %s", p, RuntimeLoRAEnv, w.Code, got)
		}
	}
	// Without --enable-lora the engine has no adapter manager.
	noLoRA := runtimeServer(t, "true")
	w := noLoRA.post(load, js, `{"lora_name":"a","lora_path":"`+good+`"}`)
	if want := `{"error":{"message":"Call to add_lora method failed: LoRA is not enabled. Use --enable-lora to enable LoRA.","type":"InternalServerError","param":null,"code":500}}`; strings.TrimSpace(w.Body.String()) != want {
		t.Errorf("a load without --enable-lora: %d %s, want %s", w.Code, w.Body, want)
	}
}

// vLLM's sanitize_message: paths under the system's directories, memory
// addresses and traceback lines out of a message.
func TestSanitizeMessage(t *testing.T) {
	for in, want := range map[string]string{
		"No adapter found for /tmp/x/sql":              "No adapter found for <path>",
		"No adapter found for /data/adapters/sql":      "No adapter found for /data/adapters/sql",
		"bad file /data/a/adapter_config.json here":    "bad file <path> here",
		"<object at 0x7f00ab> failed":                  "<object> failed",
		"boom\n  File \"x.py\", line 3, in f\n    g()": "boom",
	} {
		if got := sanitizeMessage(in); got != want {
			t.Errorf("sanitize(%q) = %q, want %q", in, got, want)
		}
	}
}

// vllm:lora_requests_info: a series per set of adapters in flight, the
// latest valued highest, read by the engine package's names.
func TestLoRARequestsInfo(t *testing.T) {
	sql := peftDir(t)
	cfg, err := Parse([]string{"serve", "org/m", "--served-model-name", "base", "--enable-lora", "--max-loras", "3", "--lora-modules", "sql=" + sql}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.TokensPerSecond = 1
	ts := newTestServer(t, func(c *Config) { *c = cfg })
	names, _ := engine.MetricsOf(engine.VLLM)
	scrape := func() enginemetrics.Sample {
		w := ts.do(http.MethodGet, "/metrics", "")
		s, err := enginemetrics.Parse(w.Body, names, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := scrape(); s.Adapters != nil {
		t.Fatalf("no request yet: %+v, want no series", s.Adapters)
	}
	srv := httptest.NewServer(ts.Handler())
	defer srv.Close()
	// One request for sql, running a long while.
	go func() {
		resp, err := http.Post(srv.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"sql","prompt":"hi","max_tokens":3600}`))
		if err == nil {
			_ = resp.Body.Close()
		}
	}()
	wait.For(t, "sql in flight", func() (bool, string) {
		s := scrape()
		if s.Adapters == nil {
			return false, "no series"
		}
		a := s.Adapters
		return slices.Equal(a.Running, []string{"sql"}) && slices.Equal(a.Waiting, []string{"sql"}) && a.Slots == 3, "adapters " + strings.Join(a.Running, ",")
	})
	page := ts.do(http.MethodGet, "/metrics", "").Body.String()
	if !strings.Contains(page, `vllm:lora_requests_info{max_lora="3",running_lora_adapters="sql",waiting_lora_adapters="sql"} `) {
		t.Errorf("metrics page lacks the series:\n%s", page)
	}
	srv.CloseClientConnections()
	wait.For(t, "none in flight", func() (bool, string) {
		a := scrape().Adapters
		if a == nil {
			return false, "no series"
		}
		return len(a.Running) == 0 && len(a.Waiting) == 0, "running " + strings.Join(a.Running, ",")
	})
}
