package engine

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/llmgw/llmgw/engine/contract"
)

// Adapters loaded into a running engine. An engine with a runtime adapter
// API (AdapterRule.Runtime) starts with its adapter slots and no adapter
// named, and llmgw's controller loads the catalog's adapters into each
// replica through the API, and unloads those the catalog no longer lists.
// A change of the adapters then changes nothing of the replica's job, so
// Nomad restarts nothing. PlanAdapters says which way a replica goes.
//
// vLLM's contract, read at the v0.28.0 merge-base 53e211d (see vllm.go;
// docs/engines/vllm.md, "Runtime LoRA adapters"):
//
//   - The routes exist only when the server starts with
//     VLLM_ALLOW_RUNTIME_LORA_UPDATING set to "1" or "true" in any case
//     (vllm/envs.py:1186-1189; vllm/entrypoints/serve/lora/api_router.py:
//     26-33 attaches none without it, so the paths are FastAPI's 404
//     {"detail": "Not Found"}).
//   - POST /v1/load_lora_adapter {"lora_name", "lora_path", "load_inplace":
//     false, "is_3d_lora_weight": false} and POST /v1/unload_lora_adapter
//     {"lora_name", "lora_int_id": null} (LoadLoRAAdapterRequest,
//     UnloadLoRAAdapterRequest: vllm/entrypoints/serve/lora/protocol.py:
//     7-16), each a JSON body (validate_json_request,
//     vllm/entrypoints/serve/utils/api_utils.py:336-342). 200 with the text
//     "Success: LoRA adapter 'NAME' added successfully." (or "removed");
//     any refusal is vLLM's ErrorResponse {"error": {"message", "type",
//     "param", "code"}} with the status in code (api_router.py:43-72;
//     vllm/entrypoints/openai/models/serving.py:167-280).
//   - The refusals: a name or path empty, 400 "Both 'lora_name' and
//     'lora_path' must be provided."; a name already loaded, 400 "The lora
//     adapter 'NAME' has already been loaded. …"; unloading a name not
//     loaded, 404 "The lora adapter 'NAME' cannot be found."; a path with
//     no adapter_config.json, 404 "Loading lora NAME failed: No adapter
//     found for PATH" (LoRAAdapterNotFoundError, vllm/exceptions.py:63-84;
//     vllm/lora/worker_manager.py:161-169); anything else the engine
//     raises while loading (a rank above --max-lora-rank, vllm/lora/
//     peft_helper.py:118-132), 500 InternalServerError with the engine's
//     message. Messages pass sanitize_message
//     (vllm/entrypoints/serve/exception_handling/utils.py:7-15), which
//     writes paths under /home, /usr, /opt, /var, /tmp, /root, /lib, /mnt
//     and /srv as "<path>".
//   - A loaded adapter is one more card of GET /v1/models
//     (show_available_models), which is how the controller verifies it.
//     Unloading takes it out of that list; at this tree it does not call
//     the engine's remove_lora (serving.py:221-235): the engine keeps it in
//     its CPU cache until evicted.
//   - Every API server process holds its own list (OpenAIServingModels is
//     per process), and a load reaches the one process that accepted the
//     connection. vLLM runs one API server per data-parallel rank unless
//     --api-server-count says otherwise (vllm/entrypoints/cli/serve.py:
//     102-126), so a replica with data_parallel > 1 and no
//     --api-server-count 1 gets its adapters at start instead.

// SGLang's contract, read at v0.5.18 (tag commit 71de97b; see sglang.go;
// docs/engines/sglang.md, "LoRA adapters"; paths under
// python/sglang/srt/):
//
//   - POST /load_lora_adapter {"lora_name", "lora_path", "pinned": false,
//     "lora_id": null} and POST /unload_lora_adapter {"lora_name",
//     "lora_id": null} (entrypoints/http_server.py:1539-1547, 1562-1570;
//     LoadLoRAAdapterReqInput and UnloadLoRAAdapterReqInput,
//     managers/io_struct.py:2212-2241, with BaseReq's "rid" and
//     "http_worker_ipc", io_struct.py:79-83). lora_name and lora_path are
//     required (a field without a default, utils/msgspec_utils.py:67-97);
//     other keys are ignored (extra_behavior "ignore"). There is no load in
//     place: a name already loaded is refused. The routes are always there;
//     auth level ADMIN_OPTIONAL (utils/auth.py:123-138): open unless the
//     server has --api-key or --admin-api-key.
//   - The answer is LoRAUpdateOutput as JSON, {"rid", "http_worker_ipc",
//     "success", "error_message", "loaded_adapters"}: 200 when success,
//     else 400 (http_server.py:1546-1547, 1569-1570; io_struct.py:
//     2268-2271). On success error_message is "" and loaded_adapters maps
//     each loaded name to its path (lora/lora_manager.py:213-223).
//   - The refusals, each 400 with success false and the message in
//     error_message: without --enable-lora, "LoRA is not enabled. Please
//     set `--enable-lora` to enable LoRA." (managers/
//     tokenizer_control_mixin.py:604-608, 669-673, 758-762); a name already
//     loaded, "Failed to load LoRA adapter NAME because it is already
//     loaded" (lora_manager.py:288-293); a rank above --max-lora-rank or a
//     target module outside --lora-target-modules, "LoRA adapter NAME with
//     rank R is incompatible with the current LoRA memory pool
//     configuration. …" (lora_manager.py:301-309); DoRA or added tokens
//     (lora_manager.py:278-286); anything raised reading the adapter, as
//     Python's text of the exception (lora_manager.py:251-270): a directory
//     without adapter_config.json "[Errno 2] No such file or directory:
//     'PATH/adapter_config.json'", and a path that is no directory is taken
//     as a Hugging Face repository id (lora/lora_config.py:75-85); unloading
//     a name not loaded, "LoRA with name NAME does not exist. Loaded LoRAs:
//     odict_keys([…])" (lora/lora_registry.py:109-121). Each scheduler rank
//     answers and any failure fails the whole (tokenizer_control_mixin.py:
//     127-145). A body FastAPI cannot read as the request is 400 with the
//     ErrorResponse {"object": "error", "message", "type": "Bad Request",
//     "param": null, "code": 400} (http_server.py:589-626;
//     entrypoints/openai/protocol.py:95-100).
//   - A loaded adapter is registered, after every rank loaded it
//     (tokenizer_control_mixin.py:633-636), in the tokenizer manager's
//     LoRARegistry, which GET /v1/models lists after the base model as
//     {"id": name, "root": path, "parent": the served name}
//     (http_server.py:1859-1869); an unload takes it out first
//     (tokenizer_control_mixin.py:575-595).
//   - Starting with no adapter (no --lora-paths) needs both --max-lora-rank
//     and --lora-target-modules (server_args.py:9451-9453, an assertion:
//     the server does not start). --lora-target-modules all targets every
//     module of the base model that takes LoRA, and its embeddings
//     (server_args.py:2894-2902, lora_manager.py:658-666), so any adapter
//     of the rank bound fits the pool. --max-loaded-loras, where set,
//     unloads the least recently used unpinned adapter when a load passes
//     it (tokenizer_control_mixin.py:638-666), so it is left unset: the
//     registry then holds every adapter loaded. --max-loras-per-batch
//     (default 8, server_args.py:2917-2921) is the adapters of one batch.
//   - The registry is per process (tokenizer_manager.py:445, 640-657).
//     --tokenizer-worker-num N > 1 runs N HTTP worker processes
//     (http_server.py:2489-2490, 2714), each its own TokenizerManager
//     (managers/multi_tokenizer_mixin.py:647-663) and registry, and a load
//     reaches the one that accepted the connection. And with --dp-size
//     above 1 without --enable-dp-attention a load or unload fails an
//     assertion, which is not caught: 500 (tokenizer_control_mixin.py:
//     610-612, 768-770).

// AdapterRuntime is an engine's API for loading adapters while it runs.
type AdapterRuntime struct {
	// Env turns the API on; the replica's engine starts with it.
	Env map[string]string
	// LoadPath and UnloadPath take a POST of LoadBody's and UnloadBody's
	// JSON.
	LoadPath, UnloadPath string
	// Inplace: a load may replace an adapter of the same name (vLLM's
	// load_inplace). Without it the controller unloads the adapter
	// before it loads it from another path.
	Inplace bool
	// startArgs renders the flags the engine starts with: the adapter
	// slots and rank bound, no adapter named. key is what of them the
	// engine cannot change while it runs: the replica's profile
	// fingerprint holds it.
	startArgs func(s AdapterSpec) (args []string, key string, err error)
	// blocked says why a replica serving s with this data-parallel size
	// and these args cannot take adapters at runtime; "" when it can.
	blocked func(d *Descriptor, s AdapterSpec, dataParallel int, args []string) string
	// Why cites where the API was read.
	Why string
}

// LoadBody is the JSON body of a load of adapter name from path; inplace
// loads it over an adapter of that name the engine holds, where the
// engine can (Inplace; vLLM's load_inplace). vLLM's and SGLang's loads
// both name the adapter lora_name and its path lora_path.
func (r *AdapterRuntime) LoadBody(name, path string, inplace bool) []byte {
	b, _ := json.Marshal(struct {
		Name    string `json:"lora_name"`
		Path    string `json:"lora_path"`
		Inplace bool   `json:"load_inplace,omitempty"`
	}{name, path, inplace && r.Inplace})
	return b
}

// UnloadBody is the JSON body of an unload of adapter name.
func (r *AdapterRuntime) UnloadBody(name string) []byte {
	b, _ := json.Marshal(struct {
		Name string `json:"lora_name"`
	}{name})
	return b
}

// Refusal is what an answer other than 200 to a load or an unload says:
// the engine's error message where the body has one of the engines' error
// shapes (vLLM's ErrorResponse {"error": {"message"}}, SGLang's
// LoRAUpdateOutput {"error_message"} and its ErrorResponse {"message"},
// FastAPI's {"detail"} for a path it does not route), else the body's
// start.
func (r *AdapterRuntime) Refusal(body []byte) string {
	var e struct {
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
		ErrorMessage string `json:"error_message"`
		Message      string `json:"message"`
		Detail       any    `json:"detail"`
	}
	if json.Unmarshal(body, &e) == nil {
		switch {
		case e.Error != nil && e.Error.Message != "":
			return e.Error.Message
		case e.ErrorMessage != "":
			return e.ErrorMessage
		case e.Message != "":
			return e.Message
		case e.Detail != nil:
			if s, ok := e.Detail.(string); ok {
				return s
			}
			b, _ := json.Marshal(e.Detail)
			return string(b)
		}
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// AdapterPlan is how the replicas of a profile get a model's adapters.
type AdapterPlan struct {
	// Runtime: the engine starts with Args and Env, which name no
	// adapter, and the controller loads the adapters through Rule's API.
	// Otherwise the adapters are given at start (AdapterArgs, from the
	// task's adapter blocks) and Args, Env and Key are empty.
	Runtime bool
	Rule    *AdapterRuntime
	Args    []string
	Env     map[string]string
	// Key is what of Args a replica cannot change while it runs (the
	// slots and the rank bound), for the profile fingerprint.
	Key string
	// Static says, for an engine with a runtime API, why this profile's
	// replicas get their adapters at start.
	Static string
}

// PlanAdapters says how a replica of engine, with the profile's
// data-parallel size and args, serves s's adapters. It checks s as
// AdapterArgs does; with no adapters the plan is empty.
func PlanAdapters(engine string, s AdapterSpec, dataParallel int, args []string) (AdapterPlan, error) {
	if _, err := AdapterArgs(engine, s); err != nil || len(s.Adapters) == 0 {
		return AdapterPlan{}, err
	}
	d := registry[engine]
	rt := d.Adapters.Runtime
	if rt == nil {
		return AdapterPlan{}, nil
	}
	if why := rt.blocked(d, s, dataParallel, args); why != "" {
		return AdapterPlan{Static: why}, nil
	}
	start, key, err := rt.startArgs(s)
	if err != nil {
		return AdapterPlan{}, err
	}
	env := make(map[string]string, len(rt.Env))
	for k, v := range rt.Env {
		env[k] = v
	}
	return AdapterPlan{Runtime: true, Rule: rt, Args: start, Env: env, Key: key}, nil
}

// vllmRuntimeStart: `--enable-lora --max-loras N --max-cpu-loras M
// [--max-lora-rank R]`, as vllmAdapters without --lora-modules. N and R
// are the key: N is max_adapters, or the adapters' count where the
// catalog gives none (so that count is then part of the key); M, every
// adapter kept in CPU memory, is the count when the job is written and
// not part of the key: an adapter added later beyond it is loaded again
// from its path when evicted.
func vllmRuntimeStart(s AdapterSpec) ([]string, string, error) {
	args, err := vllmAdapters(AdapterSpec{Slots: slotsOf(s), Adapters: s.Adapters})
	if err != nil {
		return nil, "", err
	}
	i := indexOf(args, "--lora-modules")
	args = args[:i]
	key := "max_loras=" + strconv.Itoa(slotsOf(s))
	if j := indexOf(args, "--max-lora-rank"); j >= 0 {
		key += " max_lora_rank=" + args[j+1]
	}
	return args, key, nil
}

func indexOf(args []string, flag string) int {
	for i, a := range args {
		if a == flag {
			return i
		}
	}
	return -1
}

// lastFlagValue is the value args give flag (the descriptor's spelling,
// or the pinned contract's main name) at its last occurrence, as
// argparse keeps it; given is false where args do not set it.
func lastFlagValue(d *Descriptor, args []string, flag string) (v string, given bool) {
	c, _ := contract.Load(d.Name)
	for i := 0; i < len(args); i++ {
		if !isFlagToken(args[i]) {
			continue
		}
		name := d.canon(args[i])
		if c != nil {
			if f := c.Flag(name); f != nil {
				name = f.Name
			}
		}
		if name != flag {
			continue
		}
		if _, after, ok := strings.Cut(args[i], "="); ok {
			v, given = after, true
		} else if i+1 < len(args) {
			v, given = args[i+1], true
		}
	}
	return v, given
}

// vllmRuntimeBlocked: more than one API server (data_parallel > 1 without
// --api-server-count 1, or --api-server-count above 1) would each hold
// their own adapter list.
func vllmRuntimeBlocked(d *Descriptor, _ AdapterSpec, dataParallel int, args []string) string {
	servers := max(dataParallel, 1)
	if v, given := lastFlagValue(d, args, "--api-server-count"); given {
		if n, err := strconv.Atoi(v); err == nil {
			servers = n
		}
	}
	if servers > 1 {
		return fmt.Sprintf("vLLM runs %d API servers here, each with its own list of adapters, and a runtime load reaches one of them "+
			"(vllm/entrypoints/cli/serve.py:102-126 at v0.28.0): the adapters are given at start (--lora-modules), and a change of them restarts the replicas", servers)
	}
	return ""
}

// sglangRuntimeStart: `--enable-lora --max-loras-per-batch N
// --max-lora-rank R --lora-target-modules all`, no --lora-paths and no
// --max-loaded-loras (SGLang's contract above). N is max_adapters, or the
// adapters' count where the catalog gives none; R the largest rank the
// catalog gives (sglangRuntimeBlocked keeps a spec without one at start).
// Both are the key.
func sglangRuntimeStart(s AdapterSpec) ([]string, string, error) {
	slots, rank := strconv.Itoa(slotsOf(s)), strconv.Itoa(maxRank(s))
	args := []string{"--enable-lora", "--max-loras-per-batch", slots, "--max-lora-rank", rank, "--lora-target-modules", "all"}
	return args, "max_loras_per_batch=" + slots + " max_lora_rank=" + rank, nil
}

// sglangRuntimeBlocked: no rank in the catalog to start with; several
// HTTP workers, each with its own registry; plain data parallelism, where
// SGLang refuses a runtime load.
func sglangRuntimeBlocked(d *Descriptor, s AdapterSpec, dataParallel int, args []string) string {
	const why = ": the adapters are given at start (--lora-paths), and a change of them restarts the replicas"
	if maxRank(s) == 0 {
		return "the catalog gives no adapter's rank, and SGLang started with no adapter needs --max-lora-rank " +
			"(python/sglang/srt/server_args.py:9451-9453 at v0.5.18)" + why
	}
	if v, given := lastFlagValue(d, args, "--tokenizer-worker-num"); given {
		if n, err := strconv.Atoi(v); err == nil && n > 1 {
			return fmt.Sprintf("SGLang runs %d HTTP workers here (--tokenizer-worker-num), each with its own registry of adapters, and a runtime load reaches one of them "+
				"(python/sglang/srt/managers/tokenizer_manager.py:640-657, entrypoints/http_server.py:2489-2490 at v0.5.18)%s", n, why)
		}
	}
	if dataParallel > 1 && !dpAttention(args) {
		return fmt.Sprintf("SGLang refuses a runtime load with --dp-size %d and no --enable-dp-attention "+
			"(python/sglang/srt/managers/tokenizer_control_mixin.py:610-612 at v0.5.18)%s", dataParallel, why)
	}
	return ""
}
