package driver

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	gguf "github.com/gpustack/gguf-parser-go"

	"github.com/llmgw/llmgw/engine"
)

// AdapterConfig is one adapter block of a task's config: a LoRA adapter
// the engine loads at start beside the model (llmgw's controller renders
// them from the catalog's adapter blocks, in its order).
type AdapterConfig struct {
	// Name is what requests name the adapter by.
	Name string `codec:"name"`
	// Path is the adapter on the node: a GGUF file for llama.cpp, a PEFT
	// directory for vLLM and SGLang.
	Path string `codec:"path"`
	// Rank is the adapter's LoRA rank; 0 unknown.
	Rank int `codec:"rank"`
}

// adapterSpec is what engine.AdapterArgs takes of the task's adapters.
func adapterSpec(as []AdapterConfig, slots int) engine.AdapterSpec {
	s := engine.AdapterSpec{Slots: slots}
	for _, a := range as {
		s.Adapters = append(s.Adapters, engine.Adapter{Name: a.Name, Path: a.Path, Rank: a.Rank})
	}
	return s
}

// badAdapter is an adapter left out of the engine's command line, and why.
type badAdapter struct {
	AdapterConfig
	err error
}

// checkGGUFAdapters checks each of llama.cpp's adapters against its model
// file before the engine starts: llama-server loads every adapter before
// it listens, and one it cannot load makes it exit, base model included
// (internal/testing/realengine, TestLoraBadAdapters). It returns the
// adapters that pass, in their order, and those that do not, with the
// cause. readable reports whether the engine's user may read a file.
func checkGGUFAdapters(modelPath string, as []AdapterConfig, readable func(string) error) (ok []AdapterConfig, bad []badAdapter) {
	if len(as) == 0 {
		return nil, nil
	}
	model, merr := readGGUF(modelPath)
	if merr != nil {
		merr = fmt.Errorf("the model file: %w", merr)
	}
	for _, a := range as {
		err := merr
		if err == nil {
			err = readable(a.Path)
		}
		if err == nil {
			err = checkGGUFAdapter(model, a.Path)
		}
		if err != nil {
			bad = append(bad, badAdapter{a, err})
			continue
		}
		ok = append(ok, a)
	}
	return ok, bad
}

// checkPEFTAdapters checks each adapter of vLLM or SGLang before the
// engine starts: a PEFT directory holding adapter_config.json that the
// engine's user may read. vLLM loads every --lora-modules item before it
// listens and stops on the first it cannot load
// (OpenAIServingModels.init_static_loras raises; a directory without the
// config is "Loading lora NAME failed: No adapter found for PATH"), base
// model included. Shapes, ranks and target modules are not checked: the
// weights' format is the engine's to read. It returns the adapters that
// pass, in their order, and those that do not, with the cause.
func checkPEFTAdapters(as []AdapterConfig, readable func(string) error) (ok []AdapterConfig, bad []badAdapter) {
	for _, a := range as {
		err := checkPEFTDir(a.Path)
		if err == nil {
			err = readable(filepath.Join(a.Path, "adapter_config.json"))
		}
		if err != nil {
			bad = append(bad, badAdapter{a, err})
			continue
		}
		ok = append(ok, a)
	}
	return ok, bad
}

func checkPEFTDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (a PEFT adapter is a directory with adapter_config.json and the weights)", dir)
	}
	cfg := filepath.Join(dir, "adapter_config.json")
	fi, err = os.Stat(cfg)
	if err != nil {
		return fmt.Errorf("%s holds no adapter_config.json: not a PEFT adapter", dir)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", cfg)
	}
	return nil
}

// ggufFile is what the check reads of a GGUF file.
type ggufFile struct {
	kind, arch, adapterType string
	tensors                 map[string]gguf.GGUFTensorInfo
	order                   []string // tensor names as the file lists them
	dataStart, size         int64
}

func readGGUF(path string) (*ggufFile, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	f, err := gguf.ParseGGUFFile(path, gguf.SkipLargeMetadata())
	if err != nil {
		return nil, fmt.Errorf("%s: not a readable GGUF file: %w", path, err)
	}
	str := func(key string) string {
		if kv, ok := f.Header.MetadataKV.Get(key); ok && kv.ValueType == gguf.GGUFMetadataValueTypeString {
			return kv.ValueString()
		}
		return ""
	}
	g := &ggufFile{
		kind: str("general.type"), arch: str("general.architecture"), adapterType: str("adapter.type"),
		tensors: map[string]gguf.GGUFTensorInfo{}, dataStart: f.TensorDataStartOffset, size: int64(f.Size),
	}
	for _, t := range f.TensorInfos {
		g.tensors[t.Name] = t
		g.order = append(g.order, t.Name)
	}
	return g, nil
}

// ne is a tensor's dimension i, ggml's ne[i] (1 beyond its dimensions).
func ne(t gguf.GGUFTensorInfo, i int) uint64 {
	if i < len(t.Dimensions) {
		return t.Dimensions[i]
	}
	return 1
}

// checkGGUFAdapter checks the adapter file at path as llama.cpp
// validates an adapter for a model at 80fb11a (src/llama-adapter.cpp,
// llama_adapter_lora_init_impl): its general.type is "adapter", its
// architecture the model's and its adapter.type "lora"; its tensors are
// pairs X.lora_a and X.lora_b (besides *_norm.weight, which it ignores),
// X is a tensor of the model, and the shapes fit X (for token_embd, with A
// and B swapped); and every tensor's data lies within the file.
func checkGGUFAdapter(model *ggufFile, path string) error {
	a, err := readGGUF(path)
	if err != nil {
		return err
	}
	switch {
	case a.kind != "adapter":
		return fmt.Errorf("%s: general.type is %q, not \"adapter\" (a model file, not a LoRA adapter?)", path, a.kind)
	case a.arch != model.arch:
		return fmt.Errorf("%s: the adapter's architecture %q is not the model's, %q", path, a.arch, model.arch)
	case a.adapterType != "lora":
		return fmt.Errorf("%s: adapter.type is %q, not \"lora\"", path, a.adapterType)
	}
	type pair struct{ a, b *gguf.GGUFTensorInfo }
	pairs := map[string]*pair{}
	var names []string
	for _, name := range a.order {
		t := a.tensors[name]
		var base string
		var isA bool
		switch {
		case strings.HasSuffix(name, ".lora_a"):
			base, isA = strings.TrimSuffix(name, ".lora_a"), true
		case strings.HasSuffix(name, ".lora_b"):
			base = strings.TrimSuffix(name, ".lora_b")
		case strings.HasSuffix(name, "_norm.weight"):
			continue
		default:
			return fmt.Errorf("%s: tensor %q is neither a .lora_a nor a .lora_b", path, name)
		}
		p := pairs[base]
		if p == nil {
			p = &pair{}
			pairs[base] = p
			names = append(names, base)
		}
		if isA {
			p.a = &t
		} else {
			p.b = &t
		}
		end := a.dataStart + int64(t.Offset) + int64(t.Bytes())
		if end > a.size || end < a.dataStart {
			return fmt.Errorf("%s: the data of tensor %q ends past the file's %d bytes (truncated or corrupt)", path, name, a.size)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		p := pairs[name]
		if p.a == nil || p.b == nil {
			return fmt.Errorf("%s: tensor %q has only one of its .lora_a and .lora_b", path, name)
		}
		w, ok := model.tensors[name]
		if !ok {
			return fmt.Errorf("%s: tensor %q is not in the model (an adapter for another base model?)", path, name)
		}
		shape := fmt.Sprintf("model %v, lora_a %v, lora_b %v", w.Dimensions, p.a.Dimensions, p.b.Dimensions)
		if strings.HasSuffix(name, "token_embd.weight") {
			if ne(w, 0) != ne(*p.b, 1) || ne(w, 1) != ne(*p.a, 1) {
				return fmt.Errorf("%s: tensor %q does not fit the model's shape (%s; an adapter for another base model?)", path, name, shape)
			}
			continue
		}
		if ne(w, 0) != ne(*p.a, 0) || ne(w, 1) != ne(*p.b, 1) {
			return fmt.Errorf("%s: tensor %q does not fit the model's shape (%s; an adapter for another base model?)", path, name, shape)
		}
		if ne(*p.a, 1) != ne(*p.b, 0) {
			return fmt.Errorf("%s: tensor %q: lora_a's rank %d is not lora_b's %d (lora_a not transposed?)", path, name, ne(*p.a, 1), ne(*p.b, 0))
		}
	}
	return nil
}
