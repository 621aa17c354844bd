package fakeengine

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// peftDir makes a directory that holds what vLLM's loader wants of a
// LoRA adapter of rank 8 (WritePEFTAdapter).
func peftDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := WritePEFTAdapter(dir, 8); err != nil {
		t.Fatal(err)
	}
	return dir
}

// vLLM's adapters: parsed in both spellings, listed in /v1/models after
// the base model with their path and parent, and served by name.
func TestVLLMAdapters(t *testing.T) {
	sql, chat := peftDir(t), peftDir(t)
	cfg, err := Parse([]string{"serve", "org/m", "--served-model-name", "base", "--enable-lora", "--lora-modules",
		`{"name":"sql","path":"` + sql + `"}`, "chat=" + chat}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if want := []Adapter{{Name: "sql", Path: sql}, {Name: "chat", Path: chat}}; !slices.Equal(cfg.LoRAModules, want) || !cfg.EnableLoRA || len(cfg.Ignored) != 0 {
		t.Fatalf("modules %+v, enable %v, ignored %q", cfg.LoRAModules, cfg.EnableLoRA, cfg.Ignored)
	}
	if err := LoadAdapters(cfg); err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, func(c *Config) { *c = cfg; c.TokensPerSecond = 0 })
	w := ts.do(http.MethodGet, "/v1/models", "")
	list := decodeJSON[struct {
		Data []struct {
			ID     string  `json:"id"`
			Root   string  `json:"root"`
			Parent *string `json:"parent"`
		} `json:"data"`
	}](t, w.Body.Bytes())
	if len(list.Data) != 3 || list.Data[0].ID != "base" || list.Data[0].Parent != nil ||
		list.Data[1].ID != "sql" || list.Data[1].Root != sql || list.Data[1].Parent == nil || *list.Data[1].Parent != "base" ||
		list.Data[2].ID != "chat" || list.Data[2].Root != chat {
		t.Errorf("/v1/models: %s", w.Body)
	}
	if w := ts.do(http.MethodPost, "/v1/completions", `{"model":"sql","prompt":"hi","max_tokens":2}`); w.Code != http.StatusOK {
		t.Errorf("a request for the adapter: %d %s", w.Code, w.Body)
	}
	if w := ts.do(http.MethodPost, "/v1/completions", `{"model":"nope","prompt":"hi","max_tokens":2}`); w.Code != http.StatusNotFound {
		t.Errorf("a request for no adapter: %d %s", w.Code, w.Body)
	}
	if w := ts.do(http.MethodGet, "/lora-adapters", ""); w.Code != http.StatusNotFound {
		t.Errorf("vLLM has no /lora-adapters: %d", w.Code)
	}
}

// What vLLM and llama.cpp refuse of their adapters at start, they say and
// exit 1 before listening.
func TestRunRefusesBadAdapters(t *testing.T) {
	good := peftDir(t)
	rank16 := t.TempDir()
	if err := WritePEFTAdapter(rank16, 16); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	lora := filepath.Join(t.TempDir(), "a.gguf")
	if err := os.WriteFile(lora, []byte("GGUF"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ args, want string }{
		// vLLM's sanitize_message writes a path under /tmp as <path>.
		{"serve m --enable-lora --lora-modules a=" + missing, "ValueError: Loading lora a failed: No adapter found for <path>\n"},
		{"serve m --enable-lora --max-lora-rank 8 --lora-modules a=" + rank16, "ValueError: Call to add_lora method failed: LoRA rank 16 is greater than max_lora_rank 8.\n"},
		{"serve m --lora-modules a=" + good, "ValueError: Call to add_lora method failed: LoRA is not enabled. Use --enable-lora to enable LoRA.\n"},
		{"serve m --enable-lora --lora-modules a=" + good + " a=" + good, "ValueError: The lora adapter 'a' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.\n"},
		{"-m m.gguf --lora " + lora + "," + missing, "llama_adapter_lora_init: failed to apply lora adapter: failed to load lora adapter file from " + missing + "\ncommon_init_: failed to load lora adapter '" + missing + "'\n"},
		{"serve m --lora-modules {x", "fake-engine: usage: --lora-modules {x: want {\"name\": …, \"path\": …}\nRun 'fake-engine --help' for usage.\n"},
	} {
		var stdout, stderr syncBuffer
		code := Run(t.Context(), Options{Args: strings.Fields(c.args), Stdout: &stdout, Stderr: &stderr, Listener: newChanListener()})
		if code == ExitOK || stderr.String() != c.want || stdout.String() != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %q", c.args, code, stdout.String(), stderr.String(), c.want)
		}
	}
}

// llama.cpp's adapters: listed by GET /lora-adapters with their ids.
func TestLlamaCppAdapters(t *testing.T) {
	cfg, err := Parse([]string{"-m", "m.gguf", "--lora", "/a.gguf,/b.gguf", "--lora-init-without-apply"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, func(c *Config) { *c = cfg; c.TokensPerSecond = 0 })
	w := ts.do(http.MethodGet, "/lora-adapters", "")
	want := `[{"id":0,"path":"/a.gguf","scale":1,"task_name":"","prompt_prefix":""},{"id":1,"path":"/b.gguf","scale":1,"task_name":"","prompt_prefix":""}]`
	if got := strings.TrimSpace(w.Body.String()); w.Code != http.StatusOK || got != want {
		t.Errorf("GET /lora-adapters: %d %s, want %s", w.Code, got, want)
	}
	w = ts.do(http.MethodGet, "/v1/models", "")
	if strings.Contains(w.Body.String(), "parent") {
		t.Errorf("llama.cpp's /v1/models lists adapters: %s", w.Body)
	}
}
