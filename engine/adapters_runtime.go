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

// AdapterRuntime is an engine's API for loading adapters while it runs.
type AdapterRuntime struct {
	// Env turns the API on; the replica's engine starts with it.
	Env map[string]string
	// LoadPath and UnloadPath take a POST of LoadBody's and UnloadBody's
	// JSON.
	LoadPath, UnloadPath string
	// startArgs renders the flags the engine starts with: the adapter
	// slots and rank bound, no adapter named. key is what of them the
	// engine cannot change while it runs: the replica's profile
	// fingerprint holds it.
	startArgs func(s AdapterSpec) (args []string, key string, err error)
	// blocked says why a replica with this data-parallel size and these
	// args cannot take adapters at runtime; "" when it can.
	blocked func(d *Descriptor, dataParallel int, args []string) string
	// Why cites where the API was read.
	Why string
}

// LoadBody is the JSON body of a load of adapter name from path; inplace
// loads it over an adapter of that name the engine holds (vLLM's
// load_inplace), which is otherwise refused.
func (r *AdapterRuntime) LoadBody(name, path string, inplace bool) []byte {
	b, _ := json.Marshal(struct {
		Name    string `json:"lora_name"`
		Path    string `json:"lora_path"`
		Inplace bool   `json:"load_inplace,omitempty"`
	}{name, path, inplace})
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
// the engine's error message where the body is its error shape (vLLM's
// ErrorResponse, or FastAPI's {"detail"} for a path it does not route),
// else the body's start.
func (r *AdapterRuntime) Refusal(body []byte) string {
	var e struct {
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
		Detail any `json:"detail"`
	}
	if json.Unmarshal(body, &e) == nil {
		switch {
		case e.Error != nil && e.Error.Message != "":
			return e.Error.Message
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
	if why := rt.blocked(d, dataParallel, args); why != "" {
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

// vllmRuntimeBlocked: more than one API server (data_parallel > 1 without
// --api-server-count 1, or --api-server-count above 1) would each hold
// their own adapter list.
func vllmRuntimeBlocked(d *Descriptor, dataParallel int, args []string) string {
	servers := max(dataParallel, 1)
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
		if name != "--api-server-count" {
			continue
		}
		v, given := "", false
		if _, after, ok := strings.Cut(args[i], "="); ok {
			v, given = after, true
		} else if i+1 < len(args) {
			v, given = args[i+1], true
		}
		if n, err := strconv.Atoi(v); given && err == nil {
			servers = n // the last wins, as argparse's
		}
	}
	if servers > 1 {
		return fmt.Sprintf("vLLM runs %d API servers here, each with its own list of adapters, and a runtime load reaches one of them "+
			"(vllm/entrypoints/cli/serve.py:102-126 at v0.28.0): the adapters are given at start (--lora-modules), and a change of them restarts the replicas", servers)
	}
	return ""
}
