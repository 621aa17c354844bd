package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/llmgw/llmgw/engine/contract"
)

// Adapter is one LoRA adapter of a replica's base model, as the recipe
// renders it.
type Adapter struct {
	// Name is what requests name the adapter by (vLLM's and SGLang's model
	// name for it; llama.cpp knows adapters only by their index, the order
	// they are given in).
	Name string
	// Path is the adapter on the node: a GGUF file for llama.cpp, a PEFT
	// directory (adapter_config.json and the weights) for vLLM and SGLang.
	Path string
	// Rank is the adapter's LoRA rank where the catalog says it; 0 unknown.
	Rank int
}

// AdapterSpec is what a replica serves of LoRA adapters.
type AdapterSpec struct {
	Adapters []Adapter
	// Slots is how many adapters the replica holds on its GPUs at once
	// (vLLM's --max-loras, SGLang's --max-loras-per-batch); 0: as many as
	// there are adapters. llama.cpp has no such bound: it loads every
	// adapter at start, so Slots below the adapters' count is refused.
	Slots int
}

// AdapterRule is how an engine serves LoRA adapters given at start.
type AdapterRule struct {
	// Flags are every flag Args renders: a profile whose args set one of
	// them alongside the catalog's adapters is refused.
	Flags []string
	// LoadsAll: the engine loads every adapter at start and has no slot
	// bound below that.
	LoadsAll bool
	// args renders the flags for a checked spec.
	args func(s AdapterSpec) ([]string, error)
	// Why cites where the flags were read.
	Why string
	// Listed, where set, is how the engine says which adapters it
	// serves: what the controller reads to verify them.
	Listed *AdapterListing
	// Runtime, where set, is the engine's API for loading adapters while
	// it runs (adapters_runtime.go): PlanAdapters says when llmgw uses it.
	Runtime *AdapterRuntime
}

// AdapterListing is an engine's list of the adapters it serves.
type AdapterListing struct {
	// Path is the GET path that lists them.
	Path string
	// parse reads Path's answer.
	parse func(body []byte) ([]LoadedAdapter, error)
	// Why cites where the answer's shape was read.
	Why string
}

// LoadedAdapter is one adapter an engine says it serves.
type LoadedAdapter struct {
	// Name is the adapter's name where the engine names adapters (vLLM's
	// model id for it); "" for llama.cpp, which knows them by ID.
	Name string
	// Path is where the engine loaded it from.
	Path string
	// ID is llama.cpp's index of the adapter (the "id" a request's
	// "lora" list names); -1 where the engine has none.
	ID int
	// Scale is llama.cpp's global scale of the adapter; 0 elsewhere.
	Scale float64
}

// ParseLoadedAdapters reads an answer of the listing's path.
func (l *AdapterListing) ParseLoadedAdapters(body []byte) ([]LoadedAdapter, error) {
	out, err := l.parse(body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", l.Path, err)
	}
	return out, nil
}

// parseLlamaCppLoraAdapters reads llama-server's GET /lora-adapters: a
// JSON array of {"id", "path", "scale", "task_name", "prompt_prefix"}
// (tools/server/server-task.cpp, server_task_result_get_lora::to_json at
// 80fb11a), one per adapter it loaded at start, id its index.
func parseLlamaCppLoraAdapters(body []byte) ([]LoadedAdapter, error) {
	var list []struct {
		ID    *int     `json:"id"`
		Path  string   `json:"path"`
		Scale *float64 `json:"scale"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, err
	}
	out := make([]LoadedAdapter, 0, len(list))
	for i, e := range list {
		if e.ID == nil || e.Path == "" || e.Scale == nil {
			return nil, fmt.Errorf("entry %d: want an id, a path and a scale", i)
		}
		out = append(out, LoadedAdapter{ID: *e.ID, Path: e.Path, Scale: *e.Scale})
	}
	return out, nil
}

// parseModelCards reads vLLM's and SGLang's GET /v1/models: the base
// model's card, then one card per LoRA adapter it holds, {"id": its name,
// "root": its path, "parent": the base model's name}.
//
//   - vLLM: vllm/entrypoints/openai/models/serving.py:149-165,
//     OpenAIServingModels.show_available_models, at the v0.28.0 merge-base
//     53e211d. vLLM lists an adapter once it loaded it: the --lora-modules
//     at start (init_static_loras, serving.py:124-139, which stops the
//     server on one that fails), or a runtime load (serving.py:167-219;
//     adapters_runtime.go).
//   - SGLang: python/sglang/srt/entrypoints/http_server.py:1846-1871 at
//     v0.5.18 (71de97b), available_models: one card per adapter of its
//     LoRA registry, "parent" the served name; the registry holds an
//     adapter once its load succeeded (tokenizer_control_mixin.py:597-673:
//     --lora-paths at start, or /load_lora_adapter).
func parseModelCards(body []byte) ([]LoadedAdapter, error) {
	var list struct {
		Data *[]struct {
			ID     string  `json:"id"`
			Root   string  `json:"root"`
			Parent *string `json:"parent"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, err
	}
	if list.Data == nil {
		return nil, errors.New(`no "data" list`)
	}
	var out []LoadedAdapter
	for _, c := range *list.Data {
		if c.Parent == nil || *c.Parent == "" {
			continue // a base model
		}
		out = append(out, LoadedAdapter{Name: c.ID, Path: c.Root, ID: -1})
	}
	return out, nil
}

// MaxAdapters bounds the adapters of one model.
const MaxAdapters = 4096

// AdapterArgs returns the flags that make engine serve s's adapters, or
// an error naming the adapter or the field at fault: an engine that
// serves no adapters through llmgw, a bad name or path, slots below what
// the engine needs.
func AdapterArgs(engine string, s AdapterSpec) ([]string, error) {
	d, ok := registry[engine]
	if !ok {
		return nil, fmt.Errorf("engine: %w", Unknown(engine))
	}
	if len(s.Adapters) == 0 {
		return nil, nil
	}
	r := d.Adapters
	if r == nil {
		return nil, fmt.Errorf("adapters: engine %q serves no LoRA adapters through llmgw (%s do)", engine, strings.Join(adapterEngines(), ", "))
	}
	if len(s.Adapters) > MaxAdapters {
		return nil, fmt.Errorf("adapters: %d, at most %d", len(s.Adapters), MaxAdapters)
	}
	if s.Slots < 0 || s.Slots > MaxAdapters {
		return nil, fmt.Errorf("max_adapters: %d, want 1 to %d", s.Slots, MaxAdapters)
	}
	if r.LoadsAll && s.Slots > 0 && s.Slots < len(s.Adapters) {
		return nil, fmt.Errorf("max_adapters: %d, but engine %q loads all %d adapters at start (%s): raise max_adapters to %d, or serve fewer adapters",
			s.Slots, engine, len(s.Adapters), r.Why, len(s.Adapters))
	}
	seen := map[string]bool{}
	for _, a := range s.Adapters {
		switch {
		case a.Name == "" || strings.ContainsAny(a.Name, "\x00\n\r\t =,{}\"'") || strings.HasPrefix(a.Name, "-"):
			return nil, fmt.Errorf("adapter %q: the name must be a plain word (no spaces, '=', ',', quotes or braces, not starting with '-')", a.Name)
		case seen[a.Name]:
			return nil, fmt.Errorf("adapter %q: given twice", a.Name)
		case !strings.HasPrefix(a.Path, "/") || strings.ContainsAny(a.Path, "\x00\n\r"):
			return nil, fmt.Errorf("adapter %q: path %q is not an absolute path on the node", a.Name, a.Path)
		case a.Rank < 0:
			return nil, fmt.Errorf("adapter %q: rank %d is negative", a.Name, a.Rank)
		}
		seen[a.Name] = true
	}
	return r.args(s)
}

// adapterEngines lists the engines that serve adapters.
func adapterEngines() []string {
	var out []string
	for _, name := range Engines() {
		if registry[name].Adapters != nil {
			out = append(out, name)
		}
	}
	return out
}

func slotsOf(s AdapterSpec) int {
	if s.Slots > 0 {
		return s.Slots
	}
	return len(s.Adapters)
}

func maxRank(s AdapterSpec) int {
	r := 0
	for _, a := range s.Adapters {
		r = max(r, a.Rank)
	}
	return r
}

// llamaCppAdapters: `--lora A,B --lora-init-without-apply --cache-ram 0`.
//
//   - One --lora with the paths comma-separated (common/arg.cpp:2982-2990
//     at 80fb11a splits it with parse_csv_row): a repeated --lora works but
//     logs "DEPRECATED: argument '--lora' specified multiple times ... (only
//     last value will be used)" (arg.cpp:826-831). So no path may hold a
//     comma.
//   - --lora-init-without-apply, so that a request the gateway sends
//     without its own "lora" list is not answered by every adapter at
//     once. It is not enough alone: at 80fb11a it only skips applying the
//     adapters to the context at start (common/common.cpp:1507); the global
//     scales stay 1, and a request without a "lora" field gets every
//     adapter (TestLoraAdaptersAnswerPerRequest). Requests must always name
//     their adapters, the base model's with every scale 0.
//   - --cache-ram 0: the host-memory prompt cache keeps prompts by their
//     tokens alone and gives a slot a prompt computed under another
//     adapter, whose answer is then wrong (llama.cpp issue 26207;
//     server_prompt_cache::load, tools/server/server-task.cpp, and
//     get_available_slot, server-context.cpp;
//     TestLoraPromptCacheAcrossAdapters saw it). A slot
//     itself clears its cache when a request's adapters differ from its
//     last (launch_slot_with_task, lora_should_clear_cache), so a prefix
//     reused within a slot was computed under the same adapters. The cost:
//     no prompt cache beyond the slots' own (a prompt a slot no longer
//     holds is computed again). The other safe choice, "cache_prompt":
//     false per request, would reuse nothing at all.
func llamaCppAdapters(s AdapterSpec) ([]string, error) {
	paths := make([]string, len(s.Adapters))
	for i, a := range s.Adapters {
		if strings.Contains(a.Path, ",") {
			return nil, fmt.Errorf("adapter %q: path %q holds a comma, which llama.cpp's --lora reads as a separator", a.Name, a.Path)
		}
		paths[i] = a.Path
	}
	return []string{"--lora", strings.Join(paths, ","), "--lora-init-without-apply", "--cache-ram", "0"}, nil
}

// VLLMMaxLoRARanks are the values vLLM's --max-lora-rank takes (a Literal
// in vllm/config/lora.py, MaxLoRARanks; argparse refuses any other as an
// invalid choice).
var VLLMMaxLoRARanks = []int{1, 8, 16, 32, 64, 128, 256, 320, 512}

// vllmAdapters: `--enable-lora --max-loras N --max-cpu-loras M
// --lora-modules {"name":…,"path":…} … [--max-lora-rank R]`.
//
//   - --enable-lora, --max-loras, --max-lora-rank, --max-cpu-loras
//     (vllm/engine/arg_utils.py:1409, 1414, 1415, 1424 at the v0.28.0 merge-base
//     53e211d, engine/contract/vllm.txt; the fields in vllm/config/lora.py:
//     max_loras ≥ 1, "Max number of LoRAs in a single batch"; max_cpu_loras
//     ≥ max_loras, the adapters kept in CPU memory; max_lora_rank one of
//     MaxLoRARanks, default 16).
//   - --lora-modules (vllm/entrypoints/openai/cli_args.py:75,
//     LoRAParserAction): "name=path" splits on every '=' and takes a JSON
//     object when the item holds a comma, so the recipe always gives JSON,
//     which holds any path.
//   - The rank: the smallest of MaxLoRARanks at or above every adapter's
//     rank, when the catalog gives ranks; else vLLM's default (16).
//   - --max-cpu-loras: every adapter, so that one evicted from the GPU's
//     slots is loaded again from memory, not from disk.
func vllmAdapters(s AdapterSpec) ([]string, error) {
	slots := slotsOf(s)
	args := []string{"--enable-lora", "--max-loras", strconv.Itoa(slots), "--max-cpu-loras", strconv.Itoa(max(slots, len(s.Adapters)))}
	if r := maxRank(s); r > 0 {
		i := slices.IndexFunc(VLLMMaxLoRARanks, func(v int) bool { return v >= r })
		if i < 0 {
			return nil, fmt.Errorf("adapters: rank %d is above vLLM's largest --max-lora-rank, %d (vllm/config/lora.py MaxLoRARanks)", r, VLLMMaxLoRARanks[len(VLLMMaxLoRARanks)-1])
		}
		args = append(args, "--max-lora-rank", strconv.Itoa(VLLMMaxLoRARanks[i]))
	}
	args = append(args, "--lora-modules")
	for _, a := range s.Adapters {
		b, err := json.Marshal(struct {
			Name string `json:"name"`
			Path string `json:"path"`
		}{a.Name, a.Path})
		if err != nil {
			return nil, err
		}
		args = append(args, string(b))
	}
	return args, nil
}

// sglangAdapters: `--enable-lora --max-loras-per-batch N --max-loaded-loras
// M --lora-paths {"lora_name":…,"lora_path":…} … [--max-lora-rank R]`.
//
//   - The flags at v0.5.18 (python/sglang/srt/server_args.py:2879-2917,
//     engine/contract/sglang.txt): --enable-lora, --max-lora-rank (any
//     int), --lora-paths (zero or more), --max-loaded-loras,
//     --max-loras-per-batch.
//   - --lora-paths items: LoRAPathAction
//     (python/sglang/srt/arg_groups/argparse_actions.py:8-25 at v0.5.18)
//     takes an item that starts with '{' and ends with '}' as JSON with
//     lora_name and lora_path, else a "name=path" string; the recipe gives
//     JSON.
func sglangAdapters(s AdapterSpec) ([]string, error) {
	slots := slotsOf(s)
	args := []string{"--enable-lora", "--max-loras-per-batch", strconv.Itoa(slots), "--max-loaded-loras", strconv.Itoa(max(slots, len(s.Adapters)))}
	if r := maxRank(s); r > 0 {
		args = append(args, "--max-lora-rank", strconv.Itoa(r))
	}
	args = append(args, "--lora-paths")
	for _, a := range s.Adapters {
		b, err := json.Marshal(struct {
			Name string `json:"lora_name"`
			Path string `json:"lora_path"`
		}{a.Name, a.Path})
		if err != nil {
			return nil, err
		}
		args = append(args, string(b))
	}
	return args, nil
}

// CheckAdapterArgs refuses args that set one of engine's adapter flags
// alongside adapters the catalog gives: llmgw renders those flags from
// the catalog.
func CheckAdapterArgs(engine string, args []string) error {
	d, ok := registry[engine]
	if !ok || d.Adapters == nil {
		return nil
	}
	// The pinned contract resolves the spellings the descriptor does not
	// list (llama.cpp's -cram for --cache-ram).
	c, _ := contract.Load(engine)
	given := map[string]bool{}
	for _, a := range args {
		if !isFlagToken(a) {
			continue
		}
		name := d.canon(a)
		if c != nil {
			if f := c.Flag(name); f != nil {
				name = f.Name
			}
		}
		given[name] = true
	}
	for _, f := range d.Adapters.Flags {
		if given[f] {
			return fmt.Errorf("args: %s is llmgw's to set when the model lists adapters (it renders %s from them)", f, strings.Join(d.Adapters.Flags, ", "))
		}
	}
	return nil
}
