package fakeengine

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// sglangServer is an SGLang fake-engine parsed from args as the engine
// would be started, its start checks passed.
func sglangServer(t *testing.T, args ...string) testServer {
	t.Helper()
	cfg, err := Parse(append([]string{"--model-path", "org/m", "--served-model-name", "base"}, args...), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := LoadAdapters(cfg); err != nil {
		t.Fatal(err)
	}
	return newTestServer(t, func(c *Config) { *c = cfg; c.TokensPerSecond = 0 })
}

// sglangAnswer is SGLang's LoRAUpdateOutput.
type sglangAnswer struct {
	RID            *string           `json:"rid"`
	HTTPWorkerIPC  *string           `json:"http_worker_ipc"`
	Success        bool              `json:"success"`
	ErrorMessage   *string           `json:"error_message"`
	LoadedAdapters map[string]string `json:"loaded_adapters"`
}

// The runtime flags llmgw starts SGLang with: a load is a card of
// /v1/models (parent the served name) and a model requests may name; the
// answer lists every loaded adapter; an unload takes it away.
func TestSGLangLoRALoadAndUnload(t *testing.T) {
	sql, chat := peftDir(t), peftDir(t)
	ts := sglangServer(t, "--enable-lora", "--max-loras-per-batch", "2", "--max-lora-rank", "8", "--lora-target-modules", "all")
	if got := ts.cards(t); len(got) != 0 {
		t.Fatalf("cards at start %q", got)
	}
	for _, a := range []struct{ name, path string }{{"sql", sql}, {"chat", chat}} {
		w := ts.post("/load_lora_adapter", "application/json", `{"lora_name":"`+a.name+`","lora_path":"`+a.path+`"}`)
		got := decodeJSON[sglangAnswer](t, w.Body.Bytes())
		if w.Code != http.StatusOK || !got.Success || got.ErrorMessage == nil || *got.ErrorMessage != "" || got.LoadedAdapters[a.name] != a.path ||
			!strings.HasPrefix(w.Body.String(), `{"rid":null,"http_worker_ipc":null,"success":true,"error_message":"","loaded_adapters":{`) {
			t.Fatalf("load %s: %d %s", a.name, w.Code, w.Body)
		}
	}
	if got := ts.cards(t); !slices.Equal(got, []string{"sql=" + sql, "chat=" + chat}) {
		t.Fatalf("cards after the loads %q", got)
	}
	w := ts.do(http.MethodGet, "/v1/models", "")
	if !strings.Contains(w.Body.String(), `"id":"sql","object":"model"`) || !strings.Contains(w.Body.String(), `"parent":"base"`) {
		t.Errorf("cards: %s", w.Body)
	}
	for _, model := range []string{"chat", "base:chat", "base: chat"} {
		if w := ts.do(http.MethodPost, "/v1/completions", `{"model":"`+model+`","prompt":"hi","max_tokens":2}`); w.Code != http.StatusOK {
			t.Errorf("a request for the loaded adapter as %q: %d %s", model, w.Code, w.Body)
		}
	}
	w = ts.post("/unload_lora_adapter", "application/json", `{"lora_name":"sql"}`)
	if got := decodeJSON[sglangAnswer](t, w.Body.Bytes()); w.Code != http.StatusOK || !got.Success || len(got.LoadedAdapters) != 1 || got.LoadedAdapters["chat"] != chat {
		t.Fatalf("unload: %d %s", w.Code, w.Body)
	}
	if got := ts.cards(t); !slices.Equal(got, []string{"chat=" + chat}) {
		t.Errorf("cards after the unload %q", got)
	}
	// vLLM's paths are not SGLang's.
	if w := ts.post("/v1/load_lora_adapter", "application/json", `{"lora_name":"x","lora_path":"`+sql+`"}`); w.Code != http.StatusNotFound {
		t.Errorf("vLLM's path on SGLang: %d %s", w.Code, w.Body)
	}
}

// What SGLang refuses of a load or an unload, fake-engine refuses: 400
// with success false and SGLang's message, or (plain data parallelism)
// 500.
func TestSGLangLoRARefusals(t *testing.T) {
	good := peftDir(t)
	rank16 := filepath.Join(t.TempDir(), "r16")
	if err := WritePEFTAdapter(rank16, 16); err != nil {
		t.Fatal(err)
	}
	mlp := filepath.Join(t.TempDir(), "mlp")
	if err := WritePEFTAdapter(mlp, 8); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mlp, "adapter_config.json"), []byte(`{"r": 8, "lora_alpha": 16, "target_modules": ["gate_proj", "up_proj"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	dora := filepath.Join(t.TempDir(), "dora")
	if err := WritePEFTAdapter(dora, 8); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dora, "adapter_config.json"), []byte(`{"r": 8, "lora_alpha": 16, "target_modules": "all", "use_dora": true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	noAlpha := filepath.Join(t.TempDir(), "noalpha")
	if err := WritePEFTAdapter(noAlpha, 8); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(noAlpha, "adapter_config.json"), []byte(`{"r": 8, "target_modules": ["q_proj"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	// Target modules q and v only: the pool has qkv_proj.
	ts := sglangServer(t, "--enable-lora", "--max-loras-per-batch", "2", "--max-lora-rank", "8", "--lora-target-modules", "q_proj", "v_proj")
	if w := ts.post("/load_lora_adapter", "application/json", `{"lora_name":"sql","lora_path":"`+good+`"}`); w.Code != http.StatusOK {
		t.Fatalf("load sql: %d %s", w.Code, w.Body)
	}
	incompatible := func(name, r string) string {
		return "LoRA adapter " + name + " with rank " + r + " is incompatible with the current LoRA memory pool configuration. " +
			"Please ensure that the LoRA adapter's rank is within the configured `--max-lora-rank` and that the target modules are included in `--lora-target-modules`."
	}
	for _, c := range []struct{ name, path, body, msg string }{
		{"the name again", "", `{"lora_name":"sql","lora_path":"` + good + `"}`, "Failed to load LoRA adapter sql because it is already loaded"},
		{"a load in place is no SGLang field", "", `{"lora_name":"sql","lora_path":"` + good + `","load_inplace":true}`, "Failed to load LoRA adapter sql because it is already loaded"},
		{"a rank past the bound", "", `{"lora_name":"big","lora_path":"` + rank16 + `"}`, incompatible("big", "16")},
		{"modules outside the pool", "", `{"lora_name":"mlp","lora_path":"` + mlp + `"}`, incompatible("mlp", "8")},
		{"DoRA", "", `{"lora_name":"d","lora_path":"` + dora + `"}`, "Failed to load d because LoRA serving currently doesn't support DoRA adapters"},
		{"no lora_alpha", "", `{"lora_name":"n","lora_path":"` + noAlpha + `"}`, "'lora_alpha'"},
		{"no adapter_config.json", "", `{"lora_name":"e","lora_path":"` + empty + `"}`, "[Errno 2] No such file or directory: '" + filepath.Join(empty, "adapter_config.json") + "'"},
		{"a pinned adapter past the slots", "", `{"lora_name":"p","lora_path":"` + good + `","pinned":true}`, ""},
		{"a second pinned one", "", `{"lora_name":"p2","lora_path":"` + good + `","pinned":true}`,
			"Failed to load LoRA adapter p2 as a pinned adapter. It is not allowed to pin all slots in the LoRA memory pool to avoid starvation for unpinned adapters and base models. " +
				"Please increase your `--max-loras-per-batch` or load it as unpinned LoRA adapters."},
	} {
		w := ts.post("/load_lora_adapter", "application/json", c.body)
		got := decodeJSON[sglangAnswer](t, w.Body.Bytes())
		if c.msg == "" {
			if w.Code != http.StatusOK || !got.Success {
				t.Errorf("%s: %d %s, want 200", c.name, w.Code, w.Body)
			}
			continue
		}
		if w.Code != http.StatusBadRequest || got.Success || got.ErrorMessage == nil || *got.ErrorMessage != c.msg || got.LoadedAdapters["sql"] != good {
			t.Errorf("%s: %d %s, want 400 with %q", c.name, w.Code, w.Body, c.msg)
		}
	}
	w := ts.post("/unload_lora_adapter", "application/json", `{"lora_name":"gone"}`)
	if want := `{"rid":null,"http_worker_ipc":null,"success":false,"error_message":"LoRA with name gone does not exist. Loaded LoRAs: odict_keys(['sql', 'p'])","loaded_adapters":null}`; w.Code != http.StatusBadRequest || strings.TrimSpace(w.Body.String()) != want {
		t.Errorf("unload of a name not loaded: %d %s", w.Code, w.Body)
	}

	// Without --enable-lora the routes are there and refuse.
	off := sglangServer(t)
	for _, p := range []string{"/load_lora_adapter", "/unload_lora_adapter"} {
		w := off.post(p, "application/json", `{"lora_name":"sql","lora_path":"`+good+`"}`)
		if want := `{"rid":null,"http_worker_ipc":null,"success":false,"error_message":"LoRA is not enabled. Please set ` + "`--enable-lora`" + ` to enable LoRA.","loaded_adapters":null}`; w.Code != http.StatusBadRequest || strings.TrimSpace(w.Body.String()) != want {
			t.Errorf("%s without --enable-lora: %d %s", p, w.Code, w.Body)
		}
	}
	// Plain data parallelism: an assertion no handler catches.
	dp := sglangServer(t, "--enable-lora", "--max-lora-rank", "8", "--lora-target-modules", "all", "--dp-size", "2")
	for _, p := range []string{"/load_lora_adapter", "/unload_lora_adapter"} {
		if w := dp.post(p, "application/json", `{"lora_name":"sql","lora_path":"`+good+`"}`); w.Code != http.StatusInternalServerError || w.Body.String() != "Internal Server Error" {
			t.Errorf("%s with --dp-size 2: %d %s", p, w.Code, w.Body)
		}
	}
	dpa := sglangServer(t, "--enable-lora", "--max-lora-rank", "8", "--lora-target-modules", "all", "--dp-size", "2", "--enable-dp-attention")
	if w := dpa.post("/load_lora_adapter", "application/json", `{"lora_name":"sql","lora_path":"`+good+`"}`); w.Code != http.StatusOK {
		t.Errorf("load with data-parallel attention: %d %s", w.Code, w.Body)
	}
}

// A body SGLang's FastAPI cannot read as LoadLoRAAdapterReqInput or
// UnloadLoRAAdapterReqInput is 400 with SGLang's ErrorResponse, its
// message pydantic's errors.
func TestSGLangLoRABadBodies(t *testing.T) {
	ts := sglangServer(t, "--enable-lora", "--max-lora-rank", "8", "--lora-target-modules", "all")
	for _, c := range []struct{ name, path, ct, body, msg string }{
		{"no lora_path", "/load_lora_adapter", "application/json", `{"lora_name":"a"}`,
			`[{'type': 'missing', 'loc': ('body', 'lora_path'), 'msg': 'Field required', 'input': {'lora_name': 'a'}}]`},
		{"no lora_name to unload", "/unload_lora_adapter", "application/json", `{}`,
			`[{'type': 'missing', 'loc': ('body', 'lora_name'), 'msg': 'Field required', 'input': {}}]`},
		{"a number for a name", "/load_lora_adapter", "application/json", `{"lora_name":1,"lora_path":"/a"}`,
			`[{'type': 'string_type', 'loc': ('body', 'lora_name'), 'msg': 'Input should be a valid string', 'input': 1}]`},
		{"pinned not a bool", "/load_lora_adapter", "application/json", `{"lora_name":"a","lora_path":"/a","pinned":"sure"}`,
			`[{'type': 'bool_parsing', 'loc': ('body', 'pinned'), 'msg': 'Input should be a valid boolean, unable to interpret input', 'input': 'sure'}]`},
		{"a list", "/load_lora_adapter", "application/json", `["a"]`,
			`[{'type': 'dict_type', 'loc': ('body',), 'msg': 'Input should be a valid dictionary', 'input': ['a']}]`},
		{"no body", "/load_lora_adapter", "application/json", ``,
			`[{'type': 'missing', 'loc': ('body',), 'msg': 'Field required', 'input': None}]`},
		{"text", "/unload_lora_adapter", "text/plain", `{"lora_name":"a"}`,
			`[{'type': 'dict_type', 'loc': ('body',), 'msg': 'Input should be a valid dictionary', 'input': b'{"lora_name":"a"}'}]`},
	} {
		w := ts.post(c.path, c.ct, c.body)
		want := `{"object":"error","message":` + jsonString(c.msg) + `,"type":"Bad Request","param":null,"code":400}`
		if w.Code != http.StatusBadRequest || strings.TrimSpace(w.Body.String()) != want {
			t.Errorf("%s: %d %s\nwant %s", c.name, w.Code, w.Body, want)
		}
	}
	// JSON without a content type is read as JSON; other keys are
	// ignored.
	if w := ts.post("/unload_lora_adapter", "", `{"lora_name":"a","lora_int_id":3}`); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "LoRA with name a does not exist") {
		t.Errorf("no content type: %d %s", w.Code, w.Body)
	}
}

// SGLang's start: --lora-paths in its three spellings, loaded before the
// server listens and listed; the checks of its LoRA flags; --max-loaded-
// loras unloads the oldest unpinned adapter when a load passes it.
func TestSGLangLoRAStart(t *testing.T) {
	sql, chat := peftDir(t), peftDir(t)
	cfg, err := Parse([]string{"--model-path", "m", "--lora-paths", `{"lora_name":"sql","lora_path":"` + sql + `","pinned":true}`, "chat=" + chat, sql}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	want := []Adapter{{Name: "sql", Path: sql, Pinned: true}, {Name: "chat", Path: chat}, {Name: sql, Path: sql}}
	if !slices.Equal(cfg.LoRAPaths, want) || !cfg.EnableLoRA || cfg.MaxLoRAs != 8 || cfg.MaxLoRARank != 0 {
		t.Fatalf("lora paths %+v, enable %v, per batch %d, rank %d", cfg.LoRAPaths, cfg.EnableLoRA, cfg.MaxLoRAs, cfg.MaxLoRARank)
	}
	if _, err := Parse([]string{"--model-path", "m", "--lora-paths", `{"lora_name":"sql"}`}, func(string) string { return "" }); err == nil ||
		!strings.Contains(err.Error(), "does not contain 'lora_name' and 'lora_path' keys") {
		t.Errorf("a JSON item without lora_path: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "gone")
	if err := os.Mkdir(missing, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ args, err string }{
		{"--enable-lora", "AssertionError: When no initial --lora-paths is provided, you need to specify both --max-lora-rank and --lora-target-modules for LoRA initialization."},
		{"--enable-lora --max-lora-rank 8", "AssertionError: When no initial --lora-paths is provided"},
		{"--enable-lora --max-lora-rank 8 --lora-target-modules all q_proj", "AssertionError: If 'all' is specified in --lora-target-modules, it should be the only module specified."},
		{"--enable-lora --max-lora-rank 8 --lora-target-modules all --max-loaded-loras 2", "AssertionError: max_loaded_loras should be greater than or equal to max_loras_per_batch. max_loaded_loras=2, max_loras_per_batch=8"},
		{"--max-loras-per-batch 1 --max-loaded-loras 1 --lora-paths a=" + sql + " b=" + chat, "AssertionError: The number of LoRA paths should not exceed max_loaded_loras. max_loaded_loras=1, lora_paths=2"},
		{"--lora-paths a=" + sql + " a=" + chat, "RuntimeError: Failed to load LoRA adapter a: Failed to load LoRA adapter a because it is already loaded"},
		{"--lora-paths a=" + missing, "RuntimeError: Failed to load LoRA adapter a: [Errno 2] No such file or directory: '" + filepath.Join(missing, "adapter_config.json") + "'"},
		{"--lora-target-modules o_proj --lora-paths a=" + sql, "ValueError: LoRA adapter 'a' contains target modules ['qkv_proj'] that are not included in the specified --lora-target-modules ['o_proj']."},
		{"--enable-lora --max-lora-rank 8 --lora-target-modules all", ""},
		{"--lora-paths a=" + sql, ""},
	} {
		cfg, err := Parse(append([]string{"--model-path", "m"}, strings.Fields(c.args)...), func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		err = LoadAdapters(cfg)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.args, err)
		case c.err != "" && (err == nil || !strings.HasPrefix(err.Error(), c.err)):
			t.Errorf("%s: %v, want %q", c.args, err, c.err)
		}
	}

	// Started with sql and chat, at most two loaded: a third load
	// unloads sql, the oldest unpinned.
	extra := peftDir(t)
	ts := sglangServer(t, "--max-loras-per-batch", "2", "--max-loaded-loras", "2", "--lora-paths",
		`{"lora_name":"sql","lora_path":"`+sql+`","pinned":false}`, "chat="+chat)
	if got := ts.cards(t); !slices.Equal(got, []string{"sql=" + sql, "chat=" + chat}) {
		t.Fatalf("cards at start %q", got)
	}
	w := ts.post("/load_lora_adapter", "application/json", `{"lora_name":"extra","lora_path":"`+extra+`"}`)
	if got := decodeJSON[sglangAnswer](t, w.Body.Bytes()); w.Code != http.StatusOK || len(got.LoadedAdapters) != 2 || got.LoadedAdapters["sql"] != "" {
		t.Fatalf("a load past --max-loaded-loras: %d %s", w.Code, w.Body)
	}
	if got := ts.cards(t); !slices.Equal(got, []string{"chat=" + chat, "extra=" + extra}) {
		t.Errorf("cards after it %q", got)
	}
	// Without --enable-lora (and no --lora-paths) /v1/models lists no
	// adapter.
	if got := sglangServer(t).cards(t); len(got) != 0 {
		t.Errorf("cards without LoRA %q", got)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
