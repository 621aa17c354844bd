package fakeengine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// vLLM's LoRA adapters while it runs, as vLLM v0.28.0 (read at the
// merge-base 53e211d; engine/adapters_runtime.go holds the contract with
// file and line) serves them:
//
//   - With VLLM_ALLOW_RUNTIME_LORA_UPDATING on, POST /v1/load_lora_adapter
//     {"lora_name", "lora_path", "load_inplace", "is_3d_lora_weight"} and
//     POST /v1/unload_lora_adapter {"lora_name", "lora_int_id"}; without
//     it the paths are not routed: 404 {"detail": "Not Found"}.
//   - The body must be JSON with Content-Type application/json; what
//     FastAPI and pydantic refuse of it is 400 with type "Bad Request",
//     param the field (body.lora_name), and a message that starts "1
//     validation error:" followed by each error, as pydantic's error
//     dictionaries. Those dictionaries are written here in Python's repr
//     from the JSON read; their wording follows pydantic 2's for the
//     checks made (missing, string_type, bool_parsing, int_parsing,
//     model_attributes_type, json_invalid), and the position and message
//     of a JSON syntax error are Go's, not Python's.
//   - Then OpenAIServingModels' checks (serving.py:237-280) and the
//     worker's (loadAdapter below): the status, type and message as vLLM
//     gives them, messages through sanitize_message.
//   - 200 "Success: LoRA adapter 'NAME' added successfully." (or
//     "removed"), text without a content type.
//   - A load makes the adapter a card of GET /v1/models and a model
//     requests may name; an unload takes it away. Adapters given at start
//     (--lora-modules) are loaded the same way, and may be unloaded.
//
// With --enable-lora, /metrics has vllm:lora_requests_info: one series per
// set of adapters with requests in flight the engine has had, labels
// max_lora, waiting_lora_adapters and running_lora_adapters, each valued
// the time it was last current (loggers.py:1049-1074, 1167-1179;
// stats.py:507-563): both adapter labels list every adapter with a
// request waiting or running, in the order their first request came.

// RuntimeLoRAEnv is the environment variable that turns vLLM's runtime
// adapter API on.
const RuntimeLoRAEnv = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"

// sanitize is vLLM's sanitize_message
// (vllm/entrypoints/serve/exception_handling/utils.py:7-15): memory
// addresses, traceback lines and paths out of an error message.
var sanitize = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(` at 0x[0-9a-f]+>`), ">"},
	{regexp.MustCompile(`\n?\s*File "[^"]+", line \d+, in \S+(\n\s+.*)?`), ""},
	{regexp.MustCompile(`/(?:home|usr|opt|var|tmp|root|lib|mnt|srv)(?:/[\w.\-]+)+`), "<path>"},
	{regexp.MustCompile(`(?:/[\w\-]+)+/[\w\-]+\.\w+`), "<path>"},
}

func sanitizeMessage(m string) string {
	for _, s := range sanitize {
		m = s.re.ReplaceAllString(m, s.with)
	}
	return strings.TrimSpace(m)
}

// loadError is an adapter vLLM does not load: the status and error type
// its API answers with, and the message before sanitize_message.
type loadError struct {
	status int
	typ    string
	msg    string
}

func (e *loadError) Error() string { return e.msg }

// failed is the error an exception in the engine's add_lora becomes: the
// engine core's "Call to add_lora method failed: …"
// (vllm/v1/engine/core.py:1580-1582, raised again by the client,
// core_client.py:783-791), 500 InternalServerError (serving.py:209-213).
func failed(format string, args ...any) *loadError {
	return &loadError{http.StatusInternalServerError, "InternalServerError", "Call to add_lora method failed: " + fmt.Sprintf(format, args...)}
}

// loadAdapter checks an adapter as vLLM's worker loads it
// (WorkerLoRAManager._load_adapter, vllm/lora/worker_manager.py:106-173):
// LoRA enabled (lora_model_runner_mixin.py:85-87, 290-292); the
// adapter_config.json opened (no such file: LoRAAdapterNotFoundError, 404
// "Loading lora NAME failed: No adapter found for PATH"; any other error
// of the open is the engine's, 500); PEFTHelper.from_dict and
// __post_init__ (peft_helper.py:41-82): the required fields r, lora_alpha
// and target_modules, r above 0; validate_legal (peft_helper.py:118-132):
// modules_to_save, use_dora, r against --max-lora-rank, bias; then a
// weights file, adapter_model.safetensors, .bin or .pt
// (vllm/lora/lora_model.py:205-296). The weights are not read.
func loadAdapter(c Config, name, path string) *loadError {
	if !c.EnableLoRA {
		return failed("LoRA is not enabled. Use --enable-lora to enable LoRA.")
	}
	dir := path
	if strings.HasPrefix(dir, "~") {
		if home, err := os.UserHomeDir(); err == nil {
			dir = home + dir[1:]
		}
	}
	cfgPath := filepath.Join(dir, "adapter_config.json")
	b, err := os.ReadFile(cfgPath)
	if errors.Is(err, fs.ErrNotExist) {
		return &loadError{http.StatusNotFound, "NotFoundError", fmt.Sprintf("Loading lora %s failed: No adapter found for %s", name, path)}
	}
	if err != nil {
		return failed("%s", pyOSError(err, cfgPath))
	}
	var conf map[string]any
	if err := json.Unmarshal(b, &conf); err != nil {
		return failed("%s: %v", cfgPath, err)
	}
	var missing []string
	for _, f := range []string{"lora_alpha", "r", "target_modules"} {
		if _, ok := conf[f]; !ok {
			missing = append(missing, "'"+f+"'")
		}
	}
	if len(missing) > 0 {
		return failed("Missing required configuration fields: {%s}", strings.Join(missing, ", "))
	}
	r, ok := pyNumber(conf["r"])
	if !ok {
		return failed("'<=' not supported between instances of '%s' and 'int'", pyType(conf["r"]))
	}
	if r <= 0 {
		return failed("LoRA rank `r` must be a positive integer, got %s.", pyRepr(conf["r"]))
	}
	var msgs []string
	if pyTruthy(conf["modules_to_save"]) {
		msgs = append(msgs, "vLLM only supports modules_to_save being None.")
	}
	if pyTruthy(conf["use_dora"]) {
		msgs = append(msgs, "vLLM does not yet support DoRA.")
	}
	if r > float64(c.MaxLoRARank) {
		msgs = append(msgs, fmt.Sprintf("LoRA rank %s is greater than max_lora_rank %d.", pyRepr(conf["r"]), c.MaxLoRARank))
	}
	if bias, ok := conf["bias"]; ok && bias != "none" {
		msgs = append(msgs, "Adapter bias is not supported.")
	}
	if len(msgs) > 0 {
		return failed("%s", strings.Join(msgs, " "))
	}
	for _, f := range []string{"adapter_model.safetensors", "adapter_model.bin", "adapter_model.pt"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err == nil && fi.Mode().IsRegular() {
			return nil
		}
	}
	return failed("%s doesn't contain tensors", dir)
}

// WritePEFTAdapter writes into dir (made if needed) what vLLM's loader
// wants of a LoRA adapter: an adapter_config.json of rank r and a weights
// file. The weights are not a real model's: fake-engine does not read
// them.
func WritePEFTAdapter(dir string, r int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	conf := fmt.Sprintf(`{"peft_type": "LORA", "r": %d, "lora_alpha": %d, "target_modules": ["q_proj", "v_proj"], "bias": "none"}`, r, 2*r)
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(conf), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "adapter_model.safetensors"), []byte("fake-engine"), 0o644)
}

// pyOSError is Python's text of an OSError of opening p: "[Errno N]
// Strerror: 'p'".
func pyOSError(err error, p string) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		s := errno.Error()
		if s != "" {
			s = strings.ToUpper(s[:1]) + s[1:]
		}
		return fmt.Sprintf("[Errno %d] %s: %s", int(errno), s, pyRepr(p))
	}
	return err.Error()
}

// loraSet is a vLLM server's adapters: those it has loaded, in load
// order, and those with requests in flight, for vllm:lora_requests_info.
type loraSet struct {
	mu     sync.Mutex
	loaded []Adapter
	// order, waiting and running: the adapters with requests in flight,
	// in the order they got their first (vLLM's LoRARequestStates, a
	// dict an adapter leaves when it has none).
	order            []string
	waiting, running map[string]int
	// info is vllm:lora_requests_info (nil without --enable-lora);
	// maxLoRA its max_lora label.
	info    *prometheus.GaugeVec
	maxLoRA string
}

func newLoraSet(c Config, reg *prometheus.Registry) *loraSet {
	l := &loraSet{waiting: map[string]int{}, running: map[string]int{}}
	if c.Engine == EngineSGLang {
		l.loaded = slices.Clone(c.LoRAPaths)
	}
	if c.Engine != EngineVLLM {
		return l
	}
	l.loaded = slices.Clone(c.LoRAModules)
	if c.EnableLoRA {
		l.maxLoRA = strconv.Itoa(c.MaxLoRAs)
		l.info = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "vllm:lora_requests_info", Help: "Running stats on lora requests."},
			[]string{"max_lora", "waiting_lora_adapters", "running_lora_adapters"})
		reg.MustRegister(l.info)
	}
	return l
}

// list returns the loaded adapters.
func (l *loraSet) list() []Adapter {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.loaded)
}

func (l *loraSet) has(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.loaded, func(a Adapter) bool { return a.Name == name })
}

// request moves one request of adapter between waiting (w), running (r)
// and done, by dw and dr, and sets the info series of what is in flight
// now to the current time.
func (l *loraSet) request(adapter string, dw, dr int) {
	if adapter == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.Contains(l.order, adapter) {
		l.order = append(l.order, adapter)
	}
	l.waiting[adapter] += dw
	l.running[adapter] += dr
	if l.waiting[adapter] == 0 && l.running[adapter] == 0 {
		l.order = slices.DeleteFunc(l.order, func(n string) bool { return n == adapter })
		delete(l.waiting, adapter)
		delete(l.running, adapter)
	}
	if l.info != nil {
		names := strings.Join(l.order, ",")
		now := time.Now()
		l.info.WithLabelValues(l.maxLoRA, names, names).Set(float64(now.UnixNano()) / 1e9)
	}
}

// adapterOf is the adapter a request's model names, "" for none. SGLang
// takes "base:adapter", split at the first ':'
// (python/sglang/srt/entrypoints/openai/serving_base.py:40-53 at v0.5.18).
func (s *Server) adapterOf(model string) string {
	if _, a, ok := strings.Cut(model, ":"); ok && s.cfg.Engine == EngineSGLang {
		model = strings.TrimSpace(a)
	}
	if model != "" && s.lora.has(model) {
		return model
	}
	return ""
}

// loadLoRA answers POST /v1/load_lora_adapter.
func (s *Server) loadLoRA(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.RuntimeLoRA {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
		return
	}
	body, ok := s.pydanticBody(w, r, []pyField{{"lora_name", "str", true}, {"lora_path", "str", true},
		{"load_inplace", "bool", false}, {"is_3d_lora_weight", "bool", false}})
	if !ok {
		return
	}
	name, path := body["lora_name"].(string), body["lora_path"].(string)
	inplace := pyBool(body["load_inplace"])
	if name == "" || path == "" {
		writeVLLMError(w, http.StatusBadRequest, "InvalidUserInput", "Both 'lora_name' and 'lora_path' must be provided.", nil)
		return
	}
	s.lora.mu.Lock()
	defer s.lora.mu.Unlock()
	i := slices.IndexFunc(s.lora.loaded, func(a Adapter) bool { return a.Name == name })
	if i >= 0 && !inplace {
		writeVLLMError(w, http.StatusBadRequest, "InvalidUserInput",
			"The lora adapter '"+name+"' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.", nil)
		return
	}
	if e := loadAdapter(s.cfg, name, path); e != nil {
		writeVLLMError(w, e.status, e.typ, e.msg, nil)
		return
	}
	if i >= 0 {
		s.lora.loaded[i].Path = path
	} else {
		s.lora.loaded = append(s.lora.loaded, Adapter{Name: name, Path: path})
	}
	fmt.Fprintf(s.stderr, "INFO serving.py: Loaded new LoRA adapter: name '%s', path '%s'\n", name, path)
	writeText(w, "Success: LoRA adapter '"+name+"' added successfully.")
}

// unloadLoRA answers POST /v1/unload_lora_adapter.
func (s *Server) unloadLoRA(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.RuntimeLoRA {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
		return
	}
	body, ok := s.pydanticBody(w, r, []pyField{{"lora_name", "str", true}, {"lora_int_id", "int|None", false}})
	if !ok {
		return
	}
	name := body["lora_name"].(string)
	if name == "" {
		writeVLLMError(w, http.StatusBadRequest, "InvalidUserInput", "'lora_name' needs to be provided to unload a LoRA adapter.", nil)
		return
	}
	s.lora.mu.Lock()
	defer s.lora.mu.Unlock()
	i := slices.IndexFunc(s.lora.loaded, func(a Adapter) bool { return a.Name == name })
	if i < 0 {
		writeVLLMError(w, http.StatusNotFound, "NotFoundError", "The lora adapter '"+name+"' cannot be found.", nil)
		return
	}
	s.lora.loaded = slices.Delete(s.lora.loaded, i, i+1)
	fmt.Fprintf(s.stderr, "INFO serving.py: Removed LoRA adapter: name '%s'\n", name)
	writeText(w, "Success: LoRA adapter '"+name+"' removed successfully.")
}

// writeText answers 200 with a text body and no content type, as
// Starlette's Response(content=str) does.
func writeText(w http.ResponseWriter, text string) {
	w.Header()["Content-Type"] = nil
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, text)
}

// writeVLLMError writes vLLM's ErrorResponse, its message through
// sanitize_message.
func writeVLLMError(w http.ResponseWriter, code int, typ, msg string, param *string) {
	writeJSON(w, code, errorResponse{Error: apiError{Message: sanitizeMessage(msg), Type: typ, Param: param, Code: code}})
}

// pyField is one field of a pydantic request model: its name, its type
// (str, str|None, bool, int|None) and whether it is required.
type pyField struct {
	name, typ string
	required  bool
}

// bodyDialect is how an engine's FastAPI route reads a request model:
// jsonOnly, vLLM's validate_json_request dependency; notObject, the error
// of a body that is no JSON object (a pydantic model's, or SGLang's typed
// dictionary's); refuse writes the engine's 400 for the errors.
type bodyDialect struct {
	jsonOnly  bool
	notObject pyError
	refuse    func(w http.ResponseWriter, errs []pyError)
}

var vllmBody = bodyDialect{jsonOnly: true, refuse: writeValidation,
	notObject: pyError{typ: "model_attributes_type", msg: "Input should be a valid dictionary or object to extract fields from"}}

// pydanticBody reads a request body as FastAPI with vLLM's
// validate_json_request dependency and a pydantic model of fields would,
// answering vLLM's 400 itself where they refuse it. The body returned
// holds every field, the absent ones at their default.
func (s *Server) pydanticBody(w http.ResponseWriter, r *http.Request, fields []pyField) (map[string]any, bool) {
	return s.readBody(w, r, fields, vllmBody)
}

// readBody reads a request body of fields as FastAPI reads an engine's
// request model (d).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, fields []pyField, d bodyDialect) (map[string]any, bool) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeVLLMError(w, http.StatusBadRequest, "BadRequestError", err.Error(), nil)
		return nil, false
	}
	ct := r.Header.Get("Content-Type")
	media, _, _ := mime.ParseMediaType(ct)
	media = strings.ToLower(media)
	// FastAPI decodes the body as JSON when it has no content type or a
	// JSON one, before the dependencies run.
	var v any
	decoded := false
	if len(raw) > 0 && (ct == "" || media == "application/json" || strings.HasPrefix(media, "application/") && strings.HasSuffix(media, "+json")) {
		if err := json.Unmarshal(raw, &v); err != nil {
			pos := 0
			var se *json.SyntaxError
			if errors.As(err, &se) {
				pos = int(se.Offset)
			}
			d.refuse(w, []pyError{{typ: "json_invalid", loc: []any{"body", pos}, msg: "JSON decode error", input: map[string]any{},
				ctx: map[string]any{"error": err.Error()}}})
			return nil, false
		}
		decoded = true
	}
	// validate_json_request (vllm/entrypoints/serve/utils/api_utils.py:
	// 336-342).
	if d.jsonOnly && media != "application/json" {
		d.refuse(w, []pyError{{plain: "Unsupported Media Type: Only 'application/json' is allowed"}})
		return nil, false
	}
	if len(raw) == 0 {
		d.refuse(w, []pyError{{typ: "missing", loc: []any{"body"}, msg: "Field required", input: nil}})
		return nil, false
	}
	if !decoded {
		// Another content type: FastAPI hands the model the raw bytes.
		v = pyBytes(raw)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		e := d.notObject
		e.loc, e.input = []any{"body"}, v
		d.refuse(w, []pyError{e})
		return nil, false
	}
	var errs []pyError
	out := map[string]any{}
	for _, f := range fields {
		x, given := obj[f.name]
		loc := []any{"body", f.name}
		switch {
		case !given && f.required:
			errs = append(errs, pyError{typ: "missing", loc: loc, msg: "Field required", input: obj})
		case !given:
			out[f.name] = nil
		case f.typ == "str":
			if sv, ok := x.(string); ok {
				out[f.name] = sv
			} else {
				errs = append(errs, pyError{typ: "string_type", loc: loc, msg: "Input should be a valid string", input: x})
			}
		case f.typ == "bool":
			if b, ok := pyLaxBool(x); ok {
				out[f.name] = b
			} else if _, isStr := x.(string); isStr {
				errs = append(errs, pyError{typ: "bool_parsing", loc: loc, msg: "Input should be a valid boolean, unable to interpret input", input: x})
			} else {
				errs = append(errs, pyError{typ: "bool_type", loc: loc, msg: "Input should be a valid boolean", input: x})
			}
		case f.typ == "str|None":
			if x == nil {
				out[f.name] = nil
			} else if sv, ok := x.(string); ok {
				out[f.name] = sv
			} else {
				errs = append(errs, pyError{typ: "string_type", loc: loc, msg: "Input should be a valid string", input: x})
			}
		case f.typ == "int|None":
			if e, ok := pyLaxIntOrNone(x); ok {
				out[f.name] = e
			} else {
				e := pyError{typ: "int_type", loc: loc, msg: "Input should be a valid integer", input: x}
				switch xv := x.(type) {
				case string:
					e.typ, e.msg = "int_parsing", "Input should be a valid integer, unable to parse string as an integer"
				case float64:
					if xv != math.Trunc(xv) {
						e.typ, e.msg = "int_from_float", "Input should be a valid integer, got a number with a fractional part"
					}
				}
				errs = append(errs, e)
			}
		}
	}
	if len(errs) > 0 {
		d.refuse(w, errs)
		return nil, false
	}
	return out, true
}

// pyError is one error of a RequestValidationError: pydantic's error
// dictionary, or a plain string (validate_json_request's).
type pyError struct {
	typ   string
	loc   []any
	msg   string
	input any
	ctx   map[string]any
	plain string
}

func (e pyError) repr() string {
	if e.plain != "" {
		return e.plain
	}
	locs := make([]string, len(e.loc))
	for i, l := range e.loc {
		locs[i] = pyRepr(l)
	}
	loc := "(" + strings.Join(locs, ", ")
	if len(locs) == 1 {
		loc += ","
	}
	loc += ")"
	out := fmt.Sprintf("{'type': %s, 'loc': %s, 'msg': %s, 'input': %s", pyRepr(e.typ), loc, pyRepr(e.msg), pyRepr(e.input))
	if e.ctx != nil {
		out += ", 'ctx': " + pyRepr(e.ctx)
	}
	return out + "}"
}

// writeValidation answers as vLLM's validation_exception_handler
// (vllm/entrypoints/serve/exception_handling/handlers/validation.py:
// 95-138): 400, type "Bad Request", param the first error's location
// joined with dots (none for a plain string), the message "N validation
// error(s):" and each error on a line of its own, indented two spaces.
func writeValidation(w http.ResponseWriter, errs []pyError) {
	label := "error"
	if len(errs) != 1 {
		label = "errors"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d validation %s:\n", len(errs), label)
	for _, e := range errs {
		b.WriteString("  " + e.repr() + "\n")
	}
	var param *string
	if len(errs) > 0 && errs[0].plain == "" {
		parts := make([]string, len(errs[0].loc))
		for i, l := range errs[0].loc {
			parts[i] = fmt.Sprint(l)
		}
		p := strings.Join(parts, ".")
		param = &p
	}
	writeVLLMError(w, http.StatusBadRequest, "Bad Request", strings.TrimRight(b.String(), " \n"), param)
}

// pyBytes is a body FastAPI did not decode: Python's bytes.
type pyBytes []byte

// pyRepr is Python's repr of a value read from JSON (or a location).
func pyRepr(v any) string {
	switch x := v.(type) {
	case pyBytes:
		return "b" + pyRepr(string(x))
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int:
		return strconv.Itoa(x)
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e16 {
			return strconv.FormatFloat(x, 'f', 0, 64)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		q := "'"
		if strings.Contains(x, "'") && !strings.Contains(x, `"`) {
			q = `"`
		}
		r := strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`, "\t", `\t`, q, `\`+q)
		return q + r.Replace(x) + q
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = pyRepr(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		// Python keeps a dict's insertion order; Go's JSON map has none.
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = pyRepr(k) + ": " + pyRepr(x[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return fmt.Sprint(v)
}

// pyType is the Python type name of a value read from JSON.
func pyType(v any) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case float64:
		return "float"
	case string:
		return "str"
	case []any:
		return "list"
	}
	return "dict"
}

// pyNumber is a JSON value as a Python number compares: numbers, and
// bools as 0 and 1.
func pyNumber(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// pyTruthy is Python's truth of a value read from JSON.
func pyTruthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case float64:
		return x != 0
	case string:
		return x != ""
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}

// pyBool is a field pydanticBody read as a bool (nil: false).
func pyBool(v any) bool {
	b, _ := v.(bool)
	return b
}

// pyLaxBool is pydantic 2's lax bool: JSON true and false, 0 and 1, and
// the strings it reads as either.
func pyLaxBool(v any) (bool, bool) {
	switch x := v.(type) {
	case bool:
		return x, true
	case float64:
		if x == 0 || x == 1 {
			return x == 1, true
		}
	case string:
		switch strings.ToLower(x) {
		case "0", "off", "f", "false", "n", "no":
			return false, true
		case "1", "on", "t", "true", "y", "yes":
			return true, true
		}
	}
	return false, false
}

// pyLaxIntOrNone is pydantic 2's lax int | None: null, a whole number, or
// a string of one.
func pyLaxIntOrNone(v any) (any, bool) {
	switch x := v.(type) {
	case nil:
		return nil, true
	case float64:
		if x == math.Trunc(x) {
			return int(x), true
		}
	case string:
		if n, err := strconv.Atoi(strings.TrimSpace(x)); err == nil {
			return n, true
		}
	}
	return nil, false
}
