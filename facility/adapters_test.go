package facility

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmgw/llmgw/weightsapi"
)

// adapterCatalog is a catalog of model "m" (engine e) with the lines given
// before its profile, and a second model "other".
func adapterCatalog(engine, lines string) string {
	return "model \"m\" {\n  source = \"/models/m.gguf\"\n" + lines +
		"  profile \"p\" {\n    engine = \"" + engine + "\"\n    gpu    = \"H\"\n  }\n}\n" +
		"model \"other\" {\n  source = \"org/other\"\n  profile \"p\" {\n    engine = \"vllm\"\n    gpu = \"H\"\n  }\n}\n"
}

func TestParseCatalogAdapters(t *testing.T) {
	t.Parallel()
	// SGLang with two HTTP workers gets its adapters at start (with one,
	// at runtime, as vLLM's: TestRuntimeAdaptersFingerprint).
	src := strings.Replace(adapterCatalog("sglang", "  max_adapters = 2\n  adapter \"sql\" {\n    path = \"/srv/lora/sql\"\n    rank = 24\n  }\n  adapter \"chat\" {\n    path = \"/srv/lora/chat\"\n    scale = 0.5\n  }\n"),
		`engine = "sglang"`, `engine = "sglang"`+"\n    args = [\"--tokenizer-worker-num\", \"2\"]", 1)
	cat, err := ParseCatalog("c.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	m := cat.Models[0]
	want := []Adapter{
		{Name: "sql", Weights: weightsapi.Source{Path: "/srv/lora/sql"}, Scale: 1, Rank: 24, Pos: Pos{"c.hcl", 4}},
		{Name: "chat", Weights: weightsapi.Source{Path: "/srv/lora/chat"}, Scale: 0.5, Pos: Pos{"c.hcl", 8}},
	}
	if diff := cmp.Diff(want, m.Adapters); diff != "" {
		t.Errorf("adapters (-want +got):\n%s", diff)
	}
	if m.MaxAdapters != 2 {
		t.Errorf("max_adapters %d", m.MaxAdapters)
	}
	// The adapters are part of what the engine runs: another path, rank or
	// slot count is another fingerprint; a scale is not.
	fp := ProfileFingerprint(m, m.Profiles[0])
	for name, mod := range map[string]func(*Model){
		"path":         func(m *Model) { m.Adapters[0].Weights.Path = "/srv/lora/sql2" },
		"rank":         func(m *Model) { m.Adapters[0].Rank = 32 },
		"max_adapters": func(m *Model) { m.MaxAdapters = 1 },
		"one fewer":    func(m *Model) { m.Adapters = m.Adapters[:1] },
	} {
		c := m
		c.Adapters = append([]Adapter(nil), m.Adapters...)
		mod(&c)
		if ProfileFingerprint(c, c.Profiles[0]) == fp {
			t.Errorf("%s: the same fingerprint", name)
		}
	}
	c := m
	c.Adapters = append([]Adapter(nil), m.Adapters...)
	c.Adapters[1].Scale = 2
	if ProfileFingerprint(c, c.Profiles[0]) != fp {
		t.Error("scale: another fingerprint")
	}
	none := cat.Models[1]
	none.Adapters, none.MaxAdapters = nil, 0
	if ProfileFingerprint(none, none.Profiles[0]) != ProfileFingerprint(cat.Models[1], cat.Models[1].Profiles[0]) {
		t.Error("a model without adapters changed its fingerprint")
	}
}

func TestParseCatalogAdaptersErrors(t *testing.T) {
	t.Parallel()
	sql := "  adapter \"sql\" {\n    path = \"/srv/lora/sql.gguf\"\n  }\n"
	tests := []struct {
		name, engine, lines string
		want                []string
	}{
		{"duplicate", "vllm", sql + sql,
			[]string{`c.hcl:6: model "m": adapter "sql": the name is taken: adapter of model "m" at c.hcl:3`}},
		{"a model's name", "vllm", "  adapter \"other\" {\n    path = \"/a\"\n  }\n",
			[]string{`c.hcl:3: model "m": adapter "other": the name is taken: model "other" at c.hcl:11`}},
		{"its own model's name", "vllm", "  adapter \"m\" {\n    path = \"/a\"\n  }\n",
			[]string{`c.hcl:3: model "m": adapter "m": the name is taken: model "m" at c.hcl:1`}},
		{"a colon", "vllm", "  adapter \"m:sql\" {\n    path = \"/a\"\n  }\n",
			[]string{`c.hcl:3: model "m": adapter "m:sql": the name may not hold ':' (requests may name an adapter as model:adapter), quotes or braces, nor start with '-'`}},
		{"relative path", "vllm", "  adapter \"sql\" {\n    path = \"lora/sql\"\n  }\n",
			[]string{`c.hcl:3: model "m": adapter "sql": path: "lora/sql" is not a clean absolute path`}},
		{"a path twice", "vllm", sql + "  adapter \"chat\" {\n    path = \"/srv/lora/sql.gguf\"\n  }\n",
			[]string{`c.hcl:6: model "m": adapter "chat": path "/srv/lora/sql.gguf" is also adapter "sql"'s`}},
		{"no path", "vllm", "  adapter \"sql\" {\n  }\n",
			[]string{`c.hcl:3: model "m": adapter "sql": give path (the adapter already on every node) or a weights block (a hub repository, the adapter's source, or urls: what each node's store fetches and verifies)`}},
		{"an empty path", "vllm", "  adapter \"sql\" {\n    path = \"\"\n  }\n",
			[]string{`c.hcl:4: model "m": adapter "sql": path: give the adapter's clean absolute path on every node`}},
		{"a source without weights", "vllm", "  adapter \"sql\" {\n    path = \"/a\"\n    source = \"org/sql\"\n  }\n",
			[]string{`c.hcl:5: model "m": adapter "sql": source names a hub repository: add a weights block with its files (and revision), which each node's store fetches`}},
		{"path and weights", "vllm", "  adapter \"sql\" {\n    path = \"/a\"\n    weights {\n      urls = [\"https://h/sql.gguf\"]\n    }\n  }\n",
			[]string{`c.hcl:4: model "m": adapter "sql": path and a weights block are both given: give one (path: the adapter already on every node; weights: what each node's store fetches)`}},
		{"a hub repository without files", "vllm", "  adapter \"sql\" {\n    source = \"org/sql\"\n    weights {\n      revision = \"v1\"\n    }\n  }\n",
			[]string{`c.hcl:5: model "m": adapter "sql": weights: name the hub repository's files (files = ["adapter.gguf"] for llama.cpp; a PEFT adapter's, ["adapter_config.json", "adapter_model.safetensors"], for vLLM and SGLang)`}},
		{"hub files without a source", "vllm", "  adapter \"sql\" {\n    weights {\n      files = [\"sql.gguf\"]\n    }\n  }\n",
			[]string{`c.hcl:4: model "m": adapter "sql": weights: a hub repository's files need the adapter's source, the repository ("org/name"); or give urls or path`}},
		{"a bad repository", "vllm", "  adapter \"sql\" {\n    source = \"sql\"\n    weights {\n      files = [\"sql.gguf\"]\n    }\n  }\n",
			[]string{`c.hcl:4: model "m": adapter "sql": source: "sql" is not a repository id (org/name)`}},
		{"a source beside urls", "vllm", "  adapter \"sql\" {\n    source = \"org/sql\"\n    weights {\n      urls = [\"https://h/sql.gguf\"]\n    }\n  }\n",
			[]string{`c.hcl:4: model "m": adapter "sql": source is the hub repository of the weights block; with its urls or path, leave it out`}},
		{"a bad sha256", "vllm", "  adapter \"sql\" {\n    weights {\n      urls = [\"https://h/sql.gguf\"]\n      sha256 = { \"sql.gguf\" = \"00\" }\n    }\n  }\n",
			[]string{`c.hcl:6: model "m": adapter "sql": weights.sha256["sql.gguf"]: "00" is not a sha256 (64 lower-case hex digits)`}},
		{"bytes", "vllm", "  adapter \"sql\" {\n    weights {\n      urls = [\"https://h/sql.gguf\"]\n      bytes = 10\n    }\n  }\n",
			[]string{`c.hcl:6: model "m": adapter "sql": weights.bytes is only for a model's weights (the planner's estimate of their fetch); leave it out`}},
		{"a path that ends as a fetched adapter's link", "llamacpp", "  adapter \"sql\" {\n    weights {\n      urls = [\"https://h/sql.gguf\"]\n    }\n  }\n" +
			"  adapter \"chat\" {\n    path = \"/srv/llmgw-adapters/sql\"\n  }\n",
			[]string{`c.hcl:8: model "m": adapter "chat": path "/srv/llmgw-adapters/sql" ends as adapter "sql"'s link in the replicas' task directories (llmgw-adapters/sql): the engines' lists would not tell them apart`}},
		{"scale", "vllm", "  adapter \"sql\" {\n    path = \"/a\"\n    scale = 0\n  }\n",
			[]string{`c.hcl:5: model "m": adapter "sql": scale: want a number above 0 and at most 100, got 0`}},
		{"rank", "vllm", "  adapter \"sql\" {\n    path = \"/a\"\n    rank = 0\n  }\n",
			[]string{`c.hcl:5: model "m": adapter "sql": rank must be between 1 and 65536, got 0`}},
		{"max_adapters alone", "vllm", "  max_adapters = 2\n",
			[]string{`c.hcl:3: model "m": max_adapters without an adapter block`}},
		{"adapter_loading alone", "vllm", "  adapter_loading = \"start\"\n",
			[]string{`c.hcl:3: model "m": adapter_loading without an adapter block`}},
		{"adapter_loading", "vllm", "  adapter_loading = \"later\"\n  adapter \"sql\" {\n    path = \"/a\"\n  }\n",
			[]string{`c.hcl:3: model "m": adapter_loading: want "runtime" (the engine's runtime API, where it has one) or "start" (on the engine's command line), got "later"`}},
		{"more adapters than llama.cpp's slots", "llamacpp", "  max_adapters = 1\n" + sql + "  adapter \"chat\" {\n    path = \"/srv/lora/chat.gguf\"\n  }\n",
			[]string{`c.hcl:10: profile m/p: max_adapters: 1, but engine "llamacpp" loads all 2 adapters at start (--lora loads every adapter before the server listens; common/common.cpp:1342-1357 at 80fb11a): raise max_adapters to 2, or serve fewer adapters`}},
		{"an engine without adapters", "tgi", sql,
			[]string{`c.hcl:6: profile m/p: adapters: engine "tgi" serves no LoRA adapters through llmgw (llamacpp, sglang, vllm do)`}},
		{"a comma in a llama.cpp path", "llamacpp", "  adapter \"sql\" {\n    path = \"/a,b.gguf\"\n  }\n",
			[]string{`c.hcl:6: profile m/p: adapter "sql": path "/a,b.gguf" holds a comma, which llama.cpp's --lora reads as a separator`}},
		{"a rank vLLM cannot take", "vllm", "  adapter \"sql\" {\n    path = \"/a\"\n    rank = 1024\n  }\n",
			[]string{`c.hcl:7: profile m/p: adapters: rank 1024 is above vLLM's largest --max-lora-rank, 512 (vllm/config/lora.py MaxLoRARanks)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseCatalog("c.hcl", []byte(adapterCatalog(tt.engine, tt.lines)))
			if err == nil {
				t.Fatalf("got no error, want %q", tt.want)
			}
			checkErrorLines(t, "c.hcl", err)
			if diff := cmp.Diff(tt.want, strings.Split(err.Error(), "\n")); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}

// A profile's args may not set the adapter flags llmgw renders.
func TestParseCatalogAdapterArgs(t *testing.T) {
	t.Parallel()
	src := strings.Replace(adapterCatalog("llamacpp", "  adapter \"sql\" {\n    path = \"/a.gguf\"\n  }\n"),
		"    gpu    = \"H\"\n", "    gpu    = \"H\"\n    args = [\"-cram\", \"2048\"]\n", 1)
	_, err := ParseCatalog("c.hcl", []byte(src))
	want := `c.hcl:6: profile m/p: args: --cache-ram is llmgw's to set when the model lists adapters`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%v, want %q", err, want)
	}
}

// An adapter and another model's adapter of one name collide too.
func TestValidateAdaptersAcrossModels(t *testing.T) {
	t.Parallel()
	src := adapterCatalog("vllm", "  adapter \"sql\" {\n    path = \"/a\"\n  }\n")
	src = strings.Replace(src, "model \"other\" {\n  source = \"org/other\"\n", "model \"other\" {\n  source = \"org/other\"\n  adapter \"sql\" {\n    path = \"/b\"\n  }\n", 1)
	_, err := ParseCatalog("c.hcl", []byte(src))
	want := `c.hcl:13: model "other": adapter "sql": the name is taken: adapter of model "m" at c.hcl:3`
	if err == nil || err.Error() != want {
		t.Errorf("%v, want %q", err, want)
	}
}

// Validate checks a catalog built in code as the parser does.
func TestValidateAdapters(t *testing.T) {
	t.Parallel()
	base := func() Model {
		return Model{Name: "m", Source: "org/m", Replicas: 1, MaxSurge: 1, Priority: DefaultPriority, Pos: Pos{"c.hcl", 1},
			Profiles: []Profile{{Name: "p", Engine: "vllm", GPU: "H", GPUs: 1, Nodes: 1, Pos: Pos{"c.hcl", 2}}}}
	}
	for _, c := range []struct {
		name string
		mod  func(*Model)
		want string
	}{
		{"no source", func(m *Model) {
			m.Adapters = []Adapter{{Name: "a", Scale: 1, Pos: Pos{"c.hcl", 3}}}
		}, `c.hcl:3: model "m": adapter "a": give path (the adapter already on every node) or weights (a hub repository or urls, which each node's store fetches)`},
		{"a hub source without files", func(m *Model) {
			m.Adapters = []Adapter{{Name: "a", Scale: 1, Weights: weightsapi.Source{Hub: &weightsapi.Hub{Repo: "org/a"}}, Pos: Pos{"c.hcl", 3}}}
		}, `c.hcl:3: model "m": adapter "a": weights.hub.files: name at least one file or pattern (a GGUF file, or "*.safetensors" and the configs)`},
		{"a fetched adapter's name with a slash", func(m *Model) {
			m.Adapters = []Adapter{{Name: "org/a", Scale: 1, Weights: weightsapi.Source{URLs: []weightsapi.URL{{URL: "https://h/a.gguf"}}}, Pos: Pos{"c.hcl", 3}}}
		}, `c.hcl:3: model "m": adapter "org/a": the name of an adapter the nodes' stores fetch: "org/a" cannot name the adapter's link in the task directory (llmgw-adapters/NAME): not . or .., and no '/' or '\'`},
		{"a relative path", func(m *Model) {
			m.Adapters = []Adapter{{Name: "a", Scale: 1, Weights: weightsapi.Source{Path: "a"}, Pos: Pos{"c.hcl", 3}}}
		}, `c.hcl:3: model "m": adapter "a": path: "a" is not a clean absolute path`},
		{"max_adapters alone", func(m *Model) { m.MaxAdapters = 3 }, `c.hcl:1: model "m": max_adapters 3 without an adapter`},
		{"scale 0", func(m *Model) {
			m.Adapters = []Adapter{{Name: "a", Weights: weightsapi.Source{Path: "/a"}, Pos: Pos{"c.hcl", 3}}}
		}, `c.hcl:3: model "m": adapter "a": scale: want a number above 0 and at most 100, got 0`},
		{"an empty name", func(m *Model) {
			m.Adapters = []Adapter{{Weights: weightsapi.Source{Path: "/a"}, Scale: 1, Pos: Pos{"c.hcl", 3}}}
		}, `c.hcl:3: model "m": adapter "": adapter name: empty value`},
	} {
		m := base()
		c.mod(&m)
		err := Catalog{Models: []Model{m}}.Validate()
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	m := base()
	m.Adapters = []Adapter{{Name: "a", Weights: weightsapi.Source{Path: "/a"}, Scale: 1},
		{Name: "b", Weights: weightsapi.Source{Hub: &weightsapi.Hub{Repo: "org/b", Files: []string{"adapter_config.json", "*.safetensors"}}}, Scale: 1}}
	if err := (Catalog{Models: []Model{m}}).Validate(); err != nil {
		t.Errorf("good adapters: %v", err)
	}
}

// An adapter may name its source as a model's weights: a hub repository
// at a revision with its files, or URLs with their sha256, which each
// node's store fetches; or a path, in the weights block too. The engines
// load a fetched one from the driver's link in the task directory, which
// is how the gateways and the controller know it; its fingerprint follows
// the bytes its source names.
func TestParseCatalogFetchedAdapters(t *testing.T) {
	t.Parallel()
	sum := strings.Repeat("ab", 32)
	src := adapterCatalog("llamacpp", `  adapter "sql" {
    source = "org/sql-lora"
    weights {
      revision = "v1"
      files    = ["sql.gguf"]
    }
    rank = 8
  }
  adapter "chat" {
    weights {
      urls   = ["https://example.com/lora/chat.gguf"]
      sha256 = { "chat.gguf" = "`+sum+`" }
    }
  }
  adapter "kept" {
    weights {
      path = "/srv/lora/kept.gguf"
    }
  }
`)
	cat, err := ParseCatalog("c.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	m := cat.Models[0]
	want := []Adapter{
		{Name: "sql", Weights: weightsapi.Source{Hub: &weightsapi.Hub{Repo: "org/sql-lora", Revision: "v1", Files: []string{"sql.gguf"}}}, Scale: 1, Rank: 8, Pos: Pos{"c.hcl", 3}},
		{Name: "chat", Weights: weightsapi.Source{URLs: []weightsapi.URL{{URL: "https://example.com/lora/chat.gguf", SHA256: sum}}}, Scale: 1, Pos: Pos{"c.hcl", 11}},
		{Name: "kept", Weights: weightsapi.Source{Path: "/srv/lora/kept.gguf"}, Scale: 1, Pos: Pos{"c.hcl", 17}},
	}
	if diff := cmp.Diff(want, m.Adapters); diff != "" {
		t.Fatalf("adapters (-want +got):\n%s", diff)
	}
	for i, w := range []struct {
		fetched bool
		path    string
	}{{true, "llmgw-adapters/sql"}, {true, "llmgw-adapters/chat"}, {false, "/srv/lora/kept.gguf"}} {
		if a := m.Adapters[i]; a.Fetched() != w.fetched || a.EnginePath() != w.path {
			t.Errorf("%s: fetched %v, engine path %q; want %v, %q", a.Name, a.Fetched(), a.EnginePath(), w.fetched, w.path)
		}
	}
	spec := m.AdapterSpec()
	if p := spec.Adapters[0].Path; p != "/llmgw-adapters/sql" {
		t.Errorf("the recipe's check path of sql: %q", p)
	}
	// Another revision, file or sha256 is other bytes: another
	// fingerprint.
	fp := ProfileFingerprint(m, m.Profiles[0])
	for name, mod := range map[string]func(*Model){
		"revision": func(m *Model) {
			m.Adapters[0].Weights.Hub = &weightsapi.Hub{Repo: "org/sql-lora", Revision: "v2", Files: []string{"sql.gguf"}}
		},
		"files": func(m *Model) {
			m.Adapters[0].Weights.Hub = &weightsapi.Hub{Repo: "org/sql-lora", Revision: "v1", Files: []string{"sql2.gguf"}}
		},
		"sha256": func(m *Model) {
			m.Adapters[1].Weights.URLs = []weightsapi.URL{{URL: "https://example.com/lora/chat.gguf", SHA256: strings.Repeat("cd", 32)}}
		},
	} {
		c := m
		c.Adapters = append([]Adapter(nil), m.Adapters...)
		mod(&c)
		if ProfileFingerprint(c, c.Profiles[0]) == fp {
			t.Errorf("%s: the same fingerprint", name)
		}
	}
}
