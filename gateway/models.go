package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/blockingquery"
)

// ModelList is what the controller publishes of its catalog for the
// gateways, in gatewayapi.ModelsVariable.
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
}

// Holdable reports whether requests for m are held while it has no
// serving replica: it may be, or is, at zero.
func (m ListedModel) Holdable() bool { return m.Min == 0 || m.Replicas == 0 }

// Items encodes l as the variable's items.
func (l ModelList) Items() (map[string]string, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	if l.Models == nil {
		l.Models = []ListedModel{}
	}
	b, err := json.Marshal(l.Models)
	if err != nil {
		return nil, err
	}
	return map[string]string{gatewayapi.ModelsItem: string(b)}, nil
}

// ParseModelList decodes the variable's items. Every problem names the
// item and the entry.
func ParseModelList(items map[string]string) (ModelList, error) {
	raw, ok := items[gatewayapi.ModelsItem]
	if !ok {
		return ModelList{}, fmt.Errorf("no item %q", gatewayapi.ModelsItem)
	}
	var l ModelList
	if err := json.Unmarshal([]byte(raw), &l.Models); err != nil {
		return ModelList{}, fmt.Errorf("item %q: %w", gatewayapi.ModelsItem, err)
	}
	if err := l.check(); err != nil {
		return ModelList{}, fmt.Errorf("item %q: %w", gatewayapi.ModelsItem, err)
	}
	return l, nil
}

func (l ModelList) check() error {
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
		if m.Min < 0 || m.Replicas < 0 {
			errs = append(errs, fmt.Errorf("models[%d] (%s): min %d, replicas %d: want 0 or more", i, m.Name, m.Min, m.Replicas))
		}
	}
	return errors.Join(errs...)
}

// ModelSource publishes the controller's model list: publish(list, nil)
// every time it changes, publish(_, err) when it cannot be read (the last
// list stands). publish is not called concurrently.
type ModelSource interface {
	Run(ctx context.Context, publish func(ModelList, error)) error
}

// StaticModels publishes one fixed list: for tests and fixed fleets.
type StaticModels ModelList

// Run publishes the list and waits for ctx.
func (s StaticModels) Run(ctx context.Context, publish func(ModelList, error)) error {
	publish(ModelList(s), nil)
	<-ctx.Done()
	return nil
}

// NomadModels reads the model list from a Nomad Variable with a blocking
// query: a change reaches the gateway as soon as Nomad has it. A variable
// that does not exist is an empty list (a controller that has not written
// it yet: no model is known at zero); one that cannot be read or decoded
// is an error, and the last list stands.
type NomadModels struct {
	Client *nomadapi.Client
	Logger *slog.Logger
	// Namespace of the variable; "default" when empty.
	Namespace string
	// Path of the variable; gatewayapi.ModelsVariable when empty.
	Path string
	// Wait bounds each blocking query; 5 minutes by default.
	Wait time.Duration
}

// Run watches the variable until ctx ends.
func (s *NomadModels) Run(ctx context.Context, publish func(ModelList, error)) error {
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ns, path := s.Namespace, s.Path
	if ns == "" {
		ns = nomadapi.DefaultNamespace
	}
	if path == "" {
		path = gatewayapi.ModelsVariable
	}
	w := blockingquery.Watch[*nomadapi.Variable]{
		Wait:    s.Wait,
		Backoff: discoveryBackoff(),
		Fetch: blockingquery.Nomad(func(q *nomadapi.QueryOptions) (*nomadapi.Variable, *nomadapi.QueryMeta, error) {
			q.Namespace = ns
			return s.Client.Variables().Peek(path, q)
		}),
		OnAnswer: func(v *nomadapi.Variable, _ uint64) {
			if v == nil {
				publish(ModelList{}, nil)
				return
			}
			l, err := ParseModelList(v.Items)
			if err != nil {
				err = fmt.Errorf("nomad variable %s (namespace %s): %w", path, ns, err)
				log.Warn("model list", "error", err)
			}
			publish(l, err)
		},
		OnError: func(err error, _ time.Duration) {
			err = fmt.Errorf("read nomad variable %s (namespace %s): %w", path, ns, err)
			log.Warn("model list", "error", err)
			publish(ModelList{}, err)
		},
	}
	w.Run(ctx)
	return nil
}
