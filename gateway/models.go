package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/llmgw/llmgw/gatewayapi"
	"github.com/llmgw/llmgw/internal/blockingquery"
)

// ModelSource publishes the controller's model list: publish(list, nil)
// every time it changes, publish(_, err) when it cannot be read (the last
// list stands). publish is not called concurrently.
type ModelSource interface {
	Run(ctx context.Context, publish func(gatewayapi.ModelList, error)) error
}

// StaticModels publishes one fixed list: for tests and fixed fleets.
type StaticModels gatewayapi.ModelList

// Run publishes the list and waits for ctx.
func (s StaticModels) Run(ctx context.Context, publish func(gatewayapi.ModelList, error)) error {
	publish(gatewayapi.ModelList(s), nil)
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
func (s *NomadModels) Run(ctx context.Context, publish func(gatewayapi.ModelList, error)) error {
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
				publish(gatewayapi.ModelList{}, nil)
				return
			}
			l, err := gatewayapi.ParseModelList(v.Items)
			if err != nil {
				err = fmt.Errorf("nomad variable %s (namespace %s): %w", path, ns, err)
				log.Warn("model list", "error", err)
			}
			publish(l, err)
		},
		OnError: func(err error, _ time.Duration) {
			err = fmt.Errorf("read nomad variable %s (namespace %s): %w", path, ns, err)
			log.Warn("model list", "error", err)
			publish(gatewayapi.ModelList{}, err)
		},
	}
	w.Run(ctx)
	return nil
}
