package reconcile

import (
	"fmt"

	"github.com/llmgw/llmgw/facility"
)

// Spare is a node that keeps a model's weights fetched without serving it
// (the catalog's warm_spares), so that a replacement or a scale-up landing
// there need not wait for a fetch.
type Spare struct {
	Model string
	Key   string // weightsapi key of the weights
	Node  string
	// Held: the node's store holds them whole already; else the
	// controller has them fetched there.
	Held bool
	// Reason is facility.WarmSpare's, in words.
	Reason string
}

// Spares picks each model's warm spares (facility.WarmSpares: nodes that
// serve nothing of it where a replacement or a scale-up would land, apart
// from its replicas, a node holding the weights first) beside every job of
// in.Jobs. Pure: what the controller fetches follows from it.
func Spares(in Input) ([]Spare, error) {
	var models []facility.Model
	for _, m := range in.Catalog.Models {
		if m.WarmSpares > 0 && m.Weights != nil && m.Weights.Key() != "" {
			models = append(models, m)
		}
	}
	if len(models) == 0 {
		return nil, nil
	}
	ws, err := in.Planners.WarmSpares(in.Fleet, in.Facility, models, runningReplicas(in))
	if err != nil {
		return nil, fmt.Errorf("warm spares: %w", err)
	}
	out := make([]Spare, 0, len(ws))
	for _, w := range ws {
		out = append(out, Spare{Model: w.Model, Key: w.Fetch.Key, Node: w.Node, Held: w.Fetch.Present, Reason: w.Reason})
	}
	return out, nil
}
