package fakeengine

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// SGLang's LoRA adapters, as SGLang v0.5.18 (tag commit 71de97b; paths
// under python/sglang/srt/, engine/adapters_runtime.go holds the contract
// with file and line) loads them at start and while it runs:
//
//   - At start (server_args.py:9338-9465): --lora-paths turns
//     --enable-lora on; with LoRA on and no --lora-paths both
//     --max-lora-rank and --lora-target-modules are needed; 'all' must be
//     the only target module; --max-loaded-loras, where set, is at least
//     --max-loras-per-batch and the count of --lora-paths. Each fails an
//     assertion: "AssertionError: …", and the server does not start. Then
//     each adapter of --lora-paths is loaded as a runtime load is, and one
//     that fails stops the server with "RuntimeError: Failed to load LoRA
//     adapter NAME: …" (lora/lora_manager.py:607-613); an adapter whose
//     target modules are not among --lora-target-modules stops it too
//     (lora_manager.py:715-724).
//   - POST /load_lora_adapter {"lora_name", "lora_path", "pinned",
//     "lora_id"} and POST /unload_lora_adapter {"lora_name", "lora_id"},
//     always routed. A body FastAPI cannot read as the request (no JSON
//     object, lora_name or lora_path missing, a field of the wrong type) is
//     400 {"object": "error", "message", "type": "Bad Request", "param":
//     null, "code": 400}; the message here is pydantic's error list in
//     Python's repr (str(exc.errors())), which SGLang's handler ends its
//     message with (http_server.py:589-626; what FastAPI's own text of the
//     exception puts before it depends on FastAPI's version, which SGLang
//     does not pin, and is left out). Keys other than the model's are
//     ignored; a content type other than JSON hands the model the raw
//     bytes, refused as no dictionary.
//   - The answer is {"rid": null, "http_worker_ipc": null, "success",
//     "error_message", "loaded_adapters"}: 200 on success (error_message
//     "", loaded_adapters every loaded name with its path), else 400 with
//     the message; the refusals are those of sglangLoad and unloadSGLang
//     below. With --dp-size above 1 and no --enable-dp-attention a load or
//     an unload fails an assertion no handler catches: Starlette's 500
//     "Internal Server Error" as text.
//   - A loaded adapter is a card of GET /v1/models after the base model,
//     {"id": name, "root": path, "parent": the served name}, and a model
//     requests may name; with --max-loaded-loras a load that passes it
//     unloads the oldest unpinned adapter (tokenizer_control_mixin.py:
//     638-666; SGLang's order is of last use, requests counting: here it
//     is of loading).
//
// The weights are not read, and adapters that add tokens are not told
// apart (fake-engine has no vocabulary to compare with).

// parseLoRAPath reads one --lora-paths item as LoRAPathAction does
// (arg_groups/argparse_actions.py:8-25) and check_lora_server_args then
// (server_args.py:9376-9413): JSON with lora_name and lora_path where it
// starts with '{' and ends with '}', else NAME=PATH, else PATH as both.
func parseLoRAPath(item string) (Adapter, error) {
	item = strings.TrimSpace(item)
	if strings.HasPrefix(item, "{") && strings.HasSuffix(item, "}") {
		var m struct {
			Name   *string `json:"lora_name"`
			Path   *string `json:"lora_path"`
			Pinned bool    `json:"pinned"`
		}
		if err := json.Unmarshal([]byte(item), &m); err != nil {
			return Adapter{}, fmt.Errorf("%w: --lora-paths %s: %w", ErrUsage, item, err)
		}
		if m.Name == nil || m.Path == nil {
			msg := fmt.Sprintf("AssertionError: %s looks like a JSON str, but it does not contain 'lora_name' and 'lora_path' keys.", pyRepr(item))
			return Adapter{}, fmt.Errorf("%w: --lora-paths: %s", ErrUsage, msg)
		}
		return Adapter{Name: *m.Name, Path: *m.Path, Pinned: m.Pinned}, nil
	}
	if name, path, ok := strings.Cut(item, "="); ok {
		return Adapter{Name: name, Path: path}, nil
	}
	return Adapter{Name: item, Path: item}, nil
}

// sglangModules normalises target module names as SGLang's
// get_normalized_target_modules does (lora/utils.py:237-290) for the
// common ones: q, k and v into qkv_proj, gate and up into gate_up_proj;
// other names stay as they are.
func sglangModules(names []string) map[string]bool {
	out := map[string]bool{}
	for _, n := range names {
		n = n[strings.LastIndexByte(n, '.')+1:]
		switch n {
		case "q_proj", "k_proj", "v_proj":
			n = "qkv_proj"
		case "gate_proj", "up_proj":
			n = "gate_up_proj"
		}
		out[n] = true
	}
	return out
}

// sglangAdapterConfig is what SGLang's LoRAConfig reads of an adapter
// (lora/lora_config.py:25-85): target_modules, r, lora_alpha, use_dora.
type sglangAdapterConfig struct {
	modules []string // nil: "all" or "all-linear"
	r       any
	dora    bool
}

// readSGLangAdapter reads path's adapter_config.json as LoRAConfig does;
// msg, where it fails, is the exception's text as SGLang's message
// carries it.
func readSGLangAdapter(path string) (conf sglangAdapterConfig, msg string) {
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		// lora_config.py:79-80: snapshot_download(path), from the
		// Hugging Face Hub.
		return conf, "fake-engine downloads no adapter: " + path + " is no directory, which SGLang would fetch from the Hugging Face Hub"
	}
	cfgPath := filepath.Join(path, "adapter_config.json")
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		return conf, pyOSError(err, cfgPath)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		// Go's text of the JSON error, not Python's.
		return conf, cfgPath + ": " + err.Error()
	}
	// KeyError's text is the key's repr, in LoRAConfig's order.
	for _, k := range []string{"target_modules", "r", "lora_alpha"} {
		if _, ok := raw[k]; !ok {
			return conf, pyRepr(k)
		}
	}
	conf = sglangAdapterConfig{r: raw["r"], dora: pyTruthy(raw["use_dora"])}
	switch m := raw["target_modules"].(type) {
	case string:
		if m != "all" && m != "all-linear" {
			return conf, "Only 'all' or 'all-linear' can be used as the string for target module"
		}
	case []any:
		for _, x := range m {
			s, _ := x.(string)
			conf.modules = append(conf.modules, s)
		}
	default:
		return conf, "SGLang does not read target_modules " + pyRepr(m)
	}
	return conf, ""
}

// sglangPool is the LoRA memory pool's shape: its rank bound and target
// modules (all: every module). It is what the server started with: the
// flags, else what the adapters of --lora-paths need
// (lora_manager.py:651-750).
type sglangPool struct {
	rank    float64
	all     bool
	modules map[string]bool
}

func (p sglangPool) fits(c sglangAdapterConfig) bool {
	r, ok := pyNumber(c.r)
	if !ok || r > p.rank {
		return false
	}
	if p.all || c.modules == nil {
		return true
	}
	for m := range sglangModules(c.modules) {
		if !p.modules[m] {
			return false
		}
	}
	return true
}

// sglangStart checks SGLang's LoRA flags and loads --lora-paths as the
// server does before it listens, returning the pool; the error is what it
// prints as it exits.
func sglangStart(c Config) (sglangPool, error) {
	if !c.EnableLoRA {
		return sglangPool{}, nil
	}
	fail := func(msg string) (sglangPool, error) { return sglangPool{}, errors.New("AssertionError: " + msg) }
	if len(c.LoRATargetModules) > 1 && slices.Contains(c.LoRATargetModules, "all") {
		return fail("If 'all' is specified in --lora-target-modules, it should be the only module specified.")
	}
	if len(c.LoRAPaths) == 0 && (c.MaxLoRARank == 0 || len(c.LoRATargetModules) == 0) {
		return fail("When no initial --lora-paths is provided, you need to specify both --max-lora-rank and --lora-target-modules for LoRA initialization.")
	}
	if c.MaxLoadedLoRAs > 0 {
		if c.MaxLoadedLoRAs < c.MaxLoRAs {
			return fail(fmt.Sprintf("max_loaded_loras should be greater than or equal to max_loras_per_batch. max_loaded_loras=%d, max_loras_per_batch=%d", c.MaxLoadedLoRAs, c.MaxLoRAs))
		}
		if len(c.LoRAPaths) > c.MaxLoadedLoRAs {
			return fail(fmt.Sprintf("The number of LoRA paths should not exceed max_loaded_loras. max_loaded_loras=%d, lora_paths=%d", c.MaxLoadedLoRAs, len(c.LoRAPaths)))
		}
	}
	// The adapters load before the pool exists: no shape check yet.
	var loaded []Adapter
	var confs []sglangAdapterConfig
	for _, a := range c.LoRAPaths {
		conf, msg := sglangCheck(a, loaded, nil)
		if msg != "" {
			return sglangPool{}, fmt.Errorf("RuntimeError: Failed to load LoRA adapter %s: %s", a.Name, msg)
		}
		loaded, confs = append(loaded, a), append(confs, conf)
	}
	pool := sglangPool{rank: float64(c.MaxLoRARank), modules: sglangModules(c.LoRATargetModules)}
	pool.all = slices.Contains(c.LoRATargetModules, "all")
	for i, conf := range confs {
		if c.MaxLoRARank == 0 {
			r, _ := pyNumber(conf.r)
			pool.rank = max(pool.rank, r)
		}
		switch {
		case conf.modules == nil && len(c.LoRATargetModules) == 0:
			pool.all = true
		case conf.modules == nil || pool.all:
		case len(c.LoRATargetModules) == 0:
			for m := range sglangModules(conf.modules) {
				pool.modules[m] = true
			}
		default:
			var out []string
			for m := range sglangModules(conf.modules) {
				if !pool.modules[m] {
					out = append(out, m)
				}
			}
			if len(out) > 0 {
				sort.Strings(out)
				have := slices.Sorted(maps.Keys(pool.modules))
				all := append(slices.Clone(have), out...)
				sort.Strings(all)
				msg := fmt.Sprintf("LoRA adapter %s contains target modules %s that are not included in the specified --lora-target-modules %s. "+
					"Please update --lora-target-modules to include all required modules: %s, or use 'all' to enable all supported modules.",
					pyRepr(loaded[i].Name), pyStrings(out), pyStrings(have), pyStrings(all))
				return sglangPool{}, errors.New("ValueError: " + msg)
			}
		}
	}
	return pool, nil
}

func pyStrings(s []string) string {
	out := make([]any, len(s))
	for i, x := range s {
		out[i] = x
	}
	return pyRepr(out)
}

// sglangCheck checks adapter a as the scheduler's LoRAManager does before
// it loads it (lora_manager.py:237-317): its config read, no DoRA, no
// adapter of that name loaded, and (pool not nil) the pool's shape; a
// pinned adapter leaves a slot unpinned. msg is SGLang's error_message.
func sglangCheck(a Adapter, loaded []Adapter, pool *sglangPool) (sglangAdapterConfig, string) {
	conf, msg := readSGLangAdapter(a.Path)
	if msg != "" {
		return conf, msg
	}
	if conf.dora {
		return conf, fmt.Sprintf("Failed to load %s because LoRA serving currently doesn't support DoRA adapters", a.Name)
	}
	if slices.ContainsFunc(loaded, func(x Adapter) bool { return x.Name == a.Name }) {
		return conf, fmt.Sprintf("Failed to load LoRA adapter %s because it is already loaded", a.Name)
	}
	if pool != nil && !pool.fits(conf) {
		return conf, fmt.Sprintf("LoRA adapter %s with rank %s is incompatible with the current LoRA memory pool configuration. "+
			"Please ensure that the LoRA adapter's rank is within the configured `--max-lora-rank` and that the target modules are included in `--lora-target-modules`.",
			a.Name, pyRepr(conf.r))
	}
	return conf, ""
}

// sglangUpdate is SGLang's LoRAUpdateOutput as its routes answer it.
type sglangUpdate struct {
	RID            *string           `json:"rid"`
	HTTPWorkerIPC  *string           `json:"http_worker_ipc"`
	Success        bool              `json:"success"`
	ErrorMessage   *string           `json:"error_message"`
	LoadedAdapters map[string]string `json:"loaded_adapters"`
}

// sglangBody reads SGLang's request models: a typed dictionary that
// ignores other keys, any content type.
var sglangBody = bodyDialect{refuse: writeSGLangValidation,
	notObject: pyError{typ: "dict_type", msg: "Input should be a valid dictionary"}}

// writeSGLangValidation answers as SGLang's validation_exception_handler
// (http_server.py:589-626) for a route outside /v1/messages and
// /v1/responses.
func writeSGLangValidation(w http.ResponseWriter, errs []pyError) {
	reprs := make([]string, len(errs))
	for i, e := range errs {
		reprs[i] = e.repr()
	}
	writeJSON(w, http.StatusBadRequest, struct {
		Object  string  `json:"object"`
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    int     `json:"code"`
	}{"error", "[" + strings.Join(reprs, ", ") + "]", "Bad Request", nil, http.StatusBadRequest})
}

// sglangRefuse answers a refused update: 400, success false.
func sglangRefuse(w http.ResponseWriter, msg string, loaded map[string]string) {
	writeJSON(w, http.StatusBadRequest, sglangUpdate{ErrorMessage: &msg, LoadedAdapters: loaded})
}

// sglangRuntimeOff answers what SGLang answers before it looks at the
// adapter, true where it did.
func (s *Server) sglangRuntimeOff(w http.ResponseWriter) bool {
	switch {
	case !s.cfg.EnableLoRA:
		sglangRefuse(w, "LoRA is not enabled. Please set `--enable-lora` to enable LoRA.", nil)
	case s.cfg.DataParallel > 1 && !s.cfg.DPAttention:
		// The assertion of tokenizer_control_mixin.py:610-612: no
		// handler; Starlette's ServerErrorMiddleware.
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte("Internal Server Error"))
		fmt.Fprintf(s.stderr, "AssertionError: dp_size must be 1 or dp attention must be enabled for dynamic lora loading\n")
	default:
		return false
	}
	return true
}

// loadedMap is every loaded adapter's path by name (the caller holds
// s.lora.mu).
func (s *Server) loadedMap() map[string]string {
	out := map[string]string{}
	for _, a := range s.lora.loaded {
		out[a.Name] = a.Path
	}
	return out
}

// loadSGLangLoRA answers SGLang's POST /load_lora_adapter.
func (s *Server) loadSGLangLoRA(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r, []pyField{{"rid", "str|None", false}, {"http_worker_ipc", "str|None", false},
		{"lora_name", "str", true}, {"lora_path", "str", true}, {"pinned", "bool", false}, {"lora_id", "str|None", false}}, sglangBody)
	if !ok || s.sglangRuntimeOff(w) {
		return
	}
	a := Adapter{Name: body["lora_name"].(string), Path: body["lora_path"].(string), Pinned: pyBool(body["pinned"])}
	s.lora.mu.Lock()
	defer s.lora.mu.Unlock()
	_, msg := sglangCheck(a, s.lora.loaded, &s.sglang)
	pinned := 0
	for _, x := range s.lora.loaded {
		if x.Pinned {
			pinned++
		}
	}
	if msg == "" && a.Pinned && pinned >= s.cfg.MaxLoRAs-1 {
		msg = fmt.Sprintf("Failed to load LoRA adapter %s as a pinned adapter. It is not allowed to pin all slots in the LoRA memory pool to avoid starvation "+
			"for unpinned adapters and base models. Please increase your `--max-loras-per-batch` or load it as unpinned LoRA adapters.", a.Name)
	}
	if msg != "" {
		sglangRefuse(w, msg, s.loadedMap())
		return
	}
	s.lora.loaded = append(s.lora.loaded, a)
	fmt.Fprintf(s.stderr, "INFO lora_manager.py: LoRA adapter loading completes: LoRARef(lora_name=%s, lora_path=%s, pinned=%s)\n", a.Name, a.Path, pyRepr(a.Pinned))
	for s.cfg.MaxLoadedLoRAs > 0 && len(s.lora.loaded) > s.cfg.MaxLoadedLoRAs {
		i := slices.IndexFunc(s.lora.loaded, func(x Adapter) bool { return !x.Pinned })
		if i < 0 {
			break
		}
		fmt.Fprintf(s.stderr, "INFO tokenizer_control_mixin.py: Unloading least recently used LoRA adapter '%s'\n", s.lora.loaded[i].Name)
		s.lora.loaded = slices.Delete(s.lora.loaded, i, i+1)
	}
	empty := ""
	writeJSON(w, http.StatusOK, sglangUpdate{Success: true, ErrorMessage: &empty, LoadedAdapters: s.loadedMap()})
}

// unloadSGLangLoRA answers SGLang's POST /unload_lora_adapter.
func (s *Server) unloadSGLangLoRA(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r, []pyField{{"rid", "str|None", false}, {"http_worker_ipc", "str|None", false},
		{"lora_name", "str", true}, {"lora_id", "str|None", false}}, sglangBody)
	if !ok || s.sglangRuntimeOff(w) {
		return
	}
	name := body["lora_name"].(string)
	s.lora.mu.Lock()
	defer s.lora.mu.Unlock()
	i := slices.IndexFunc(s.lora.loaded, func(a Adapter) bool { return a.Name == name })
	if i < 0 {
		names := make([]any, len(s.lora.loaded))
		for k, a := range s.lora.loaded {
			names[k] = a.Name
		}
		// lora_registry.py:116-121: the registry's keys as Python
		// prints an OrderedDict's.
		sglangRefuse(w, fmt.Sprintf("LoRA with name %s does not exist. Loaded LoRAs: odict_keys(%s)", name, pyRepr(names)), nil)
		return
	}
	s.lora.loaded = slices.Delete(s.lora.loaded, i, i+1)
	fmt.Fprintf(s.stderr, "INFO lora_manager.py: LoRA adapter unloading completes: %s\n", name)
	empty := ""
	writeJSON(w, http.StatusOK, sglangUpdate{Success: true, ErrorMessage: &empty, LoadedAdapters: s.loadedMap()})
}
