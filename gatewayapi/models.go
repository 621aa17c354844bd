package gatewayapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path"
	"strings"
)

// ModelList is what the controller publishes of its catalog for the
// gateways, in ModelsVariable.
type ModelList struct {
	Models []ListedModel `json:"models"`
}

// ListedModel is one model of the catalog.
type ListedModel struct {
	Name string `json:"name"`
	// Min is the fewest replicas the catalog lets the model have. 0: it
	// may scale to zero, and the gateway holds its requests while it has
	// no serving replica.
	Min int `json:"min"`
	// Replicas is how many replicas the controller wants the model to
	// have now; 0: it is scaled to zero.
	Replicas int `json:"replicas"`
	// Routing is how the gateways choose the replica of each request:
	// RoutingLeastOutstanding (also when empty) or RoutingPrefix. A
	// gateway's own setting for the model overrides it.
	Routing string `json:"routing,omitempty"`
	// Adapters are the model's LoRA adapters, in the order its replicas
	// load them (the catalog's). A request names one as the model
	// (docs/controller.md, "LoRA adapters").
	Adapters []ListedAdapter `json:"adapters,omitempty"`
	// MaxAdapters is how many adapters one replica holds on its GPUs at
	// once (the catalog's max_adapters); 0: every adapter.
	MaxAdapters int `json:"max_adapters,omitempty"`
}

// ListedAdapter is one LoRA adapter of a listed model: what a gateway
// needs to name it in a request to a replica. vLLM and SGLang take the
// name as the request's model; llama.cpp numbers its adapters in the
// order they loaded and lists them, by id, path and scale, at GET
// /lora-adapters, where Path finds the id of this one (a replica that
// left a bad adapter out numbers the rest without it).
type ListedAdapter struct {
	Name string `json:"name"`
	// Path is the adapter as the replicas load it: an absolute path, a
	// file or directory on the nodes; or a relative one, for an adapter
	// the nodes' stores fetch, which each replica loads from that path
	// under its own task directory (LoadedFrom).
	Path string `json:"path"`
	// Scale is how strongly the adapter applies (llama.cpp's per-request
	// "lora" scale); above 0.
	Scale float64 `json:"scale"`
}

// LoadedFrom reports whether p, a path an engine lists an adapter it
// loaded from, is a's: Path itself, or, where Path is relative, a path
// that ends in "/" + Path (the replica's task directory before it).
func (a ListedAdapter) LoadedFrom(p string) bool {
	if a.Path == "" {
		return false
	}
	if strings.HasPrefix(a.Path, "/") {
		return p == a.Path
	}
	return strings.HasSuffix(p, "/"+a.Path) && strings.HasPrefix(p, "/")
}

// Routing policies of ListedModel.Routing.
const (
	// RoutingLeastOutstanding sends each request to the replica with the
	// fewest requests in flight per unit of weight: the default.
	RoutingLeastOutstanding = "least-outstanding"
	// RoutingPrefix sends requests that share their prompt's first blocks
	// to the same replica, whose engine has them cached, within a bound
	// on its load (docs/gateway.md, "Prefix routing").
	RoutingPrefix = "prefix"
)

// ValidRouting reports whether p is a routing policy ("" is the default).
func ValidRouting(p string) bool {
	return p == "" || p == RoutingLeastOutstanding || p == RoutingPrefix
}

// Holdable reports whether requests for m are held while it has no
// serving replica: it may be, or is, at zero.
func (m ListedModel) Holdable() bool { return m.Min == 0 || m.Replicas == 0 }

// Items encodes l as the variable's items.
func (l ModelList) Items() (map[string]string, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	if l.Models == nil {
		l.Models = []ListedModel{}
	}
	b, err := json.Marshal(l.Models)
	if err != nil {
		return nil, err
	}
	return map[string]string{ModelsItem: string(b)}, nil
}

// ParseModelList decodes the variable's items. Every problem names the
// item and the entry.
func ParseModelList(items map[string]string) (ModelList, error) {
	raw, ok := items[ModelsItem]
	if !ok {
		return ModelList{}, fmt.Errorf("no item %q", ModelsItem)
	}
	var l ModelList
	if err := json.Unmarshal([]byte(raw), &l.Models); err != nil {
		return ModelList{}, fmt.Errorf("item %q: %w", ModelsItem, err)
	}
	if err := l.Check(); err != nil {
		return ModelList{}, fmt.Errorf("item %q: %w", ModelsItem, err)
	}
	return l, nil
}

// Check reports every problem of the list: an empty or repeated name, a
// negative count, an adapter without a name, path or scale, or with a
// name taken by a model or another adapter.
func (l ModelList) Check() error {
	seen := map[string]bool{}
	for _, m := range l.Models {
		seen[m.Name] = true
	}
	adapterSeen := map[string]string{}
	var errs []error
	names := map[string]bool{}
	for i, m := range l.Models {
		switch {
		case m.Name == "":
			errs = append(errs, fmt.Errorf("models[%d]: empty name", i))
		case names[m.Name]:
			errs = append(errs, fmt.Errorf("models[%d]: %q listed twice", i, m.Name))
		}
		names[m.Name] = true
		errs = append(errs, checkAdapters(i, m, seen, adapterSeen)...)
		if !ValidRouting(m.Routing) {
			errs = append(errs, fmt.Errorf("models[%d] (%s): routing %q: want %q or %q", i, m.Name, m.Routing, RoutingLeastOutstanding, RoutingPrefix))
		}
		if m.MaxAdapters < 0 {
			errs = append(errs, fmt.Errorf("models[%d] (%s): max_adapters %d: want 0 (every adapter) or more", i, m.Name, m.MaxAdapters))
		}
		if m.Min < 0 || m.Replicas < 0 {
			errs = append(errs, fmt.Errorf("models[%d] (%s): min %d, replicas %d: want 0 or more", i, m.Name, m.Min, m.Replicas))
		}
	}
	return errors.Join(errs...)
}

// checkAdapters reports the problems of the adapters of m, models[i]:
// models holds every model's name, adapters each adapter seen so far with
// its entry.
func checkAdapters(i int, m ListedModel, models map[string]bool, adapters map[string]string) []error {
	var errs []error
	paths := map[string]bool{}
	for j, a := range m.Adapters {
		at := fmt.Sprintf("models[%d] (%s): adapters[%d]", i, m.Name, j)
		switch {
		case a.Name == "":
			errs = append(errs, fmt.Errorf("%s: empty name", at))
		case models[a.Name]:
			errs = append(errs, fmt.Errorf("%s: name %q is a model's", at, a.Name))
		case adapters[a.Name] != "":
			errs = append(errs, fmt.Errorf("%s: name %q is also %s", at, a.Name, adapters[a.Name]))
		default:
			adapters[a.Name] = at
		}
		switch {
		case a.Path == "":
			errs = append(errs, fmt.Errorf("%s (%s): empty path", at, a.Name))
		case !strings.HasPrefix(a.Path, "/") && (path.Clean(a.Path) != a.Path || a.Path == ".." || strings.HasPrefix(a.Path, "../")):
			errs = append(errs, fmt.Errorf("%s (%s): path %q: want an absolute path, or a clean one under the replica's task directory", at, a.Name, a.Path))
		case paths[a.Path]:
			errs = append(errs, fmt.Errorf("%s (%s): path %q given twice in the model", at, a.Name, a.Path))
		}
		paths[a.Path] = true
		if math.IsNaN(a.Scale) || math.IsInf(a.Scale, 0) || a.Scale <= 0 {
			errs = append(errs, fmt.Errorf("%s (%s): scale %v: want a number above 0", at, a.Name, a.Scale))
		}
	}
	return errs
}
