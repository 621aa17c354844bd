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
	// Weights is where the adapter's files are, in the engine's own form
	// (a GGUF file for llama.cpp, a PEFT directory for vLLM and SGLang):
	// a path on every node, or, like a model's weights, a hub repository
	// at a revision or URLs, which each node's store fetches and verifies
	// before the engine starts (the driver links them into the replica's
	// task directory: EnginePath).
	Weights weightsapi.Source
	// Scale is how strongly the adapter applies (llama.cpp's per-request
	// scale); 1 unless given.
	Scale float64
	// Rank is the adapter's LoRA rank where the catalog says it (vLLM's
	// --max-lora-rank is rendered from the largest); 0: unknown.
	Rank int
	Pos  Pos
}

// Fetched reports whether the nodes' stores fetch the adapter (a hub
// repository or URLs), rather than find it at a path.
func (a Adapter) Fetched() bool { return a.Weights.Hub != nil || len(a.Weights.URLs) > 0 }

// EnginePath is the path the replicas' engines load the adapter from, as
// the gateways and the controller know it (gatewayapi.ListedAdapter's
// Path): its path on the nodes, or, for an adapter the stores fetch, the
// driver's link relative to the replica's task directory
// (weightsapi.AdapterLink).
func (a Adapter) EnginePath() string {
	if a.Fetched() {
		return weightsapi.AdapterLink(a.Name)
	}
	return a.Weights.Path
}

// Adapter limits.
const (
	maxAdapterRank  = 1 << 16
	maxAdapterScale = 100
)

// adapterHCL is an adapter block of a model: path, or source and a
// weights block as a model's.
type adapterHCL struct {
	Name     string      `hcl:"name,label"`
	Path     string      `hcl:"path,optional"`
	Source   string      `hcl:"source,optional"`
	Weights  *weightsHCL `hcl:"weights,block"`
	Scale    float64     `hcl:"scale,optional"`
	Rank     int         `hcl:"rank,optional"`
	DefRange hcl.Range   `hcl:",def_range"`
	Body     hcl.Body    `hcl:",body"`
}

// adapters reads a model's adapter blocks and max_adapters, each problem
// at its line; what needs the whole catalog (names against other models)
// or the profiles (the engine) Validate checks.
func (d *decoder) adapters(m *Model, rm *modelHCL) {
	d.intIn(rm.Body, "max_adapters", rm.MaxAdapters, &m.MaxAdapters, 1, engine.MaxAdapters)
	if r, ok := d.Given(rm.Body, "adapter_loading"); ok {
		if err := checkAdapterLoading(rm.AdapterLoading); err != nil {
			d.errorf(r, "model %q: %v", m.Name, err)
		} else {
			m.AdapterLoading = rm.AdapterLoading
		}
	}
	if len(rm.Adapters) == 0 {
		for _, attr := range []string{"max_adapters", "adapter_loading"} {
			if r, ok := d.Given(rm.Body, attr); ok {
				d.errorf(r, "model %q: %s without an adapter block", m.Name, attr)
			}
		}
		return
	}
	for _, ra := range rm.Adapters {
		a := Adapter{Name: ra.Name, Scale: 1, Pos: d.pos(ra.DefRange)}
		d.adapterSource(m, &a, &ra)
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

// adapterSource sets a.Weights from the adapter's path, or its source and
// weights block, read as a model's (weightsSource), each problem at its
// line.
func (d *decoder) adapterSource(m *Model, a *Adapter, ra *adapterHCL) {
	who := fmt.Sprintf("model %q: adapter %q", m.Name, a.Name)
	pathAt, hasPath := d.Given(ra.Body, "path")
	sourceAt, hasSource := d.Given(ra.Body, "source")
	switch {
	case ra.Weights != nil && d.Has(ra.Body, "path"):
		d.errorf(pathAt, "%s: path and a weights block are both given: give one (path: the adapter already on every node; weights: what each node's store fetches)", who)
	case ra.Weights != nil:
		if src := d.weightsSource(weightsOwner{who: who, owner: "adapter", body: ra.Body, source: ra.Source}, ra.Weights); src != nil {
			a.Weights = *src
		}
		if hasSource && (d.Has(ra.Weights.Body, "urls") || d.Has(ra.Weights.Body, "path")) {
			d.errorf(sourceAt, "%s: source is the hub repository of the weights block; with its urls or path, leave it out", who)
		}
	case hasSource:
		d.errorf(sourceAt, "%s: source names a hub repository: add a weights block with its files (and revision), which each node's store fetches", who)
	case hasPath && ra.Path == "":
		d.errorf(pathAt, "%s: path: give the adapter's clean absolute path on every node", who)
	case hasPath:
		a.Weights = weightsapi.Source{Path: ra.Path}
	case !d.Has(ra.Body, "path"):
		d.errorf(ra.DefRange, "%s: give path (the adapter already on every node) or a weights block (a hub repository, the adapter's source, or urls: what each node's store fetches and verifies)", who)
	}
}

// The values of adapter_loading (Model.AdapterLoading).
const (
	AdapterLoadingRuntime = "runtime"
	AdapterLoadingStart   = "start"
)

func checkAdapterLoading(v string) error {
	if v != AdapterLoadingRuntime && v != AdapterLoadingStart {
		return fmt.Errorf("adapter_loading: want %q (the engine's runtime API, where it has one) or %q (on the engine's command line), got %q",
			AdapterLoadingRuntime, AdapterLoadingStart, v)
	}
	return nil
}

func checkScale(s float64) error {
	if math.IsNaN(s) || math.IsInf(s, 0) || s <= 0 || s > maxAdapterScale {
		return fmt.Errorf("scale: want a number above 0 and at most %d, got %v", maxAdapterScale, s)
	}
	return nil
}

// AdapterSpec is what the model's replicas serve of adapters, as the
// engines' recipes take it (engine.AdapterArgs), for the checks of the
// catalog and of render. An adapter the stores fetch has its link's path
// under a task directory of "/" there: the driver renders the real one,
// under the replica's.
func (m Model) AdapterSpec() engine.AdapterSpec {
	s := engine.AdapterSpec{Slots: m.MaxAdapters}
	for _, a := range m.Adapters {
		p := a.Weights.Path
		if a.Fetched() {
			p = "/" + a.EnginePath()
		}
		s.Adapters = append(s.Adapters, engine.Adapter{Name: a.Name, Path: p, Rank: a.Rank})
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
	if m.AdapterLoading != "" {
		if err := checkAdapterLoading(m.AdapterLoading); err != nil {
			errs = append(errs, errAt(m.Pos, fmt.Sprintf("model %q: %v", m.Name, err)))
		}
	}
	if len(m.Adapters) == 0 {
		if m.MaxAdapters != 0 {
			errs = append(errs, errAt(m.Pos, fmt.Sprintf("model %q: max_adapters %d without an adapter", m.Name, m.MaxAdapters)))
		}
		if m.AdapterLoading != "" {
			errs = append(errs, errAt(m.Pos, fmt.Sprintf("model %q: adapter_loading %q without an adapter", m.Name, m.AdapterLoading)))
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
	links := map[string]string{} // the links of adapters the stores fetch, by path tail
	for _, a := range m.Adapters {
		if a.Fetched() {
			links["/"+a.EnginePath()] = a.Name
		}
	}
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
		switch err := a.Weights.Validate(); {
		case a.Weights.Path == "" && !a.Fetched():
			at(a, "give path (the adapter already on every node) or weights (a hub repository or urls, which each node's store fetches)")
		case err != nil && !a.Fetched():
			at(a, "%s", strings.TrimPrefix(err.Error(), "weights."))
		case err != nil:
			at(a, "%v", err)
		case a.Fetched():
			if err := weightsapi.CheckAdapterLinkName(a.Name); err != nil {
				at(a, "the name of an adapter the nodes' stores fetch: %v", err)
			}
		case paths[a.Weights.Path] != "" && !dupName:
			// llama.cpp lists its adapters by path (GET /lora-adapters),
			// which is how llmgw tells them apart.
			at(a, "path %q is also adapter %q's", a.Weights.Path, paths[a.Weights.Path])
		default:
			paths[a.Weights.Path] = a.Name
			for tail, other := range links {
				if strings.HasSuffix(a.Weights.Path, tail) {
					at(a, "path %q ends as adapter %q's link in the replicas' task directories (%s): the engines' lists would not tell them apart", a.Weights.Path, other, strings.TrimPrefix(tail, "/"))
				}
			}
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
