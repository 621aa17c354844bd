package facility

import (
	"fmt"

	"github.com/llmgw/llmgw/engine"
)

// Layout returns the profile's layout as given (zero fields unset).
func (p Profile) Layout() engine.Layout {
	return engine.Layout{Tensor: p.TensorParallel, Pipeline: p.PipelineParallel, Data: p.DataParallel, Expert: p.ExpertParallel}
}

// ResolvedLayout is the profile's layout with the engine's defaults
// filled in, checked against nodes × gpus (what Validate checks).
func (p Profile) ResolvedLayout() (engine.Layout, error) {
	d, ok := engine.Lookup(p.Engine)
	if !ok {
		return engine.Layout{}, fmt.Errorf("engine: %w", engine.Unknown(p.Engine))
	}
	return d.Resolve(p.Layout(), engine.Shape{GPUs: p.GPUs, Nodes: max(p.Nodes, 1), Args: p.Args})
}

// checkEngine checks what the profile asks of its engine: a known
// engine, a layout that spans exactly nodes × gpus as the engine counts
// GPUs, no nodes > 1 for an engine that runs on one node, args that leave
// llmgw's flags alone.
// Errors name the field.
func (p Profile) checkEngine(m Model) error {
	d, ok := engine.Lookup(p.Engine)
	if !ok {
		return fmt.Errorf("engine: %w", engine.Unknown(p.Engine))
	}
	if p.GPUs < 1 || p.Nodes < 1 {
		return nil // reported on their own
	}
	if _, err := p.ResolvedLayout(); err != nil {
		return err
	}
	if err := d.CheckArgs(p.Args, d.ServedNameFlag != ""); err != nil {
		return err
	}
	return nil
}
