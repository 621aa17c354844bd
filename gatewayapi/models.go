package gatewayapi

import (
	"encoding/json"
	"errors"
	"fmt"
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
// negative count.
func (l ModelList) Check() error {
	seen := map[string]bool{}
	var errs []error
	for i, m := range l.Models {
		switch {
		case m.Name == "":
			errs = append(errs, fmt.Errorf("models[%d]: empty name", i))
		case seen[m.Name]:
			errs = append(errs, fmt.Errorf("models[%d]: %q listed twice", i, m.Name))
		}
		seen[m.Name] = true
		if !ValidRouting(m.Routing) {
			errs = append(errs, fmt.Errorf("models[%d] (%s): routing %q: want %q or %q", i, m.Name, m.Routing, RoutingLeastOutstanding, RoutingPrefix))
		}
		if m.Min < 0 || m.Replicas < 0 {
			errs = append(errs, fmt.Errorf("models[%d] (%s): min %d, replicas %d: want 0 or more", i, m.Name, m.Min, m.Replicas))
		}
	}
	return errors.Join(errs...)
}
