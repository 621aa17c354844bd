package facility

import (
	"fmt"
	"math"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/llmgw/llmgw/engine"
	"github.com/llmgw/llmgw/weightsapi"
)

// Adapter is one LoRA adapter of a model (an adapter block): its replicas
// serve it beside the base model, and a request names it by Name.
type Adapter struct {
	// Name is the adapter's name in requests and /v1/models; unique in the
	// whole catalog, models' names included.
	Name string
	// Weights is where the adapter's files are. Only a path on every node
	// (path): the engine's own form, a GGUF file for llama.cpp, a PEFT
	// directory for vLLM and SGLang. Adapters fetched by the nodes' stores
	// (a hub repository, URLs) are not supported yet.
	Weights weightsapi.Source
	// Scale is how strongly the adapter applies (llama.cpp's per-request
	// scale); 1 unless given.
	Scale float64
	// Rank is the adapter's LoRA rank where the catalog says it (vLLM's
	// --max-lora-rank is rendered from the largest); 0: unknown.
	Rank int
	Pos  Pos
}

// Adapter limits.
const (
	maxAdapterRank  = 1 << 16
	maxAdapterScale = 100
)

// adapterHCL is an adapter block of a model.
type adapterHCL struct {
	Name     string    `hcl:"name,label"`
	Path     string    `hcl:"path"`
	Scale    float64   `hcl:"scale,optional"`
	Rank     int       `hcl:"rank,optional"`
	DefRange hcl.Range `hcl:",def_range"`
	Body     hcl.Body  `hcl:",body"`
}

// adapters reads a model's adapter blocks and max_adapters, each problem
// at its line; what needs the whole catalog (names against other models)
// or the profiles (the engine) Validate checks.
func (d *decoder) adapters(m *Model, rm *modelHCL) {
	d.intIn(rm.Body, "max_adapters", rm.MaxAdapters, &m.MaxAdapters, 1, engine.MaxAdapters)
	if len(rm.Adapters) == 0 {
		if r, ok := d.Given(rm.Body, "max_adapters"); ok {
			d.errorf(r, "model %q: max_adapters without an adapter block", m.Name)
		}
		return
	}
	for _, ra := range rm.Adapters {
		a := Adapter{Name: ra.Name, Weights: weightsapi.Source{Path: ra.Path}, Scale: 1, Pos: d.pos(ra.DefRange)}
		if r, ok := d.Given(ra.Body, "scale"); ok {
			if err := checkScale(ra.Scale); err != nil {
				d.errorf(r, "model %q: adapter %q: %v", m.Name, a.Name, err)
			} else {
				a.Scale = ra.Scale
			}
		}
		if r, ok := d.Given(ra.Body, "rank"); ok {
			if err := checkInt("rank", ra.Rank, 1, maxAdapterRank); err != nil {
				d.errorf(r, "model %q: adapter %q: %v", m.Name, a.Name, err)
			} else {
				a.Rank = ra.Rank
			}
		}
		m.Adapters = append(m.Adapters, a)
	}
}

func checkScale(s float64) error {
	if math.IsNaN(s) || math.IsInf(s, 0) || s <= 0 || s > maxAdapterScale {
		return fmt.Errorf("scale: want a number above 0 and at most %d, got %v", maxAdapterScale, s)
	}
	return nil
}

// AdapterSpec is what the model's replicas serve of adapters, as the
// engines' recipes take it (engine.AdapterArgs).
func (m Model) AdapterSpec() engine.AdapterSpec {
	s := engine.AdapterSpec{Slots: m.MaxAdapters}
	for _, a := range m.Adapters {
		s.Adapters = append(s.Adapters, engine.Adapter{Name: a.Name, Path: a.Weights.Path, Rank: a.Rank})
	}
	return s
}

// validateAdapters is Validate's part for one model's adapters: each
// adapter on its own and against the model's other adapters, and the
// model's profiles' engines against them. taken holds every model's name
// and every adapter seen so far in the catalog, by name, with where.
func (m Model) validateAdapters(taken map[string]string) []error {
	var errs []error
	at := func(a Adapter, format string, args ...any) {
		errs = append(errs, errAt(a.Pos, fmt.Sprintf("model %q: adapter %q: ", m.Name, a.Name)+fmt.Sprintf(format, args...)))
	}
	if len(m.Adapters) == 0 {
		if m.MaxAdapters != 0 {
			errs = append(errs, errAt(m.Pos, fmt.Sprintf("model %q: max_adapters %d without an adapter", m.Name, m.MaxAdapters)))
		}
		return errs
	}
	if err := checkInt("max_adapters", m.MaxAdapters, 0, engine.MaxAdapters); err != nil {
		errs = append(errs, errAt(m.Pos, fmt.Sprintf("model %q: %v", m.Name, err)))
	}
	if len(m.Adapters) > engine.MaxAdapters {
		errs = append(errs, errAt(m.Pos, fmt.Sprintf("model %q: %d adapters, at most %d", m.Name, len(m.Adapters), engine.MaxAdapters)))
	}
	paths := map[string]string{}
	for _, a := range m.Adapters {
		if err := checkName("adapter", a.Name); err != nil {
			at(a, "%v", err)
		} else if strings.ContainsAny(a.Name, ":\"'{}") || strings.HasPrefix(a.Name, "-") {
			at(a, "the name may not hold ':' (requests may name an adapter as model:adapter), quotes or braces, nor start with '-'")
		}
		where, dupName := taken[a.Name]
		if dupName {
			at(a, "the name is taken: %s", where)
		} else {
			taken[a.Name] = fmt.Sprintf("adapter of model %q at %s", m.Name, a.Pos)
		}
		if a.Weights.Path == "" || a.Weights.Hub != nil || len(a.Weights.URLs) > 0 {
			at(a, "path: give the adapter's path on every node (adapters the nodes' stores fetch are not supported yet)")
		} else if err := a.Weights.Validate(); err != nil {
			at(a, "%s", strings.TrimPrefix(err.Error(), "weights."))
		} else if other, dup := paths[a.Weights.Path]; dup && !dupName {
			// llama.cpp lists its adapters by path (GET /lora-adapters),
			// which is how llmgw tells them apart.
			at(a, "path %q is also adapter %q's", a.Weights.Path, other)
		} else {
			paths[a.Weights.Path] = a.Name
		}
		if err := checkScale(a.Scale); err != nil {
			at(a, "%v", err)
		}
		if err := checkInt("rank", a.Rank, 0, maxAdapterRank); err != nil {
			at(a, "%v", err)
		}
	}
	if len(errs) > 0 {
		return errs
	}
	spec := m.AdapterSpec()
	for _, p := range m.Profiles {
		if !engine.Known(p.Engine) {
			continue // reported on its own
		}
		if _, err := engine.AdapterArgs(p.Engine, spec); err != nil {
			errs = append(errs, errAt(p.Pos, fmt.Sprintf("profile %s/%s: %v", m.Name, p.Name, err)))
		}
		if err := engine.CheckAdapterArgs(p.Engine, p.Args); err != nil {
			errs = append(errs, errAt(p.Pos, fmt.Sprintf("profile %s/%s: %v", m.Name, p.Name, err)))
		}
	}
	return errs
}
