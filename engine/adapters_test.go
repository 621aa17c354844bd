package engine

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var twoAdapters = []Adapter{{Name: "sql", Path: "/srv/lora/sql.gguf", Rank: 8}, {Name: "chat", Path: "/srv/lora/chat.gguf", Rank: 24}}

func TestAdapterArgs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		engine string
		spec   AdapterSpec
		want   []string
	}{
		{LlamaCpp, AdapterSpec{Adapters: twoAdapters}, []string{"--lora", "/srv/lora/sql.gguf,/srv/lora/chat.gguf", "--lora-init-without-apply", "--cache-ram", "0"}},
		{LlamaCpp, AdapterSpec{Adapters: twoAdapters, Slots: 2}, []string{"--lora", "/srv/lora/sql.gguf,/srv/lora/chat.gguf", "--lora-init-without-apply", "--cache-ram", "0"}},
		{VLLM, AdapterSpec{Adapters: twoAdapters, Slots: 1}, []string{"--enable-lora", "--max-loras", "1", "--max-cpu-loras", "2", "--max-lora-rank", "32",
			"--lora-modules", `{"name":"sql","path":"/srv/lora/sql.gguf"}`, `{"name":"chat","path":"/srv/lora/chat.gguf"}`}},
		{VLLM, AdapterSpec{Adapters: []Adapter{{Name: "a", Path: "/p=q,r"}}}, []string{"--enable-lora", "--max-loras", "1", "--max-cpu-loras", "1",
			"--lora-modules", `{"name":"a","path":"/p=q,r"}`}},
		{VLLM, AdapterSpec{Adapters: []Adapter{{Name: "a", Path: "/a", Rank: 512}}}, []string{"--enable-lora", "--max-loras", "1", "--max-cpu-loras", "1", "--max-lora-rank", "512",
			"--lora-modules", `{"name":"a","path":"/a"}`}},
		{SGLang, AdapterSpec{Adapters: twoAdapters}, []string{"--enable-lora", "--max-loras-per-batch", "2", "--max-loaded-loras", "2", "--max-lora-rank", "24",
			"--lora-paths", `{"lora_name":"sql","lora_path":"/srv/lora/sql.gguf"}`, `{"lora_name":"chat","lora_path":"/srv/lora/chat.gguf"}`}},
		{TGI, AdapterSpec{}, nil},
	} {
		got, err := AdapterArgs(c.engine, c.spec)
		if err != nil {
			t.Errorf("%s %+v: %v", c.engine, c.spec, err)
			continue
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s %+v (-want +got):\n%s", c.engine, c.spec, diff)
		}
	}
}

// What the recipes render for adapters, the engine's own parser takes (at
// the pinned version's contract): the flags exist, take these values, and
// do not clash with the recipe's own.
func TestAdapterArgsPassTheContract(t *testing.T) {
	t.Parallel()
	for _, e := range []string{LlamaCpp, VLLM, SGLang} {
		args, err := AdapterArgs(e, AdapterSpec{Adapters: twoAdapters, Slots: 2})
		if err != nil {
			t.Fatal(err)
		}
		in := Input{Engine: e, Executable: e, Model: "/models/base", Host: "127.0.0.1", Port: 8000,
			Layout: Layout{Tensor: 1}, GPUs: 1, ServedName: "base", Args: args}
		if err := CheckContract(in); err != nil {
			t.Errorf("%s: %v", e, err)
		}
		if err := CheckAdapterArgs(e, nil); err != nil {
			t.Errorf("%s: no args: %v", e, err)
		}
	}
}

func TestAdapterArgsRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		engine string
		spec   AdapterSpec
		want   string
	}{
		{TGI, AdapterSpec{Adapters: twoAdapters}, `engine "tgi" serves no LoRA adapters through llmgw (llamacpp, sglang, vllm do)`},
		{"nope", AdapterSpec{Adapters: twoAdapters}, "unknown engine"},
		{LlamaCpp, AdapterSpec{Adapters: twoAdapters, Slots: 1}, `max_adapters: 1, but engine "llamacpp" loads all 2 adapters at start`},
		{LlamaCpp, AdapterSpec{Adapters: []Adapter{{Name: "a", Path: "/a,b.gguf"}}}, `adapter "a": path "/a,b.gguf" holds a comma`},
		{VLLM, AdapterSpec{Adapters: []Adapter{{Name: "a", Path: "/a", Rank: 513}}}, "rank 513 is above vLLM's largest --max-lora-rank, 512"},
		{VLLM, AdapterSpec{Adapters: []Adapter{{Name: "a b", Path: "/a"}}}, `adapter "a b": the name must be a plain word`},
		{VLLM, AdapterSpec{Adapters: []Adapter{{Name: "-a", Path: "/a"}}}, `adapter "-a": the name must be a plain word`},
		{VLLM, AdapterSpec{Adapters: []Adapter{{Name: "a", Path: "/a"}, {Name: "a", Path: "/b"}}}, `adapter "a": given twice`},
		{VLLM, AdapterSpec{Adapters: []Adapter{{Name: "a", Path: "rel/a"}}}, `adapter "a": path "rel/a" is not an absolute path`},
		{VLLM, AdapterSpec{Adapters: twoAdapters, Slots: -1}, "max_adapters: -1"},
	} {
		_, err := AdapterArgs(c.engine, c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %+v: %v, want %q", c.engine, c.spec, err, c.want)
		}
	}
}

// A profile's args may not set the adapter flags llmgw renders, in any of
// the spellings the engine reads.
func TestCheckAdapterArgs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		engine string
		args   []string
		want   string // "" for none
	}{
		{LlamaCpp, []string{"-c", "2048"}, ""},
		{LlamaCpp, []string{"--lora", "/x.gguf"}, "--lora is llmgw's to set"},
		{LlamaCpp, []string{"-cram", "1024"}, "--cache-ram is llmgw's to set"},
		{LlamaCpp, []string{"--cache_ram", "1024"}, "--cache-ram is llmgw's to set"},
		{VLLM, []string{"--max_loras", "4"}, "--max-loras is llmgw's to set"},
		{VLLM, []string{"--enable-lora"}, "--enable-lora is llmgw's to set"},
		{VLLM, []string{"--no-enable-lora"}, "--enable-lora is llmgw's to set"},
		{SGLang, []string{"--lora-paths", "a=/b"}, "--lora-paths is llmgw's to set"},
		{TGI, []string{"--lora-adapters", "a"}, ""},
	} {
		err := CheckAdapterArgs(c.engine, c.args)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s %q: %v, want %q", c.engine, c.args, err, c.want)
		}
	}
}

// Every rank vLLM's --max-lora-rank takes is rendered as itself.
func TestVLLMRanks(t *testing.T) {
	t.Parallel()
	for _, r := range VLLMMaxLoRARanks {
		args, err := AdapterArgs(VLLM, AdapterSpec{Adapters: []Adapter{{Name: "a", Path: "/a", Rank: r}}})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.Index(args, "--max-lora-rank")
		if i < 0 || args[i+1] != strconv.Itoa(r) {
			t.Errorf("rank %d: %q", r, args)
		}
	}
}

// What each engine lists of the adapters it serves, read as the
// controller reads it; a bad answer is an error naming the path.
func TestParseLoadedAdapters(t *testing.T) {
	t.Parallel()
	llama := registry[LlamaCpp].Adapters.Listed
	got, err := llama.ParseLoadedAdapters([]byte(`[{"id":0,"path":"/srv/lora/sql.gguf","scale":1.0,"task_name":"","prompt_prefix":""},{"id":1,"path":"/srv/lora/chat.gguf","scale":0.0,"task_name":"","prompt_prefix":""}]`))
	want := []LoadedAdapter{{ID: 0, Path: "/srv/lora/sql.gguf", Scale: 1}, {ID: 1, Path: "/srv/lora/chat.gguf"}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("llama.cpp: %+v, %v; want %+v", got, err, want)
	}
	if got, err := llama.ParseLoadedAdapters([]byte(`[]`)); err != nil || len(got) != 0 {
		t.Errorf("llama.cpp, none: %+v, %v", got, err)
	}
	for _, bad := range []string{`{"id":0}`, `[{"path":"/a","scale":1}]`, `[{"id":0,"scale":1}]`, `[{"id":0,"path":"/a"}]`, `<html>`} {
		if _, err := llama.ParseLoadedAdapters([]byte(bad)); err == nil || !strings.HasPrefix(err.Error(), "GET /lora-adapters: ") {
			t.Errorf("llama.cpp %s: %v", bad, err)
		}
	}
	vllm := registry[VLLM].Adapters.Listed
	got, err = vllm.ParseLoadedAdapters([]byte(`{"object":"list","data":[
		{"id":"base","object":"model","root":"/models/base","parent":null,"max_model_len":4096},
		{"id":"sql","object":"model","root":"/srv/lora/sql","parent":"base"}]}`))
	want = []LoadedAdapter{{Name: "sql", Path: "/srv/lora/sql", ID: -1}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("vllm: %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []string{`[]`, `{"object":"list"}`, `{"data":{}}`} {
		if _, err := vllm.ParseLoadedAdapters([]byte(bad)); err == nil || !strings.HasPrefix(err.Error(), "GET /v1/models: ") {
			t.Errorf("vllm %s: %v", bad, err)
		}
	}
	// SGLang's cards have vLLM's shape (TestParseModelCards).
	if registry[SGLang].Adapters.Listed.Path != "/v1/models" {
		t.Error("sglang: no /v1/models listing")
	}
}
