package fakeengine

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// LoRA adapters, as the engines fake-engine impersonates load them at
// start and list them:
//
//   - vLLM (--enable-lora, --lora-modules ITEM…, each {"name","path"} JSON
//     or name=path): every module is loaded before the server listens
//     (OpenAIServingModels.init_static_loras, serving.py:124-139 at
//     53e211d, which raises ValueError with the load's error message on
//     the first that fails, and the server does not start), through the
//     same load as a runtime one (loraruntime.go: loadAdapter's checks; a
//     module whose path holds no adapter_config.json fails with "Loading
//     lora NAME failed: No adapter found for PATH", a name given twice
//     with "The lora adapter 'NAME' has already been loaded. …"; messages
//     through sanitize_message). GET /v1/models lists each loaded adapter
//     after the base model as {"id": name, "root": path, "parent": the
//     base model's name}, and requests name it as their model.
//   - SGLang (--lora-paths ITEM…): sglanglora.go.
//   - llama.cpp (--lora A,B): every file is loaded before the server
//     listens; one that is not there fails with "failed to load lora
//     adapter file from PATH" (src/llama-adapter.cpp at 80fb11a) and exit
//     status 1. GET /lora-adapters lists them as {"id", "path", "scale",
//     "task_name", "prompt_prefix"}, id their index, scale 1.
//
// fake-engine reads no weights: it has none to check shapes against.

// Adapter is one LoRA adapter given on the command line.
type Adapter struct {
	// Name is vLLM's module name, SGLang's lora_name; "" for llama.cpp's.
	Name string
	Path string
	// Pinned is SGLang's pinned: never the one unloaded to make room.
	Pinned bool
}

// parseLoRAModule reads one --lora-modules item as vLLM's LoRAParserAction
// does: JSON where it starts with '{', else name=path.
func parseLoRAModule(item string) (Adapter, error) {
	if strings.HasPrefix(item, "{") {
		var m struct {
			Name string `json:"name"`
			Path string `json:"path"`
		}
		if err := json.Unmarshal([]byte(item), &m); err != nil || m.Name == "" || m.Path == "" {
			return Adapter{}, fmt.Errorf("%w: --lora-modules %s: want {\"name\": …, \"path\": …}", ErrUsage, item)
		}
		return Adapter{Name: m.Name, Path: m.Path}, nil
	}
	name, path, ok := strings.Cut(item, "=")
	if !ok || name == "" || path == "" {
		return Adapter{}, fmt.Errorf("%w: --lora-modules %s: want name=path or JSON", ErrUsage, item)
	}
	return Adapter{Name: name, Path: path}, nil
}

// adapters are the adapters the engine cfg impersonates loads.
func (c Config) adapters() []Adapter {
	switch c.Engine {
	case EngineVLLM:
		return c.LoRAModules
	case EngineLlamaCpp:
		return c.LoRAFiles
	case EngineSGLang:
		return c.LoRAPaths
	}
	return nil
}

// LoadAdapters checks the adapters as the engine loads them at start,
// and returns what it would say as it exits where one fails.
func LoadAdapters(c Config) error {
	if c.Engine == EngineSGLang {
		_, err := sglangStart(c)
		return err
	}
	seen := map[string]bool{}
	for _, a := range c.adapters() {
		switch c.Engine {
		case EngineVLLM:
			if seen[a.Name] {
				// vLLM's message ends with a full stop.
				return errors.New("ValueError: The lora adapter '" + a.Name + "' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.")
			}
			seen[a.Name] = true
			if e := loadAdapter(c, a.Name, a.Path); e != nil {
				return errors.New("ValueError: " + sanitizeMessage(e.msg))
			}
		case EngineLlamaCpp:
			if fi, err := os.Stat(a.Path); err != nil || !fi.Mode().IsRegular() {
				return fmt.Errorf("llama_adapter_lora_init: failed to apply lora adapter: failed to load lora adapter file from %s\ncommon_init_: failed to load lora adapter '%s'", a.Path, a.Path)
			}
		}
	}
	return nil
}

// loraAdapters answers llama.cpp's GET /lora-adapters.
func (s *Server) loraAdapters(w http.ResponseWriter, _ *http.Request) {
	if s.cfg.Engine != EngineLlamaCpp {
		writeError(w, http.StatusNotFound, "Not Found")
		return
	}
	type entry struct {
		ID           int     `json:"id"`
		Path         string  `json:"path"`
		Scale        float64 `json:"scale"`
		TaskName     string  `json:"task_name"`
		PromptPrefix string  `json:"prompt_prefix"`
	}
	out := []entry{}
	for i, a := range s.cfg.LoRAFiles {
		out = append(out, entry{ID: i, Path: a.Path, Scale: 1})
	}
	writeJSON(w, http.StatusOK, out)
}
