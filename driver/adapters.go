package driver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	gguf "github.com/gpustack/gguf-parser-go"

	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/nomadplugin/pb/driverpb"
	"github.com/llmgw/llmgw/weights"
	"github.com/llmgw/llmgw/weightsapi"
)

// AdapterConfig is one adapter block of a task's config: a LoRA adapter
// the engine loads at start beside the model (llmgw's controller renders
// them from the catalog's adapter blocks, in its order).
type AdapterConfig struct {
	// Name is what requests name the adapter by.
	Name string `codec:"name"`
	// Path is the adapter on the node: a GGUF file for llama.cpp, a PEFT
	// directory for vLLM and SGLang. Without it, Weights says what the
	// node's store fetches (and the driver sets Path to its link).
	Path string `codec:"path"`
	// Source and Weights, instead of Path: the adapter's files as a
	// task's weights block names a model's, the hub repository being
	// Source (a weights block with urls takes no Source).
	Source  string         `codec:"source"`
	Weights *WeightsConfig `codec:"weights"`
	// Rank is the adapter's LoRA rank; 0 unknown.
	Rank int `codec:"rank"`
}

// fetched reports whether the node's store fetches the adapter.
func (a AdapterConfig) fetched() bool { return a.Weights != nil }

// validate checks the adapter's source: a path, or a weights block.
func (a AdapterConfig) validate() error {
	switch {
	case a.Weights != nil && a.Path != "":
		return fmt.Errorf("adapter %q: path and weights are both given: give one", a.Name)
	case a.Weights == nil && a.Source != "":
		return fmt.Errorf("adapter %q: source is a weights block's hub repository: give the weights block", a.Name)
	case a.Weights == nil && a.Path == "":
		return fmt.Errorf("adapter %q: give path, or a weights block the node's store fetches", a.Name)
	case a.Weights != nil && len(a.Weights.URLs) > 0 && a.Source != "":
		return fmt.Errorf("adapter %q: source is for a hub repository; with weights.urls, leave it out", a.Name)
	case a.Weights != nil:
		if err := weightsapi.CheckAdapterLinkName(a.Name); err != nil {
			return fmt.Errorf("adapter %q: name: %w", a.Name, err)
		}
		if _, err := a.source(); err != nil {
			return err
		}
	}
	return nil
}

// fetchAdapters makes the node's store hold each adapter of tc that it
// fetches (a weights block), as it does a model's weights (once per node,
// resumed, verified against its sha256), each step a task event naming
// the adapter, and points the adapter at its link in the task's directory
// (<task dir>/llmgw-adapters/<name>, to the store's GGUF file for
// llama.cpp, else to the PEFT directory): the engine loads the verified
// files and lists the adapter by a path whose tail the controller and the
// gateways know (weightsapi.AdapterLink). An adapter that cannot be
// fetched or linked is left out of tc.Adapters and returned with the
// cause, so that the engine starts without it; the others keep their
// order. keys are the store's keys of the adapters it holds for the task,
// to lease.
func fetchAdapters(ctx context.Context, conf Config, task *driverpb.TaskConfig, tc *TaskConfig, emit eventFunc) (bad []badAdapter, keys []string) {
	if !slices.ContainsFunc(tc.Adapters, AdapterConfig.fetched) {
		return nil, nil
	}
	linkDir := filepath.Join(task.GetAllocDir(), task.GetName(), weightsapi.AdapterDir)
	store, serr := openStore(conf)
	var kept []AdapterConfig
	for _, a := range tc.Adapters {
		if !a.fetched() {
			kept = append(kept, a)
			continue
		}
		link := filepath.Join(linkDir, a.Name)
		if tc.Engine == engine.LlamaCpp && strings.Contains(link, ",") {
			bad = append(bad, badAdapter{a, fmt.Errorf("its link %s holds a comma (in the task directory's path), which llama.cpp's --lora reads as a separator", link)})
			continue
		}
		// Whatever an earlier start of the task linked goes first: the
		// engine finds this start's adapter there, or nothing.
		if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
			bad = append(bad, badAdapter{a, fmt.Errorf("remove the earlier link %s: %w", link, err)})
			continue
		}
		src, err := a.source()
		if err == nil {
			err = serr
		}
		var m weights.Model
		if err == nil {
			m, err = store.Ensure(ctx, src, hubToken(task), func(e weights.Event) {
				ann := maps.Clone(e.Annotations)
				if ann == nil {
					ann = map[string]string{}
				}
				ann["adapter"] = a.Name
				emit(time.Time{}, fmt.Sprintf("LoRA adapter %q: %s", a.Name, e.Message), ann)
			})
		}
		if err == nil {
			keys = append(keys, m.Key)
			err = linkAdapter(tc.Engine, m, link)
		}
		if err != nil {
			bad = append(bad, badAdapter{a, err})
			continue
		}
		a.Path = link
		kept = append(kept, a)
	}
	tc.Adapters = kept
	return bad, keys
}

// linkAdapter links the adapter the store holds as m at link: for
// llama.cpp its one GGUF file, for vLLM and SGLang the directory of its
// adapter_config.json (the model's directory when it has none, which the
// PEFT check then names).
func linkAdapter(eng string, m weights.Model, link string) error {
	var names []string
	for _, f := range m.Files {
		names = append(names, f.Name)
	}
	var target string
	if eng == engine.LlamaCpp {
		var ggufs []string
		for _, n := range names {
			if strings.HasSuffix(strings.ToLower(n), ".gguf") {
				ggufs = append(ggufs, n)
			}
		}
		switch {
		case len(ggufs) == 1:
			target = filepath.Join(m.Dir, ggufs[0])
		case len(names) == 1:
			target = filepath.Join(m.Dir, names[0])
		default:
			return fmt.Errorf("%s: %d GGUF files of %d (%s): llama.cpp loads an adapter from one GGUF file; name it alone in the source's files",
				m.Source, len(ggufs), len(names), strings.Join(names, ", "))
		}
	} else {
		var configs []string
		for _, n := range names {
			if path.Base(n) == "adapter_config.json" {
				configs = append(configs, n)
			}
		}
		switch len(configs) {
		case 0:
			target = m.Dir
		case 1:
			target = filepath.Join(m.Dir, path.Dir(configs[0]))
		default:
			return fmt.Errorf("%s: %d adapter_config.json files (%s): a PEFT adapter is one directory; name one adapter's files in the source",
				m.Source, len(configs), strings.Join(configs, ", "))
		}
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return fmt.Errorf("the adapter's link: %w", err)
	}
	if err := os.Symlink(target, link); err != nil {
		return fmt.Errorf("the adapter's link: %w", err)
	}
	return nil
}

// source is the store's source of an adapter with a weights block.
func (a AdapterConfig) source() (weights.Source, error) {
	src, err := sourceOf(*a.Weights, a.Source, "")
	if err != nil {
		if src.Hub != nil {
			err = fmt.Errorf("%w (source names the repository)", err)
		}
		return weights.Source{}, fmt.Errorf("adapter %q: %w", a.Name, err)
	}
	return src, nil
}

// adapterSpec is what engine.AdapterArgs takes of the task's adapters. An
// adapter the store fetches, not fetched yet, has its link's path under a
// task directory of "/": what is checked of it before the real one is
// known.
func adapterSpec(as []AdapterConfig, slots int) engine.AdapterSpec {
	s := engine.AdapterSpec{Slots: slots}
	for _, a := range as {
		p := a.Path
		if p == "" && a.fetched() {
			p = "/" + weightsapi.AdapterLink(a.Name)
		}
		s.Adapters = append(s.Adapters, engine.Adapter{Name: a.Name, Path: p, Rank: a.Rank})
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
